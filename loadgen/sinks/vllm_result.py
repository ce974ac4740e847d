"""One point as vLLM `bench serve --save-result` JSON, for InferenceX and other vLLM tooling.

The keys, units and meanings are vLLM 0.32's (vllm/benchmarks/serve.py: the result of
`benchmark()` under `date`, `backend`, `label`, `model_id`, ... plus `--metadata`), taken
from loadgen's point result and its records. Added beside them, as InferenceX's
benchmark_serving.py writes them: `benchmark_start_time_unix` and
`benchmark_end_time_unix` (its power aggregation integrates GPU power over that window).

InferenceX's utils/process_result.py turns every key ending in `ms` into seconds and every
key containing `tpot` into 1000/value, so here each such key holds a non-zero number: a
statistic without samples (loadgen's null) is left out, and so is a zero TPOT statistic
(one request, or identical TPOTs, gives std 0); loadgen's `conc_<N>.json` keeps both.
Failed requests follow vLLM in the per-request lists: ttft and latency 0.0, no gaps, and
the error text in `errors`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.config.spec import VllmResultOptions
from loadgen.metrics.arrays import FloatArray, is_completed
from loadgen.metrics.checks import error_text
from loadgen.metrics.summary import distribution, percentile_word
from loadgen.records import RequestRecord
from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult
from loadgen.results.store import name_part

SUMMARY_KEYS = (
    "duration",
    "completed",
    "failed",
    "cancelled",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
)


def client_queue_times(ordered: Sequence[RequestRecord], closed_loop: bool) -> list[float]:
    """vLLM's client_queue_time (s): send - arrival. Open loop: arrival is the request's
    scheduled time, as loadgen's queue_time. Closed loop is vLLM's `--request-rate inf`,
    where every request arrives at the start and waits for a slot: send - first send."""
    if not ordered:
        return []
    origin = min(r.start_ns for r in ordered)
    return [((r.start_ns - origin) if closed_loop else r.queue_ns) / 1e9 for r in ordered]


def per_request_lists(
    records: Sequence[RequestRecord], *, closed_loop: bool = True
) -> dict[str, list[Any]]:
    """vLLM's per-request lists in request order (seconds; perf_counter for start_times)."""
    ordered = sorted(records, key=lambda r: r.request_id)
    done = [is_completed(r) for r in ordered]
    return {
        "input_lens": [r.input_len for r in ordered],
        "output_lens": [r.output_tokens if ok else 0 for r, ok in zip(ordered, done, strict=True)],
        "ttfts": [
            (r.chunk_ns[0] - r.start_ns) / 1e9 if ok else 0.0
            for r, ok in zip(ordered, done, strict=True)
        ],
        "itls": [
            [(b - a) / 1e9 for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)] if ok else []
            for r, ok in zip(ordered, done, strict=True)
        ],
        "latencies": [
            (r.chunk_ns[-1] - r.start_ns) / 1e9 if ok else 0.0
            for r, ok in zip(ordered, done, strict=True)
        ],
        "start_times": [r.start_ns / 1e9 for r in ordered],
        "queue_times": client_queue_times(ordered, closed_loop),
        "errors": [error_text(r) for r in ordered],
    }


