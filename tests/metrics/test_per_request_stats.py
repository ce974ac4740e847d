"""vLLM 0.32's per-request `metrics` (spec-decode stats and timings) read from a real
simulator speaking the same shapes, through the real CLI: each record keeps them, the point
gets the per-request AL beside the stream's and the counters', and the client-minus-server
TTFT.

The simulator's per-request histograms and its /metrics counters come from the same draws,
and with no warmup the point's requests are the only traffic between the two scrapes: so
the pooled per-request AL equals the counters' AL exactly, not within noise.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.results.jsonl import read_jsonl
from tests.support.procs import point, run_loadgen

SIM_FLAGS = (
    "--step-fixed-ms 2 --spin-us 0 --per-request-spec-decode-metrics detailed "
    "--enable-per-request-metrics"
)


def spec_config(k: int, al: float) -> str:
    return orjson.dumps(
        {
            "method": "mtp",
            "num_speculative_tokens": k,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": al,
        }
    ).decode()


def run(
    tmp_path: Path, sim_args: str, osl: int = 129, name: str = "r", output: list[str] | None = None
) -> Path:
    results = tmp_path / name
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            sim_args,
            "--conc",
            "4",
            "--isl",
            "48",
            "--osl",
            str(osl),
            "--encoder",
            "raw",
            "--prompts-per-conc",
            "3",
            "--warmup-per-conc",
            "0",
            "--no-progress",
            "--results",
            str(results),
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if output is not None:
        output.append(done.stdout + done.stderr)
    return results


def test_every_draft_accepted_gives_four_from_all_three_sources(tmp_path: Path) -> None:
    # K=3, AL forced to 4.0 (what draft_model = target gives on vLLM); 129 = 1 + 4 * 32
    results = run(tmp_path, f"{SIM_FLAGS} --speculative-config '{spec_config(3, 4.0)}'")
    p = point(results, 4)
    assert p["stream_acceptance_length"] == 4.0
    assert p["server_acceptance_length"] == 4.0
    assert p["server_request_acceptance_length"] == 4.0
    assert p["server_request_al_min"] == p["server_request_al_max"] == 4.0
    assert p["server_request_acceptance_per_position"] == [1.0, 1.0, 1.0]
    assert p["server_request_spec_requests"] == 12 and p["server_request_spec_steps"] == 12 * 32
    assert p["acceptance_length_source"] == "stream"
    records = read_jsonl(results / "requests_conc_4.jsonl")
    for record in records:
        stats = record.server_spec_decode
        assert stats is not None and stats.acceptance_histogram == (0, 0, 0, 32)
        assert stats.per_step_accepted == (3,) * 32 and stats.per_step_drafted == (3,) * 32


def test_pooled_per_request_al_is_the_counters_al_and_ttft_splits(tmp_path: Path) -> None:
    results = run(tmp_path, f"{SIM_FLAGS} --speculative-config '{spec_config(2, 2.27)}'")
    p = point(results, 4)
    assert p["server_request_spec_steps"] == p["server_spec_decode_drafts"]
    assert p["server_request_acceptance_length"] == pytest.approx(
        p["server_acceptance_length"], rel=1e-12
    )
    # K=2, rates [1, 0.27]: 2.27 per step, sd 0.44; >= 700 steps: standard error < 0.02
    assert abs(p["server_request_acceptance_length"] - 2.27) < 0.08
    assert abs(p["stream_acceptance_length"] - p["server_request_acceptance_length"]) < 0.08
    assert p["server_request_al_min"] <= p["server_request_al_median"] <= p["server_request_al_max"]
    records = read_jsonl(results / "requests_conc_4.jsonl")
    assert p["server_timing_requests"] == len(records) == 12
    outside = []
    for record in records:
        timings = record.server_timings
        assert timings is not None and timings.time_to_first_token_ms is not None
        assert timings.queue_time_ms is not None and timings.generation_time_ms is not None
        client_ttft = (record.chunk_ns[0] - record.start_ns) / 1e6
        # the simulator stamps its first token at the step's end, before sending it, and
        # the request arrived there after the client sent it: both clocks are this host's
        outside.append(client_ttft - timings.time_to_first_token_ms - timings.queue_time_ms)
    assert min(outside) > 0
    assert p["mean_ttft_outside_server_ms"] == pytest.approx(sum(outside) / len(outside))
    assert p["mean_ttft_minus_server_ttft_ms"] == pytest.approx(
        p["mean_ttft_outside_server_ms"] + p["mean_server_request_queue_time_ms"]
    )


def test_merged_steps_publish_the_per_request_al_labelled(tmp_path: Path) -> None:
    output: list[str] = []
    results = run(
        tmp_path,
        f"{SIM_FLAGS} --stream-interval 4 --speculative-config '{spec_config(2, 2.27)}'",
        output=output,
    )
    p = point(results, 4)
    assert f"{p['acceptance_length']:.2f} (per-request)" in output[0]  # the table says whose
    assert "AL (per-request): from the server's per-request stats" in output[0]
    assert p["stream_acceptance_length"] is None  # chunks carry four steps each
    assert p["acceptance_length_source"] == "server_per_request"
    assert p["acceptance_length"] == p["server_request_acceptance_length"]


def test_nothing_is_invented_when_the_server_sends_no_metrics(tmp_path: Path) -> None:
    results = run(tmp_path, "--step-fixed-ms 2 --spin-us 0", osl=32)
    p = point(results, 4)
    assert p["server_request_acceptance_length"] is None
    assert p["server_request_spec_requests"] is None and p["server_timing_requests"] == 0
    assert p["mean_ttft_minus_server_ttft_ms"] is None
    assert all(
        r.server_spec_decode is None and r.server_timings is None
        for r in read_jsonl(results / "requests_conc_4.jsonl")
    )
