"""InferenceX's AgentX command line (`build_replay_cmd`, typed as tests/config/test_profile_cmd.py
types it: --unsafe-override, a short --benchmark-duration, a local trace) run through the
real CLI against real vLLM 0.32 CPU with prefix caching on.

Only what must differ from the simulator run is changed: the server's URL and served model
name, the tiny model's tokenizer, and --max-context-length set to the server's
--max-model-len (the trace's longest prompt, 1000 tokens, fits its 2048). What this adds
over the simulator test: AIPerf's artifacts and loadgen's prefix-cache figures come out of a
real engine's counters, scraped from its /metrics.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import orjson
import pytest

from tests.support.inferencex import replay_cmd
from tests.support.vllm_servers import VllmServer, vllm_cpu

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

DURATION_S = 10
RECORD_METRICS = (
    "time_to_first_token",
    "request_latency",
    "input_sequence_length",
    "output_sequence_length",
)  # what InferenceX's request_metrics.py reads


def _set(argv: list[str], flag: str, value: str) -> None:
    argv[argv.index(flag) + 1] = value


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_build_replay_cmd_runs_as_typed_against_vllm(
    vllm_plain: VllmServer, tmp_path: Path
) -> None:
    port = urlsplit(vllm_plain.url).port
    assert port is not None
    argv = replay_cmd(port, tmp_path, DURATION_S, "--unsafe-override")
    _set(argv, "--model", vllm_cpu.SERVED_MODEL_NAME)
    _set(argv, "--tokenizer", str(vllm_plain.model))
    _set(argv, "--max-context-length", str(vllm_cpu.MAX_MODEL_LEN))
    _set(argv, "--server-metrics", f"{vllm_plain.url}/metrics")
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    print(f"$ loadgen {' '.join(argv)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
    assert done.returncode == 0, f"loadgen failed (log {vllm_plain.log}):\n{done.stderr}"
    assert done.stderr.count("is not DeepSeek-V4's: messages are sent") == 1  # --encoder raw

    artifacts = tmp_path / "aiperf_artifacts"
    point = orjson.loads((artifacts / "loadgen" / "conc_2.json").read_bytes())
    assert point["submission_valid"] is False
    assert "unsafe_override" in point["submission_reasons"]
    assert point["context_overflow_requests"] == 0
    assert point["completed"] > 0
    assert point["server_prefix_hit_rate"] > 0 and point["server_prefix_cache_hits"] > 0

    rows = lines(artifacts / "profile_export.jsonl")
    phases = [row["metadata"]["benchmark_phase"] for row in rows]
    assert phases.count("profiling") == point["completed"] + point["failed"]
    assert phases.count("warmup") == point["replay_primers"]
    assert len(rows) == len(phases)
    profiled = [row for row in rows if row["metadata"]["benchmark_phase"] == "profiling"]
    for row in profiled:
        meta = row["metadata"]
        assert meta["request_end_ns"] >= meta["request_start_ns"] > 0
        assert "error" in row
        if row["error"] is None:
            assert all(name in row["metrics"] for name in RECORD_METRICS), row

    # what InferenceX's request_metrics.py computes from these rows is loadgen's figure
    ok = [row for row in profiled if row["error"] is None]
    tokens = sum(
        row["metrics"][name]["value"]
        for row in ok
        for name in ("input_sequence_length", "output_sequence_length")
    )
    span_ns = max(row["metadata"]["request_end_ns"] for row in ok) - min(
        row["metadata"]["request_start_ns"] for row in ok
    )
    assert tokens / (span_ns / 1e9) == pytest.approx(point["total_token_throughput"], rel=1e-12)
    ttfts = [row["metrics"]["time_to_first_token"]["value"] for row in ok]
    assert float(np.percentile(ttfts, 90)) == pytest.approx(point["p90_ttft_ms"], rel=1e-12)

    aggregate = orjson.loads((artifacts / "profile_export_aiperf.json").read_bytes())
    theory = aggregate["theoretical_prefix_cache_hit"]
    assert theory["sum"] / theory["count"] == point["theoretical_prefix_hit_rate"] > 0
    assert aggregate["metadata"]["dataset"]["path"].endswith("agentic_small.jsonl")

    server = orjson.loads((artifacts / "server_metrics_export.json").read_bytes())
    assert server["summary"]["endpoints_configured"] == [f"{vllm_plain.url}/metrics"]
    metrics = server["metrics"]
    hits, queries = (
        sum(s["stats"]["total"] for s in metrics[name]["series"])
        for name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries")
    )
    # vLLM's own counters, as InferenceX's backends/vllm.py sums them, are loadgen's figures
    assert hits == point["server_prefix_cache_hits"]
    assert queries == point["server_prefix_cache_queries"]
    assert hits / queries == pytest.approx(point["server_prefix_hit_rate"], rel=1e-12)
    assert metrics["vllm:kv_cache_usage_perc"]["type"] == "gauge"