def _spec_decode(result: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's spec_decode_* block, from the server counters (rate in percent, as vLLM)."""
    if not result.get("server_spec_decode_draft_tokens"):
        return {}
    return {
        "spec_decode_acceptance_rate": 100.0 * result["server_acceptance_rate"],
        "spec_decode_acceptance_length": result["server_acceptance_length"],
        "spec_decode_num_drafts": result["server_spec_decode_drafts"],
        "spec_decode_draft_tokens": result["server_spec_decode_draft_tokens"],
        "spec_decode_accepted_tokens": result["server_spec_decode_accepted_tokens"],
        "spec_decode_per_position_acceptance_rates": result.get("server_acceptance_per_position")
        or [],
    }


def _percentiles(
    result: Mapping[str, Any], options: VllmResultOptions, queue_ms: FloatArray
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for metric in options.percentile_metrics:
        if metric == "client_queue_time":  # vLLM's meaning, not loadgen's slot wait
            fields.update(distribution(metric, queue_ms, options.metric_percentiles))
            continue
        stats = ["mean", "median", "std"]
        stats += [f"p{percentile_word(p)}" for p in options.metric_percentiles]
        for stat in stats:
            fields[f"{stat}_{metric}_ms"] = result.get(f"{stat}_{metric}_ms")
    return fields


def inferencex_safe(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Leave out what process_result.py cannot convert: a non-number under a key ending
    in `ms`, a non-number or zero under a key containing `tpot`."""

    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    return {
        key: value
        for key, value in fields.items()
        if not (key.endswith("ms") and not number(value))
        and not ("tpot" in key and not (number(value) and value != 0))
    }


def vllm_result(
    result: Mapping[str, Any],
    records: Sequence[RequestRecord],
    options: VllmResultOptions,
) -> dict[str, Any]:
    """The vLLM-shaped JSON object of one point (loadgen's `result` and its records)."""
    model_id = options.model_id or str(result.get("model_id"))
    start = result.get("benchmark_start_time_unix")
    duration = result.get("duration")
    end = start + duration if start is not None and duration is not None else None
    lists = per_request_lists(records, closed_loop=result.get("request_rate") == "inf")
    ok = [is_completed(r) for r in sorted(records, key=lambda r: r.request_id)]
    queue_ms = 1000.0 * np.array(
        [q for q, good in zip(lists["queue_times"], ok, strict=True) if good], dtype=np.float64
    )
    detailed = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "errors")
    fields: dict[str, Any] = {
        "date": vllm_date(end),
        "endpoint_type": options.backend,
        "backend": options.backend,
        "label": options.label,
        "model_id": model_id,
        "tokenizer_id": options.tokenizer_id or model_id,
        "num_prompts": result.get("planned_requests", result.get("num_prompts")),
        **dict(options.metadata),
        "request_rate": result.get("request_rate", "inf"),
        "burstiness": result.get("burstiness", 1.0),
        "max_concurrency": result["max_concurrency"],
        **{key: result.get(key) for key in SUMMARY_KEYS},
        **{key: lists[key] for key in detailed if options.detailed},
        "latencies": lists["latencies"],
        "queue_times": lists["queue_times"],
        "max_output_tokens_per_s": result.get("max_output_tokens_per_s") or 0.0,
        "max_concurrent_requests": result.get("max_concurrent_requests") or 0,
        "rtfx": 0.0,
        **_spec_decode(result),
        **_percentiles(result, options, queue_ms),
        "benchmark_start_time_unix": start,
        "benchmark_end_time_unix": end,
    }
    return inferencex_safe(fields)


def vllm_date(unix: float | None) -> str:
    """vLLM's `date` (and file-name) format: local time, %Y%m%d-%H%M%S."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(unix))


def result_path(
    results_dir: Path, options: VllmResultOptions, fields: Mapping[str, Any], points: int
) -> Path:
    """NAME.json (one point) or NAME_conc<N>.json; without a NAME, vLLM's own file name."""
    conc = fields["max_concurrency"]
    directory = options.result_dir or results_dir
    if options.filename is not None:
        suffix = ".json" if points == 1 else f"_conc{conc}.json"
        return directory / f"{options.filename}{suffix}"
    label = options.label or options.backend
    # the server's name for its model: data, never path syntax or an over-long name
    model = name_part(str(fields["model_id"]).split("/")[-1])
    return directory / (
        f"{label}-{fields['request_rate']}qps-concurrency{conc}-{model}-{fields['date']}.json"
    )


def write_vllm_result(
    results_dir: Path,
    result: PointResult,
    records: Sequence[RequestRecord],
    options: VllmResultOptions,
    *,
    points: int,
) -> Path:
    """Write the point's vLLM-shaped JSON atomically; returns its path."""
    fields = vllm_result(result.to_json(), records, options)
    path = result_path(results_dir, options, fields, points)
    return write_atomic(path, orjson.dumps(fields, option=orjson.OPT_SERIALIZE_NUMPY))
