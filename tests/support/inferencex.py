"""InferenceX's side of the compatibility tests: what its scripts derive from a result
file (process_result.py, aggregate_power.py) and the `loadgen profile` command line its
build_replay_cmd types (benchmarks/benchmark_lib.sh at InferenceX 843c6254)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from loadgen.tokenizer import bundled_tokenizer_path
from tests.support.paths import TRACES as TRACE_DIR

# The agentic trace replay_cmd hands to --public-dataset (a local file, as typed there).
TRACES = TRACE_DIR / "agentic_small.jsonl"

# aggregate_power.py (called by process_result.py) needs a numeric window with end > start,
# end - start within max(0.5 s, 1 %) of `duration`, and positive integer token counts.
POWER_KEYS = (
    "benchmark_start_time_unix",
    "benchmark_end_time_unix",
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
)


def inferencex_derivations(bmk: dict[str, Any], num_gpus: int) -> dict[str, float]:
    """What process_result.py derives (single node): every key ending in `ms` -> seconds
    under the name without `_ms`, every key containing `tpot` -> 1000/value under the name
    with `intvty`, and throughput per GPU. Raises as the script would on bad values."""
    data = {
        "conc": int(bmk["max_concurrency"]),
        "tput_per_gpu": float(bmk["total_token_throughput"]) / num_gpus,
        "output_tput_per_gpu": float(bmk["output_throughput"]) / num_gpus,
    }
    for key, value in bmk.items():
        if key.endswith("ms"):
            data[key.replace("_ms", "")] = float(value) / 1000.0
        if "tpot" in key:
            data[key.replace("_ms", "").replace("tpot", "intvty")] = 1000.0 / float(value)
    return data


def check_power_window(bmk: dict[str, Any]) -> None:
    start, end, duration = (bmk[k] for k in POWER_KEYS[:3])
    assert all(isinstance(v, int | float) and math.isfinite(v) for v in (start, end, duration))
    assert end > start and duration > 0
    assert abs(duration - (end - start)) <= max(0.5, 0.01 * (end - start))
    for key in POWER_KEYS[3:]:
        assert isinstance(bmk[key], int) and not isinstance(bmk[key], bool) and bmk[key] > 0


def replay_cmd(port: int, out: Path, duration: int, *more: str) -> list[str]:
    """build_replay_cmd's flags in its order (AIPERF_SERVER_METRICS_URLS set)."""
    return [
        "profile",
        "--scenario",
        "inferencex-agentx-mvp",
        "--url",
        f"http://localhost:{port}",
        "--endpoint",
        "/v1/chat/completions",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--model",
        "deepseek-v4-sim",
        "--tokenizer",
        str(bundled_tokenizer_path()),
        "--concurrency",
        "2",
        "--benchmark-duration",
        str(duration),
        "--stats-interval",
        "30",
        "--random-seed",
        "42",
        "--failed-request-threshold",
        "0.1",
        "--trajectory-start-min-ratio",
        "0.25",
        "--trajectory-start-max-ratio",
        "0.75",
        "--warmup-requests-per-lane",
        "10",
        "--trace-idle-gap-cap-seconds",
        "300",
        "--warmup-grace-period",
        "1800",
        "--use-server-token-count",
        "--extra-inputs",
        "min_p:0.05",
        "--no-gpu-telemetry",
        "--tokenizer-trust-remote-code",
        "--max-context-length",
        "131072",
        "--use-dynamo-conv-aware-routing",
        "--dynamo-session-timeout-seconds",
        "3600",
        "--num-dataset-entries",
        "393",
        "--slice-duration",
        "1.0",
        "--server-metrics",
        f"http://127.0.0.1:{port}/metrics",
        "--output-artifact-dir",
        str(out / "aiperf_artifacts"),
        *more,
        "--public-dataset",
        str(TRACES),
    ]
