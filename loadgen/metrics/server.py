"""The server's Prometheus /metrics text -> a snapshot of the counters loadgen cross-checks.

Pure: the caller scrapes (before and after each point) and hands the text in. A snapshot
sums every sample over its label sets (engines of a data-parallel server, model names),
except where a label is the key of the value (`position` of the per-position acceptance
counter). Histogram buckets and `_created` timestamps are dropped: only `_sum`/`_count`
of histograms are kept, which is all a mean over a point needs, except the buckets of
BUCKETED (keyed by `le`), whose median over a point a TTFT part reports.

A NaN or infinite sample is a missing one, never a number: the name it belongs to is left
out of the snapshot altogether (a sum over engines that skipped one would be a wrong
total), so every figure from it is null as when the server does not export it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client.parser import text_string_to_metric_families

SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

# Other engines' per-position / per-count counters (metrics/engines.py maps them to vLLM's)
TRT_DRAFTED_PER_POS = "trtllm_spec_decode_drafted_tokens_total"
TRT_ACCEPTED_PER_POS = "trtllm_spec_decode_accepted_tokens_total"
ATOM_DECODE_STEPS = "atom:mtp_decode_steps_total"

# vLLM's frontend labels each data-parallel engine's step histogram engine="<index>"
ENGINE_STEPS = "vllm:iteration_tokens_total_count"

# The TTFT parts' histograms of a disaggregated deployment (metrics/ttft_parts.py)
FRONTEND_STAGES = "dynamo_frontend_stage_duration_seconds"
PREFILL_QUEUE = "vllm:request_queue_time_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
KV_TRANSFER = "vllm:nixl_xfer_time_seconds"
WORKER_TTFT = "vllm:time_to_first_token_seconds"
# Histograms whose buckets are kept (keyed by `le`): a part's p50 comes from them.
BUCKETED = (PREFILL_QUEUE, PREFILL_TIME, KV_TRANSFER)

# Samples whose label is the key of the value rather than something to sum over.
KEYED_SAMPLES: Mapping[str, str] = MappingProxyType(
    {
        SPEC_ACCEPTED_PER_POS: "position",
        TRT_DRAFTED_PER_POS: "token_position",
        TRT_ACCEPTED_PER_POS: "token_position",
        ATOM_DECODE_STEPS: "accepted_tokens",
        f"{FRONTEND_STAGES}_sum": "stage",
        f"{FRONTEND_STAGES}_count": "stage",
        **{f"{name}_bucket": "le" for name in BUCKETED},
    }
)

# Server-side latency histograms (seconds) -> loadgen's metric name for the cross-check.
LATENCY_HISTOGRAMS: Mapping[str, str] = MappingProxyType(
    {
        "ttft": "vllm:time_to_first_token_seconds",
        "e2el": "vllm:e2e_request_latency_seconds",
        "itl": "vllm:inter_token_latency_seconds",  # vLLM observes one value per step/chunk
        "queue_time": "vllm:request_queue_time_seconds",
    }
)


class MetricsParseError(ValueError):
    """The scraped text is not Prometheus exposition format."""


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """Counter/histogram-total values of one scrape, summed over label sets."""

    samples: Mapping[str, float] = field(default_factory=dict)  # sample name -> sum
    keyed: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # name -> key -> sum
    engines: int | None = None  # engines with a step series (ENGINE_STEPS); None: none seen

    def get(self, name: str) -> float | None:
        return self.samples.get(name)

    @property
    def accepted_per_position(self) -> dict[int, float]:
        """Position -> accepted; a `position` label that is not a number is no position."""
        by_position = self.keyed.get(SPEC_ACCEPTED_PER_POS, {})
        return {int(p): value for p, value in by_position.items() if p.isdigit()}


def parse_metrics(text: str) -> ServerSnapshot:
    """Parse a /metrics body; raises MetricsParseError with the reason when it is not valid."""
    samples: dict[str, float] = {}
    keyed: dict[str, dict[str, float]] = {}
    engines: set[tuple[str, str]] = set()
    missing: set[str] = set()  # names with a NaN or infinite sample (module doc)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if not math.isfinite(sample.value):
                    missing.add(name)
                key_label = KEYED_SAMPLES.get(name)
                if key_label is not None and key_label in sample.labels:
                    per_key = keyed.setdefault(name, {})
                    key = sample.labels[key_label]
                    per_key[key] = per_key.get(key, 0.0) + sample.value
                if name.endswith(("_bucket", "_created")):
                    continue
                if name == ENGINE_STEPS:
                    labels = sample.labels
                    engines.add((labels.get("model_name", ""), labels.get("engine", "")))
                samples[name] = samples.get(name, 0.0) + sample.value
    except ValueError as exc:
        raise MetricsParseError(
            f"server /metrics is not Prometheus text format ({exc}); "
            "check that --base-url points at the inference server"
        ) from exc
    for name in missing:
        samples.pop(name, None)
        keyed.pop(name, None)
    return ServerSnapshot(samples=samples, keyed=keyed, engines=len(engines) or None)


def speculative_decoding_enabled(snapshot: ServerSnapshot) -> bool:
    """vLLM registers the spec_decode counters only when a speculative config is active."""
    return snapshot.get(SPEC_DRAFTS) is not None


def positions_spec_tokens(snapshot: ServerSnapshot) -> int | None:
    """K as vLLM's per-position series give it: it registers one accepted-per-position
    series for each of its K draft positions when it starts, so their number is K from
    the first scrape on; None without them."""
    positions = snapshot.accepted_per_position
    return max(positions) + 1 if positions else None


def whole_draft_length(drafts: float, draft_tokens: float) -> int | None:
    """Draft tokens per draft when it is a whole number (K: every draft proposes K);
    None when it is not, since then K is not this ratio (vLLM trims a draft to the
    step's token budget and to max_model_len, so a point can average below K), or when
    nothing was drafted."""
    if drafts <= 0 or draft_tokens < 0:
        return None
    ratio = draft_tokens / drafts
    return int(ratio) if ratio.is_integer() else None


def server_spec_tokens(snapshot: ServerSnapshot) -> int | None:
    """K (num_speculative_tokens) as the server's counters give it: the per-position
    series' count (positions_spec_tokens); a server without them, the draft tokens per
    draft it counted so far when that is a whole number; None when neither says (no
    speculative decoding, nothing drafted yet, or a ratio that is not K)."""
    positions = positions_spec_tokens(snapshot)
    if positions is not None:
        return positions
    drafts, draft_tokens = snapshot.get(SPEC_DRAFTS), snapshot.get(SPEC_DRAFT_TOKENS)
    if drafts is None or draft_tokens is None:
        return None
    return whole_draft_length(drafts, draft_tokens)


def counter_delta(before: ServerSnapshot, after: ServerSnapshot, name: str) -> float | None:
    """after - before, or None when missing on either side or reset in between (negative)."""
    start, end = before.get(name), after.get(name)
    if start is None or end is None or end < start:
        return None
    return end - start


def server_latency_means(before: ServerSnapshot, after: ServerSnapshot) -> dict[str, float | None]:
    """Mean latencies over the point from the histograms' _sum/_count deltas (milliseconds).

    Keys: server_mean_{ttft,e2el,itl,queue_time}_ms and server_requests (TTFT count delta).
    None when the server does not export the histogram or saw nothing during the point.
    """
    result: dict[str, float | None] = {}
    for metric, histogram in LATENCY_HISTOGRAMS.items():
        total = counter_delta(before, after, histogram + "_sum")
        count = counter_delta(before, after, histogram + "_count")
        mean = None if total is None or not count else 1000.0 * total / count
        result[f"server_mean_{metric}_ms"] = mean
    result["server_requests"] = counter_delta(before, after, LATENCY_HISTOGRAMS["ttft"] + "_count")
    return result


def engines_behind(counts: Sequence[int | None]) -> int | None:
    """Engines of several servers behind a router: each server's step on their own, so
    they add up; unknown when any server does not say."""
    if not counts or None in counts:
        return None
    return sum(c for c in counts if c is not None)


def merge_snapshots(snapshots: Sequence[ServerSnapshot | None]) -> ServerSnapshot | None:
    """Sum of several servers' snapshots (engines behind a router, workers behind a
    frontend); None when any is missing, since a partial sum would be a wrong total."""
    if not snapshots or any(s is None for s in snapshots):
        return None
    samples: dict[str, float] = {}
    keyed: dict[str, dict[str, float]] = {}
    engines = engines_behind([s.engines for s in snapshots if s is not None])
    for snapshot in snapshots:
        assert snapshot is not None
        for name, value in snapshot.samples.items():
            samples[name] = samples.get(name, 0.0) + value
        for name, by_key in snapshot.keyed.items():
            into = keyed.setdefault(name, {})
            for key, value in by_key.items():
                into[key] = into.get(key, 0.0) + value
    return ServerSnapshot(samples=samples, keyed=keyed, engines=engines)


KV_USAGE = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
# Gauges watched during a point: KV usage is a fraction per engine (the fullest engine
# is kept); queue lengths are summed over engines.
WATCHED_GAUGES: Mapping[str, str] = MappingProxyType(
    {KV_USAGE: "max", WAITING: "sum", RUNNING: "sum"}
)


def gauge_samples(text: str, names: Mapping[str, str] | None = None) -> dict[str, float]:
    """WATCHED_GAUGES from /metrics text by a line scan (no full parse: this runs during
    the measured phase, on the client's loop). Absent gauges are absent from the dict.
    `names` maps another engine's gauge names to WATCHED_GAUGES' (metrics/engines.py)."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        if names is None and not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        name = name if names is None else names.get(name, "")
        if name in WATCHED_GAUGES:
            try:
                found.setdefault(name, []).append(float(line.rsplit(" ", 1)[-1]))
            except ValueError:
                continue
    # a NaN or infinite engine's value leaves the gauge unknown in this scrape (module doc)
    return {
        name: (max(values) if WATCHED_GAUGES[name] == "max" else sum(values))
        for name, values in found.items()
        if all(math.isfinite(v) for v in values)
    }
