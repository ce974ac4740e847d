"""Thinking phases against a real `loadgen sim` process over real sockets: the simulator
thinks (reasoning of a drawn length, `</think>`, the answer; the reasoning under vLLM's
`reasoning` field behind `--reasoning-parser`; its own acceptance per phase) and writes
each request's phases as generated to --trace, its ground truth. The `loadgen` CLI sees
only the stream; its per-request phases must be the trace's, and its AL per phase the
configured one."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.metrics.phases import PhaseMethod, request_phases
from loadgen.records import ArrivalStamps, RequestRecord
from loadgen.sim.trace import read_trace
from tests.support.procs import free_port, point, run_loadgen, start_sim, stop

REASONING_AL, ANSWER_AL = 2.6, 1.8  # K=2: rates [1, 0.6] and [0.8, 0]
SPECULATIVE = (
    '{"method":"mtp","num_speculative_tokens":2,"rejection_sample_method":"synthetic",'
    f'"synthetic_acceptance_length":{ANSWER_AL}}}'
)
CONC, PROMPTS = 8, 48


@pytest.fixture
def thinking_run(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    port, trace = free_port(), tmp_path / "sim.trace.jsonl"
    sim = start_sim(
        port,
        tmp_path / "sim.log",
        "--reasoning-parser",
        "deepseek_v4",
        "--reasoning-lengths",
        "high=96",
        "--reasoning-acceptance-length",
        str(REASONING_AL),
        "--speculative-config",
        SPECULATIVE,
        "--step-fixed-ms",
        "1",
        "--trace",
        str(trace),
    )
    try:
        results = tmp_path / "results"
        done: subprocess.CompletedProcess[str] = run_loadgen(
            [
                "--base-url",
                f"http://127.0.0.1:{port}",
                "--endpoint",
                "chat",
                "--reasoning-effort",
                "high",
                "--record-outputs",
                "--isl",
                "256",
                "--osl",
                "256",
                "--conc",
                str(CONC),
                "--prompts-per-conc",
                str(PROMPTS // CONC),
                "--warmup-per-conc",
                "0",
                "--spec-tokens",
                "2",
                "--no-progress",
                "--results",
                str(results),
            ],
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        yield results, trace
    finally:
        stop(sim)


def _records(results: Path) -> list[RequestRecord]:
    lines = (results / f"requests_conc_{CONC}.jsonl").read_bytes().splitlines()
    return [RequestRecord.from_dict(orjson.loads(line)) for line in lines if line.strip()]


def _truth(trace: Path) -> dict[int, dict[str, Any]]:
    return {int(t["x_request_id"].rsplit("-", 1)[1]): t for t in read_trace(trace)}


def test_each_requests_phases_are_the_traces_truth(thinking_run: tuple[Path, Path]) -> None:
    results, trace = thinking_run
    truth, records = _truth(trace), _records(results)
    assert len(records) == PROMPTS
    answered = never = 0
    lags: list[int] = []
    for record in records:
        true = truth[record.request_id]
        phases = request_phases(record, thinking=True)
        assert phases.method is PhaseMethod.FIELDS
        assert phases.anomalies == ()
        # tokens exactly
        assert phases.reasoning_tokens == true["reasoning_tokens"], record.request_id
        assert phases.answer_tokens == true["answer_tokens"]
        assert true["reasoning_tokens"] + true["answer_tokens"] == record.output_tokens
        j = true["first_answer_chunk"]
        if j is None:  # cut by max_tokens inside the reasoning: counted, no TTFA
            never += 1
            assert phases.reasoning_only and phases.ttfa_ms is None
            continue
        answered += 1
        # TTFA is the stamp of the very chunk that carried the first answer token...
        assert phases.ttfa_ms == (record.chunk_ns[j] - record.start_ns) / 1e6
        # ...a kernel receive stamp, which cannot precede the step that produced it; how
        # far it is from the simulator's clock read after its write is shown, not held to
        # a window (the machine's load sets it)
        assert record.arrival_stamps is ArrivalStamps.KERNEL
        intended, sent, _ = true["chunks"][j]
        assert record.chunk_ns[j] >= intended
        lags.append(record.chunk_ns[j] - sent)
        assert j > 0  # TTFA > TTFT: the first token is reasoning
    assert answered > PROMPTS // 2  # the point has both kinds, or it says little
    lags.sort()
    print(
        f"TTFA stamp - simulator's send clock (us): median {lags[len(lags) // 2] / 1e3:.1f}, "
        f"min {lags[0] / 1e3:.1f}, max {lags[-1] / 1e3:.1f}, {answered} requests"
    )
    point_file = point(results, CONC)
    assert point_file["reasoning_only_requests"] == never
    assert point_file["total_reasoning_tokens"] == sum(
        t["reasoning_tokens"] for t in truth.values()
    )


def test_acceptance_per_phase_is_the_configured_one(thinking_run: tuple[Path, Path]) -> None:
    results, _ = thinking_run
    figures = point(results, CONC)
    print(
        f"AL reasoning {figures['reasoning_acceptance_length']:.4f} (configured {REASONING_AL}),"
        f" answer {figures['answer_acceptance_length']:.4f} (configured {ANSWER_AL})"
    )
    assert figures["reasoning_acceptance_length"] == pytest.approx(REASONING_AL, rel=0.02)
    assert figures["answer_acceptance_length"] == pytest.approx(ANSWER_AL, rel=0.02)
