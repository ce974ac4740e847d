"""`--find-max rate` whose upper rate is far above what the embedded simulator serves: the
over-saturation stop ends those probes early, and the search counts them as failing
loads (capacity.json says `failed_because: saturated`), not as errors, and answers below.

The simulator runs at most 2 sequences, 10 ms a step, 32 output tokens (MTP, ~14 steps):
about 14 requests/s at most (tests/run/test_saturation_sim.py); 60 req/s is four times that.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.support.procs import run_loadgen

SLOW_SIM = (
    "--step-fixed-ms 10 --decode-token-us 20 --prefill-token-us 2 --spin-us 0 --seed 7 "
    "--max-num-seqs 2"
)
CAPACITY_RPS = 14.0


def test_saturated_probes_fail_and_the_answer_is_below_them(tmp_path: Path) -> None:
    results = tmp_path / "search"
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            SLOW_SIM,
            "--isl",
            "64",
            "--osl",
            "32",
            "--conc",
            "256",
            "--duration",
            "3",
            "--saturation-window",
            "1",
            "--warmup-per-conc",
            "0",
            "--seed",
            "5",
            "--find-max",
            "rate",
            "--rate-range",
            "4..60",
            "--find-max-resolution",
            "100%",
            "--slo",
            "ttft:p99=5s",
            "--no-progress",
            "--results",
            str(results),
        ]
    )
    assert done.returncode == 0, done.stderr
    capacity = orjson.loads((results / "capacity.json").read_bytes())
    top, low = capacity["probes"][:2]
    assert top["load"] == 60.0 and low["load"] == 4.0
    assert top["failed_because"] == "saturated" and top["passed"] is False
    assert top["complete"] is False
    point = orjson.loads((results / top["results"] / "conc_256.json").read_bytes())
    assert point["stop_reason"] == "saturated"  # the probe's own point says so
    assert low["passed"] is True and low["failed_because"] is None
    assert capacity["finished"] is True
    assert capacity["answer"] is not None and 4.0 <= capacity["answer"] < CAPACITY_RPS
    first_fail = capacity["first_fail"]
    assert first_fail["passed"] is False and first_fail["load"] > capacity["answer"]
    if first_fail["failed_because"] == "saturated":
        assert capacity["binding_objective"] == "saturated"
    assert "rate 60 req/s (conc 256) fails (saturated:" in done.stderr
    assert "is the largest that meets every objective" in done.stderr
    if first_fail["failed_because"] == "saturated":
        assert "req/s (conc 256) fails (saturated); " in done.stderr
