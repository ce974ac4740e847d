"""vLLM 0.32's per-request `metrics` object on the final usage chunk, as the simulator sends it.

`--enable-per-request-metrics`: the request's timings (entrypoints/generate/base/serving.py
`build_per_request_timing_metrics`: queue = scheduled - queued, TTFT = first token -
scheduled, generation = last - first token, mean ITL over the decode tokens, tokens/s over
scheduled -> last token). `--per-request-spec-decode-metrics summary|detailed`: the
acceptance histogram of the request's verify steps (v1/metrics/stats.py
`RequestSpecDecodeMetrics.to_dict`), the ordered per-step arrays with `detailed`. vLLM
serializes with exclude_none, so an absent value is left out, and the keys keep its order.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.sim.request import EngineRequest

NS_PER_MS = 1e6


def _timings(request: EngineRequest, tokens: int) -> dict[str, Any]:
    # The engine stamps steps on its intended schedule; one running behind it schedules
    # and finishes steps later than stamped, possibly after a request's arrival: each
    # stamp is at least the one before, as real stamps are.
    queued = request.arrival_ns
    scheduled = max(request.first_sched_ns, queued) if request.first_sched_ns else 0
    first = max(request.first_token_ns, scheduled) if request.first_token_ns else 0
    last = max(request.last_token_ns, first) if request.last_token_ns else 0
    out: dict[str, Any] = {}
    if scheduled and first:
        out["time_to_first_token_ms"] = (first - scheduled) / NS_PER_MS
    if first and last:
        out["generation_time_ms"] = (last - first) / NS_PER_MS
    if queued and scheduled:
        out["queue_time_ms"] = (scheduled - queued) / NS_PER_MS
    if first and last and tokens > 1:
        out["mean_itl_ms"] = (last - first) / (tokens - 1) / NS_PER_MS
    if scheduled and last and last > scheduled:
        out["tokens_per_second"] = tokens / ((last - scheduled) / NS_PER_MS) * 1000
    return out


def _spec_decode(histogram: list[int], spec_tokens: int, steps: list[int] | None) -> dict[str, Any]:
    num_steps = sum(histogram)
    accepted = sum(j * count for j, count in enumerate(histogram))
    drafted = num_steps * spec_tokens  # every verify step proposed K (no grammar here)
    out: dict[str, Any] = {
        "mean_acceptance_length": 1.0 + accepted / num_steps if num_steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": num_steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": spec_tokens,
    }
    if steps:  # as vLLM: the arrays only when populated
        out["per_step_accepted"] = steps
        out["per_step_drafted"] = [spec_tokens] * len(steps)
    return out


TIMING_KEYS = (
    "time_to_first_token_ms",
    "generation_time_ms",
    "queue_time_ms",
    "mean_itl_ms",
    "tokens_per_second",
)


def metrics_dict(
    request: EngineRequest, tokens: int, *, timings: bool, spec_tokens: int
) -> dict[str, Any] | None:
    """The `metrics` value for a finished request as a stream's final chunk has it (absent
    values left out), None when the server sends none."""
    metrics = _timings(request, tokens) if timings else {}
    if request.spec_histogram is not None and not request.spec_details:  # vLLM's, not sglext
        metrics["speculative_decoding"] = _spec_decode(
            request.spec_histogram, spec_tokens, request.spec_steps
        )
    if not timings and not metrics:
        return None
    return metrics


def metrics_json(
    request: EngineRequest, tokens: int, *, timings: bool, spec_tokens: int
) -> bytes | None:
    metrics = metrics_dict(request, tokens, timings=timings, spec_tokens=spec_tokens)
    return None if metrics is None else orjson.dumps(metrics)


def with_nulls(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """A non-streamed body's form: every field, absent ones null (vLLM dumps the model)."""
    if metrics is None:
        return None
    out: dict[str, Any] = {key: metrics.get(key) for key in TIMING_KEYS}
    spec = metrics.get("speculative_decoding")
    if spec is not None:
        spec = {
            **spec,
            "per_step_accepted": spec.get("per_step_accepted"),
            "per_step_drafted": spec.get("per_step_drafted"),
        }
    out["speculative_decoding"] = spec
    return out


def sglext_json(request: EngineRequest, tokens: int) -> bytes | None:
    """SGLang's `sglext` for a finished request that asked "return_spec_tokens_details"
    (tests/fixtures/engines/sglang/response.json): its counts of this request's verify
    steps, the histogram grown only as far as the largest count seen, as SGLang's is."""
    histogram = request.spec_histogram
    if histogram is None:
        return None
    steps = sum(histogram)
    accepted = sum(j * n for j, n in enumerate(histogram))
    k = len(histogram) - 1
    grown = histogram[: max((j for j, n in enumerate(histogram) if n), default=-1) + 1]
    details = {
        "spec_accept_rate": accepted / (steps * k) if steps else 0.0,
        "spec_accept_length": tokens / steps if steps else 0.0,  # SGLang's own definition
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": steps * k,
        "spec_verify_ct": steps,
        "spec_correct_drafts_histogram": grown,
        "spec_cap_lens_histogram": [],
    }
    return orjson.dumps({"spec_tokens_details": details})
