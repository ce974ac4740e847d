"""Each engine dialect through the real CLI against the simulator speaking it (`--sim-args
"--engine X"`): `--engine auto` finds the engine, the server-side acceptance comes from
that engine's own figures (TensorRT-LLM's and ATOM's counters, SGLang's per-request
sglext, llama.cpp: the stream only), and the golden-AL gate passes and fails as for vLLM.

SGLang, TensorRT-LLM and ATOM need GPUs, and llama.cpp a GGUF build: none runs on this
CPU machine, so the simulator speaks their dialects from fixtures transcribed from their
source (tests/fixtures/engines/); real vLLM is checked in tests/integration/test_vllm.py.

Bounds. Forced to AL 4.0 at K=3 every draft is accepted: every source gives exactly 4.0.
Forced to 2.27 at K=2 (rates 1.0, 0.27) each step accepts 1 or 2 drafts, sd 0.44; a point
of 2 x 4 requests of 256 tokens has >= 800 steps, so each source's standard error is
<= 0.016 (0.7% of 2.27): the golden gate's 3% is over 4 standard errors, and a server
forced to 2.0 (11.9% off) fails by far. The counters and the per-request stats count the
same draws as the stream, so they agree with it to far better than 0.05.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.procs import one_error_line, point, run_file, run_loadgen

GOLDEN = """\
deepseek-v4-pro:
  thinking_on:
    2: 2.27
    3: 4.0
"""
# the source that carries each engine's server-side acceptance
SERVER_SOURCE = {
    "trtllm": "server_acceptance_length",
    "atom": "server_acceptance_length",
    "sglang": "server_request_acceptance_length",
}


def speculative(k: int, al: float) -> str:
    config = orjson.dumps(
        {
            "method": "mtp",
            "num_speculative_tokens": k,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": al,
        }
    ).decode()
    return f"--speculative-config '{config}'"


def run(
    tmp_path: Path, engine: str, sim: str, *extra: str, name: str = "r"
) -> tuple[int, str, Path]:
    results = tmp_path / name
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            f"--engine {engine} --step-fixed-ms 2 --spin-us 0 {sim}",
            "--conc",
            "2",
            "--isl",
            "48",
            "--osl",
            "256",
            "--encoder",
            "raw",
            "--prompts-per-conc",
            "4",
            "--warmup-per-conc",
            "0",
            "--no-progress",
            "--results",
            str(results),
            *extra,
        ],
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr, results


def golden(tmp_path: Path) -> list[str]:
    path = tmp_path / "golden.yaml"
    path.write_text(GOLDEN)
    return ["--golden-al", str(path), "--golden-al-model", "deepseek-v4-pro"]


@pytest.mark.parametrize("engine", ["trtllm", "atom", "sglang"])
def test_every_source_gives_the_forced_al_exactly(tmp_path: Path, engine: str) -> None:
    code, output, results = run(tmp_path, engine, speculative(3, 4.0), *golden(tmp_path))
    assert code == 0, output
    p = point(results, 2)
    assert p["stream_acceptance_length"] == 4.0
    assert p[SERVER_SOURCE[engine]] == 4.0
    assert p["golden_acceptance_ok"] is True
    server = run_file(results)["server"]
    assert server["engine"] == engine and "series" in server["engine_reason"]
    assert f"loadgen: engine {engine} (" in output  # said once, before the points
    assert output.count("loadgen: engine ") == 1


@pytest.mark.parametrize("engine", ["trtllm", "atom", "sglang"])
def test_merged_chunks_leave_the_gate_to_the_engines_own_acceptance(
    tmp_path: Path, engine: str
) -> None:
    """Chunks of 4 steps void the stream: the gate holds the engine's own AL, which
    passes at 2.27 and fails at 2.0."""
    merged = "--stream-interval 4 "
    code, output, results = run(
        tmp_path, engine, merged + speculative(2, 2.27), *golden(tmp_path), name="ok"
    )
    assert code == 0, output
    p = point(results, 2)
    assert p["stream_acceptance_length"] is None
    source = "server_per_request" if engine == "sglang" else "server_counters"
    assert p["acceptance_length_source"] == source
    assert abs(p[SERVER_SOURCE[engine]] - 2.27) < 0.05
    assert p["golden_acceptance_ok"] is True

    code, output, results = run(
        tmp_path, engine, merged + speculative(2, 2.0), *golden(tmp_path), name="off"
    )
    assert code == 1, output
    p = point(results, 2)
    assert p["golden_acceptance_ok"] is False and p["acceptance_length_source"] == source
    assert -0.15 < p["golden_acceptance_drift"] < -0.08
    assert "conc 2: acceptance outside --golden-al" in output


def test_sglang_gauges_are_never_a_published_acceptance(tmp_path: Path) -> None:
    """The simulator's sglang:spec_accept_length gauge holds an AL all the time; loadgen
    publishes no server_acceptance_* from it, and run.json says why."""
    code, output, results = run(tmp_path, "sglang", speculative(2, 2.27))
    assert code == 0, output
    p = point(results, 2)
    counters: dict[str, Any] = {k: v for k, v in p.items() if k.startswith("server_acceptance")}
    assert counters and all(v is None for v in counters.values()), counters
    assert p["server_spec_decode_drafts"] is None
    assert abs(p["server_request_acceptance_length"] - p["stream_acceptance_length"]) < 0.05
    why = run_file(results)["server"]["engine_unavailable"]["server_acceptance_length"]
    assert "gauges" in why
    # its TTFT histogram is read; its ITL histogram counts tokens, so it is not
    assert p["server_mean_ttft_ms"] is not None and p["server_mean_itl_ms"] is None


def test_llamacpp_gives_the_stream_and_says_what_it_cannot(tmp_path: Path) -> None:
    code, output, results = run(
        tmp_path, "llamacpp", speculative(2, 2.27), "--spec-tokens", "2", *golden(tmp_path)
    )
    assert code == 0, output
    p = point(results, 2)
    assert abs(p["stream_acceptance_length"] - 2.27) < 0.05
    assert p["server_acceptance_length"] is None and p["server_mean_ttft_ms"] is None
    assert p["golden_acceptance_ok"] is True
    unavailable = run_file(results)["server"]["engine_unavailable"]
    assert "server_mean_ttft_ms" in unavailable and "server_acceptance_length" in unavailable


@pytest.mark.parametrize(("given", "engine"), [("sglang", "trtllm"), ("vllm", "atom")])
def test_a_wrong_engine_by_hand_is_one_line(tmp_path: Path, given: str, engine: str) -> None:
    code, output, results = run(tmp_path, engine, "", "--engine", given)
    assert code == 2, output
    line = one_error_line(output)
    assert f"--engine {given}: the server is {engine}" in line, output
    assert f"pass --engine {engine} or --engine auto" in line
    assert not (results / "conc_2.json").exists()


def test_the_right_engine_by_hand_is_confirmed(tmp_path: Path) -> None:
    code, output, results = run(tmp_path, "atom", "", "--engine", "atom", "--osl", "16")
    assert code == 0, output
    server = run_file(results)["server"]
    assert server["engine"] == "atom" and server["engine_reason"].startswith(
        "--engine atom, confirmed"
    )
