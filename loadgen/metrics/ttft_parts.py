"""A disaggregated point's TTFT taken apart, from each role's histograms over the point.

Pure: the caller hands in each role's snapshots before and after the point (its URLs'
summed, metrics/server_roles.py) and the client's mean TTFT. Each part is a histogram's
_sum/_count delta (a mean over the requests it observed), per docs/results.md:
- frontend: the frontend's `dynamo_frontend_stage_duration_seconds` preprocess mean
  plus its route mean (two stages: no median of their sum);
- prefill queue and prefill: the prefill workers' `vllm:request_queue_time_seconds` and
  `vllm:request_prefill_time_seconds`;
- KV transfer: the decode workers' `vllm:nixl_xfer_time_seconds` (vLLM's NIXL connector);
- decode admission + first step: the decode workers' `vllm:time_to_first_token_seconds`
  (from the request reaching the decode worker, KV read included) minus the KV transfer
  mean; a difference of histograms has no median;
- unexplained: the client's mean TTFT minus the parts' sum (network, HTTP, sends later
  than the engine stamped them). The parts add up when |unexplained| is within the bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from loadgen.metrics.server import (
    FRONTEND_STAGES,
    KV_TRANSFER,
    PREFILL_QUEUE,
    PREFILL_TIME,
    WORKER_TTFT,
    ServerSnapshot,
)

# The parts add up when |client mean TTFT - their sum| <= max(BOUND_MS, BOUND_SHARE x it).
BOUND_MS = 5.0
BOUND_SHARE = 0.10
# A median read from a bucket wider than this (upper / lower bound), or from the first
# bucket (from 0), would be a guess: it is null with that reason.
WIDEST_BUCKET = 2.5
STAGES = ("preprocess", "route")

Snapshots = Mapping[str, ServerSnapshot | None]  # role -> its URLs' summed snapshot
Part = dict[str, Any]


def ttft_parts(
    before: Snapshots, after: Snapshots, client_mean_ttft_ms: float | None
) -> dict[str, Any]:
    """The `ttft_parts` object of a point (results/point.py TtftParts)."""
    parts = {
        "frontend_ms": _frontend(before, after),
        "prefill_queue_ms": _histogram("prefill", PREFILL_QUEUE, before, after),
        "prefill_ms": _histogram("prefill", PREFILL_TIME, before, after),
        "kv_transfer_ms": _histogram("decode", KV_TRANSFER, before, after),
    }
    parts["decode_first_ms"] = _decode_first(before, after, parts["kv_transfer_ms"])
    means = [part["mean_ms"] for part in parts.values()]
    total = sum(means) if all(m is not None for m in means) else None
    out: dict[str, Any] = {**parts, "client_mean_ttft_ms": client_mean_ttft_ms}
    out["parts_sum_ms"] = total
    if client_mean_ttft_ms is None or total is None:
        missing = [name for name, part in parts.items() if part["mean_ms"] is None]
        why = (
            "the client measured no TTFT"
            if client_mean_ttft_ms is None
            else f"{', '.join(missing)} unknown"
        )
        out["unexplained_ms"] = _part(None, source="client mean TTFT - the parts' sum", reason=why)
        out.update(bound_ms=None, adds_up=None, verdict=f"not checked: {why}")
        return out
    unexplained = client_mean_ttft_ms - total
    bound = max(BOUND_MS, BOUND_SHARE * client_mean_ttft_ms)
    out["unexplained_ms"] = _part(
        unexplained,
        source="client mean TTFT - the parts' sum",
        reason="a difference of means has no median",
    )
    adds_up = abs(unexplained) <= bound
    out.update(
        bound_ms=bound,
        adds_up=adds_up,
        verdict=(
            f"the parts add up: {total:.1f} ms of the client's {client_mean_ttft_ms:.1f} ms, "
            f"{unexplained:+.1f} ms unexplained (bound {bound:.1f} ms)"
            if adds_up
            else f"the parts do NOT add up: {total:.1f} ms against the client's "
            f"{client_mean_ttft_ms:.1f} ms, {unexplained:+.1f} ms unexplained is beyond the "
            f"bound of {bound:.1f} ms: time no role's series covers (before the frontend's "
            "handler took the request, a role not scraped, a phase no server times)"
        ),
    )
    return out


def _part(
    mean_ms: float | None,
    *,
    source: str,
    p50_ms: float | None = None,
    requests: float | None = None,
    reason: str | None = None,
) -> Part:
    return {
        "mean_ms": mean_ms,
        "p50_ms": p50_ms,
        "requests": requests,
        "source": source,
        "reason": reason,
    }


def _deltas(
    role: str, before: Snapshots, after: Snapshots
) -> tuple[ServerSnapshot, ServerSnapshot] | str:
    if role not in before:
        return f"no --server-metrics {role}=URL"
    start, end = before.get(role), after.get(role)
    if start is None or end is None:
        return f"the {role} role's /metrics was not read before and after the point"
    return start, end


def _mean(
    start: ServerSnapshot, end: ServerSnapshot, name: str
) -> tuple[float | None, float, str | None]:
    """(mean ms, requests, why None) of histogram `name` over the point."""
    sums = (start.get(f"{name}_sum"), end.get(f"{name}_sum"))
    counts = (start.get(f"{name}_count"), end.get(f"{name}_count"))
    if sums[1] is None or counts[1] is None:
        return None, 0.0, f"no {name} series"
    count = counts[1] - (counts[0] or 0.0)
    if count <= 0:
        return None, 0.0, f"{name} observed no request in the point"
    return (sums[1] - (sums[0] or 0.0)) / count * 1e3, count, None


def _histogram(role: str, name: str, before: Snapshots, after: Snapshots) -> Part:
    source = f"{role}: {name}"
    deltas = _deltas(role, before, after)
    if isinstance(deltas, str):
        return _part(None, source=source, reason=deltas)
    start, end = deltas
    mean, count, why = _mean(start, end, name)
    if mean is None:
        return _part(None, source=source, reason=why)
    p50, p50_why = bucket_median(start.keyed.get(f"{name}_bucket"), end.keyed.get(f"{name}_bucket"))
    return _part(mean, source=source, p50_ms=p50, requests=count, reason=p50_why)


def _frontend(before: Snapshots, after: Snapshots) -> Part:
    source = f"frontend: {FRONTEND_STAGES}{{stage=preprocess}} + {{stage=route}}"
    deltas = _deltas("frontend", before, after)
    if isinstance(deltas, str):
        return _part(None, source=source, reason=deltas)
    start, end = deltas
    total, requests = 0.0, None
    for stage in STAGES:
        sums = [s.keyed.get(f"{FRONTEND_STAGES}_sum", {}).get(stage) for s in (start, end)]
        counts = [s.keyed.get(f"{FRONTEND_STAGES}_count", {}).get(stage) for s in (start, end)]
        if sums[1] is None or counts[1] is None:
            return _part(None, source=source, reason=f"no {FRONTEND_STAGES}{{stage={stage}}}")
        count = counts[1] - (counts[0] or 0.0)
        if count <= 0:
            return _part(
                None,
                source=source,
                reason=f"the frontend timed no {stage} stage in the point (Dynamo 1.4.2 "
                "times preprocess for chat requests only)",
            )
        total += (sums[1] - (sums[0] or 0.0)) / count * 1e3
        requests = count if requests is None else min(requests, count)
    return _part(
        total, source=source, requests=requests, reason="a sum of two stages has no median"
    )


def _decode_first(before: Snapshots, after: Snapshots, kv: Part) -> Part:
    source = f"decode: {WORKER_TTFT} - {KV_TRANSFER}"
    deltas = _deltas("decode", before, after)
    if isinstance(deltas, str):
        return _part(None, source=source, reason=deltas)
    mean, count, why = _mean(*deltas, WORKER_TTFT)
    if mean is None:
        return _part(None, source=source, reason=why)
    if kv["mean_ms"] is None:
        return _part(None, source=source, reason=f"the KV transfer is unknown: {kv['reason']}")
    if kv["requests"] != count:
        return _part(
            None,
            source=source,
            reason=f"the decode workers' TTFT and KV transfer counted different requests "
            f"({count:g} and {kv['requests']:g})",
        )
    return _part(
        mean - kv["mean_ms"],
        source=source,
        requests=count,
        reason="a difference of two histograms has no median",
    )


def bucket_median(
    start: Mapping[str, float] | None, end: Mapping[str, float] | None
) -> tuple[float | None, str | None]:
    """The median (ms) of a histogram's observations between two scrapes, interpolated
    linearly within its bucket as Prometheus's histogram_quantile; None with the reason
    where the buckets do not allow it (above the last, or in one too wide to tell)."""
    if not end:
        return None, "no buckets: no median"
    cumulative = sorted(
        (float(le), value - (start or {}).get(le, 0.0)) for le, value in end.items()
    )
    total = cumulative[-1][1] if cumulative and math.isinf(cumulative[-1][0]) else 0.0
    if total <= 0:
        return None, "no buckets: no median"
    target, lower, below = total / 2.0, 0.0, 0.0
    for bound, count in cumulative:
        if count >= target:
            if math.isinf(bound):
                return None, "the median is above the last bucket"
            if lower <= 0 or bound / lower > WIDEST_BUCKET:
                return None, (
                    f"the median lies in the bucket {lower * 1e3:g}-{bound * 1e3:g} ms, "
                    "too wide to read it from"
                )
            share = (target - below) / (count - below) if count > below else 1.0
            return (lower + (bound - lower) * share) * 1e3, None
        lower, below = bound, count
    return None, "no buckets: no median"
