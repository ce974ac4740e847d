"""The over-saturation stop against the real simulator over real sockets.

The simulator runs at most 2 sequences, 10 ms a step, 32 output tokens (MTP, ~14 steps):
about 14 requests/s at most. 60 req/s is four times that; 4 req/s a quarter. Seeds fixed
(loadgen's arrivals, the simulator's acceptance draws).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.records import ErrorKind
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions, sweep_points

SLOW_SIM = (
    "--step-fixed-ms",
    "10",
    "--decode-token-us",
    "20",
    "--prefill-token-us",
    "2",
    "--spin-us",
    "0",
    "--seed",
    "7",
    "--max-num-seqs",
    "2",
)
DURATION_S = 8.0


def spec_at(tmp_path: Path, rate: float, **changes: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        conc=(256, 512),
        isl=64,
        osl=32,
        prompts_per_conc=1,
        warmup_per_conc=0,
        sim=True,
        sim_args=SLOW_SIM,
        results_dir=tmp_path / "results",
        progress=False,
        seed=5,
        request_rate=rate,
        duration_s=DURATION_S,
        saturation_window_s=2.0,
    )
    values.update(changes)
    return RunSpec.flat(**values)


async def test_a_rate_above_capacity_stops_saturated_before_its_duration(
    tmp_path: Path, tokenizer: Tokenizer, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = await sweep_points(spec_at(tmp_path, 60.0), SweepOptions(tokenizer=tokenizer))
    assert [p.conc for p in outcome.points] == [256]  # the rate sweep ends upward
    assert outcome.exit_code == 0 and not outcome.interrupted
    result = orjson.loads((outcome.results_dir / "conc_256.json").read_bytes())
    assert result["complete"] is False and result["stop_reason"] == "saturated"
    assert "over-saturated" in result["stop_detail"]
    assert result["duration"] < DURATION_S / 2  # stopped, not run out
    records = read_jsonl(outcome.results_dir / "requests_conc_256.jsonl")
    due = sorted(r.scheduled_ns for r in records)
    assert (due[-1] - due[0]) / 1e9 < DURATION_S / 2  # nothing sent after the stop
    assert any(r.error is ErrorKind.CANCELLED for r in records)  # in flight: cancelled
    assert any(r.ok for r in records)
    err = capsys.readouterr().err
    assert "conc 256 stopped early, over-saturated" in err and "conc 512" in err
    assert "s into the point" in result["stop_detail"]
    run = orjson.loads((outcome.results_dir / "run.json").read_bytes())
    assert run["interrupted"] is False


async def test_a_rate_below_capacity_runs_to_its_end(tmp_path: Path, tokenizer: Tokenizer) -> None:
    outcome = await sweep_points(
        spec_at(tmp_path, 4.0, conc=(256,)), SweepOptions(tokenizer=tokenizer)
    )
    result = orjson.loads((outcome.results_dir / "conc_256.json").read_bytes())
    assert result["complete"] is True and result["stop_reason"] is None
    records = read_jsonl(outcome.results_dir / "requests_conc_256.jsonl")
    assert all(r.ok for r in records) and len(records) >= 20  # ~32 arrivals in 8 s
    due = sorted(r.scheduled_ns for r in records)
    assert (due[-1] - due[0]) / 1e9 > DURATION_S * 0.75  # it sent for the whole duration


async def test_the_stop_can_be_switched_off(tmp_path: Path, tokenizer: Tokenizer) -> None:
    outcome = await sweep_points(
        spec_at(tmp_path, 60.0, conc=(256,), duration_s=3.0, saturation_stop=False),
        SweepOptions(tokenizer=tokenizer),
    )
    result = orjson.loads((outcome.results_dir / "conc_256.json").read_bytes())
    assert result["complete"] is True and result["stop_reason"] is None
    records = read_jsonl(outcome.results_dir / "requests_conc_256.jsonl")
    assert all(r.ok for r in records)
