"""Records of one concurrency point -> the published numbers (pure numpy, no I/O).

Field names follow vLLM `bench serve` / InferenceX result files; loadgen's own fields are
added beside them. Definitions are docs/design.md, "Metric definitions (normative)":
- TTFT = first chunk - start; E2EL = last chunk - start (one sample per request).
- ITL = every chunk gap of every request, pooled (vLLM's convention).
- ITL per token = each gap / tokens in the later chunk, repeated once per such token.
- TPOT = (E2EL - TTFT) / (output_tokens - 1); undefined for 1-token outputs, which are
  left out of TPOT and interactivity (counted in `tpot_excluded_single_token`).
- interactivity = 1 / TPOT per request, in tokens/s/user.
- Percentiles from the raw samples, numpy's default (linear) method, as vLLM; std is
  numpy's population std (ddof=0), as vLLM. Empty samples give None, never 0.
- queue_time = start - scheduled (slot wait / open-loop lateness), every completed request;
  ttft_from_schedule / e2el_from_schedule = first / last chunk - scheduled = queue_time +
  TTFT / E2EL: latency as the user who was due at `scheduled` sees it (coordinated omission);
  connect_time = connection set-up before start, over the requests that opened one
  (`new_connections` counts them).
- Failed requests count in `failed` and the error fields, never in latency statistics.
- duration = first send (earliest start of any request) to last completion (latest end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.config.golden import GoldenAL
from loadgen.config.parsers import SLO_METRICS
from loadgen.metrics.acceptance import (
    SERVER_KEYS,
    acceptance_difference,
    al_disagreement,
    best_acceptance_length,
    itl_merged_steps,
    server_acceptance,
    stream_acceptance_from_arrays,
)
from loadgen.metrics.arrays import NS_PER_MS, FloatArray, PointArrays, is_completed
from loadgen.metrics.checks import (
    arrival_stamp_fields,
    error_fields,
    error_text,
    stray_bytes_fields,
    token_count_checks,
    token_source_fields,
)
from loadgen.metrics.e2e_norm import e2e_norm_intvty_fields
from loadgen.metrics.early_stopping import early_stop
from loadgen.metrics.frontend import frontend_fields
from loadgen.metrics.golden import golden_fields
from loadgen.metrics.latency_bounds import ClientMaxima, bounded_means
from loadgen.metrics.phases import phase_fields
from loadgen.metrics.request_stats import (
    TIMING_SAMPLES,
    spec_decode_fields,
    timing_requests,
    timing_samples,
    timings_exceeding_client,
)
from loadgen.metrics.server import (
    LATENCY_HISTOGRAMS,
    ServerSnapshot,
    positions_spec_tokens,
    server_latency_means,
)
from loadgen.metrics.steps import step_fields
from loadgen.metrics.throughput import throughput_fields
from loadgen.records import ArrivalStamps, ErrorKind, RequestRecord
from loadgen.results.point import metrics_from_fields
from loadgen.results.point_metrics import EarlyStop, PointMetrics

BASE_PERCENTILES = (90.0, 99.0, 99.9)  # always published (docs/design.md), plus --percentiles
# The per-request latencies MLPerf's early stopping applies to (ITL's pooled gaps of one
# request are not independent samples, and LoadGen counts queries)
EARLY_STOPPING_METRICS = (
    "ttft",
    "tpot",
    "e2el",
)  # always published (docs/design.md), plus --percentiles


@dataclass(frozen=True, slots=True)
class PointContext:
    """What summarize needs to know about the point besides its records."""

    conc: int
    input_len: int | None  # None: lengths come from a dataset, per request
    output_len: int | None
    spec_tokens: int | None = None  # K draft tokens per step; None/0 = no spec decoding known
    slos: Mapping[str, float] = field(default_factory=dict)  # 'ttft'|'tpot'|'itl'|'e2el' -> ms
    percentiles: tuple[float, ...] = ()
    num_gpus: int | None = None
    # Engine steps per stream chunk when the server's setting is known (the embedded
    # simulator's --stream-interval); None: unknown, as vLLM reports it nowhere.
    stream_interval: int | None = None
    golden: GoldenAL | None = None  # --golden-al: the curve this point's AL is held to
    # the requests asked the model to think: a response whose phases cannot be told apart
    # then has no TTFA (metrics/phases.py); without thinking its whole output is the answer
    thinking: bool = False

    def __post_init__(self) -> None:
        unknown = sorted(set(self.slos) - set(SLO_METRICS))
        if unknown:
            raise ValueError(f"unknown SLO metric {unknown}: use {', '.join(SLO_METRICS)}")
        if any(not 0 <= p <= 100 for p in self.percentiles):
            raise ValueError(f"percentiles must be between 0 and 100, got {self.percentiles}")
        if self.num_gpus is not None and self.num_gpus < 1:
            raise ValueError(f"num_gpus must be at least 1, got {self.num_gpus}")

    @property
    def all_percentiles(self) -> tuple[float, ...]:
        return tuple(sorted(set(BASE_PERCENTILES) | {float(p) for p in self.percentiles}))


def percentile_word(p: float) -> str:
    """vLLM's key spelling: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def distribution(
    name: str, values: FloatArray, percentiles: Iterable[float], unit: str = "ms"
) -> dict[str, float | None]:
    """mean/median/std/p{X} of raw samples under vLLM's `{stat}_{name}_{unit}` keys."""
    ps = list(percentiles)
    keys = [f"{stat}_{name}_{unit}" for stat in ("mean", "median", "std")]
    keys += [f"p{percentile_word(p)}_{name}_{unit}" for p in ps]
    if values.size == 0:
        return dict.fromkeys(keys)
    quantiles = np.percentile(values, [50.0, *ps])
    stats = [float(values.mean()), float(quantiles[0]), float(values.std())]
    stats += [float(q) for q in quantiles[1:]]
    return dict(zip(keys, stats, strict=True))


def latency_samples(arrays: PointArrays) -> dict[str, FloatArray]:
    """Raw samples per metric (ms, or tok/s/user for interactivity)."""
    ttft, e2el = arrays.ttft_ms(), arrays.e2el_ms()
    itl, later_tokens = arrays.itl_per_chunk_ms()
    has_tokens = later_tokens > 0  # a zero-token chunk would carry no per-token sample
    per_token = np.repeat(itl[has_tokens] / later_tokens[has_tokens], later_tokens[has_tokens])
    multi = arrays.output_tokens > 1
    tpot = (e2el - ttft)[multi] / (arrays.output_tokens[multi] - 1)
    return {
        "ttft": ttft,
        "tpot": tpot,
        "itl": itl,
        "e2el": e2el,
        "itl_per_token": per_token,
        "interactivity": 1000.0 / tpot[tpot > 0],
        "queue_time": arrays.queue_ns / NS_PER_MS,
        "ttft_from_schedule": ttft + arrays.queue_ns / NS_PER_MS,
        "e2el_from_schedule": e2el + arrays.queue_ns / NS_PER_MS,
        # Only requests that had to open a connection: with warm connections most are 0,
        # and a median of zeros would hide what opening one costs.
        "connect_time": arrays.connect_ns[arrays.connect_ns > 0] / NS_PER_MS,
    }


def client_maxima(records: Sequence[RequestRecord]) -> ClientMaxima:
    """The client's largest TTFT, E2E latency, ITL and ITL per token over the completed
    records, from the samples summarize publishes (the server's means are held to them)."""
    return ClientMaxima.of(
        latency_samples(PointArrays.build([r for r in records if is_completed(r)]))
    )


def good_mask(
    arrays: PointArrays,
    samples: Mapping[str, FloatArray],
    slos: Mapping[str, float],
    suffix: str = "",
) -> npt.NDArray[np.bool_]:
    """Per completed record (arrays' order): whether it meets every SLO (goodput_fields)."""
    good = np.ones(arrays.num_records, dtype=np.bool_)
    multi = arrays.output_tokens > 1
    per_request = {
        "ttft": samples[f"ttft{suffix}"],
        "e2el": samples[f"e2el{suffix}"],
        "itl": arrays.max_gap_ms(),
        "tpot": np.zeros(arrays.num_records),
    }
    per_request["tpot"][multi] = samples["tpot"]
    for metric, limit_ms in slos.items():
        good &= per_request[metric] <= limit_ms
    return good


def goodput_fields(
    arrays: PointArrays,
    samples: Mapping[str, FloatArray],
    slos: Mapping[str, float],
    duration_s: float | None,
    *,
    from_schedule: bool = False,
) -> dict[str, Any]:
    """A request is good when it meets every SLO given (vLLM's request_goodput).

    Per request: ttft, e2el, tpot as defined; itl = the request's largest chunk gap
    (every gap must meet the SLO). A metric that is undefined for a request (TPOT of a
    1-token output, ITL of a 1-chunk one) does not fail it, as in vLLM (TPOT 0).
    from_schedule: ttft and e2el count from the intended send time instead (tpot and itl
    do not depend on when the request was sent); keys get the `_from_schedule` suffix.
    """
    suffix = "_from_schedule" if from_schedule else ""
    if not slos:
        return {f"request_goodput{suffix}": None, f"good_requests{suffix}": None}
    count = int(np.count_nonzero(good_mask(arrays, samples, slos, suffix)))
    return {
        f"request_goodput{suffix}": count / duration_s if duration_s else None,
        f"good_requests{suffix}": count,
    }


def _server_fields(
    before: ServerSnapshot | None,
    after: ServerSnapshot | None,
    spec_tokens: int | None,
    maxima: ClientMaxima,
) -> dict[str, Any]:
    """The server's acceptance (held to `spec_tokens`, the K known apart from its
    counters) and latency means, and a Dynamo frontend's, each held to the client's
    maxima (latency_bounds.py)."""
    frontend = bounded_means(frontend_fields(before, after), maxima, "frontend")
    if before is None or after is None:
        latency_keys = [f"server_mean_{m}_ms" for m in LATENCY_HISTOGRAMS] + ["server_requests"]
        return {
            **dict.fromkeys([*SERVER_KEYS, *latency_keys, "server_latency_invalid_reason"]),
            **frontend,
        }
    return {
        **server_acceptance(before, after, spec_tokens),
        **bounded_means(server_latency_means(before, after), maxima, "server"),
        **frontend,
    }


def _per_request_lists(ordered: Sequence[RequestRecord]) -> dict[str, list[Any]]:
    """vLLM's per-request lists, in request order; a failed request has ttft None, output 0.

    vLLM's `itls` (every gap of every request: ~1.7 M numbers at conc 512) and
    `generated_texts` are not repeated here: the per-request JSONL holds the raw chunks.
    """
    return {
        "input_lens": [r.input_len for r in ordered],
        "output_lens": [r.output_tokens if is_completed(r) else 0 for r in ordered],
        "ttfts": [(r.chunk_ns[0] - r.start_ns) / 1e9 if is_completed(r) else None for r in ordered],
        "errors": [error_text(r) for r in ordered],
    }


def summarize(
    records: Sequence[RequestRecord],
    ctx: PointContext,
    *,
    server_before: ServerSnapshot | None = None,
    server_after: ServerSnapshot | None = None,
) -> PointMetrics:
    """The result-JSON metric fields of one point (see module doc and the report's field list).

    With the server's /metrics snapshots from before and after the point, the server-side
    acceptance and latency means are added (else those keys are None), and K falls back
    to the server's draft tokens per draft when ctx.spec_tokens is None.
    """
    ordered = sorted(records, key=lambda r: r.request_id)
    completed = [r for r in ordered if is_completed(r)]
    arrays = PointArrays.build(completed)
    samples = latency_samples(arrays)
    maxima = ClientMaxima.of(samples)
    server = _server_fields(server_before, server_after, ctx.spec_tokens, maxima)
    per_request = spec_decode_fields(ordered)
    spec_tokens = _spec_tokens(ctx, server, server_after, completed)
    stream = stream_acceptance_from_arrays(arrays, spec_tokens, ctx.stream_interval)
    throughput = throughput_fields(ordered, arrays, ctx.conc, ctx.num_gpus)
    result = _count_fields(ordered, completed, arrays, samples, ctx, spec_tokens, throughput)
    result.update(_latency_fields(arrays, samples, ctx))
    result.update(e2e_norm_intvty_fields(samples["e2el"], arrays.output_tokens))
    result["early_stopping"] = early_stopping_fields(samples, result, ctx)
    result.update(_goodput(arrays, samples, ctx, throughput["duration"]))
    result.update(error_fields(ordered))
    result.update(stray_bytes_fields(ordered))
    result.update(token_count_checks(arrays))
    result.update(token_source_fields(completed))
    result.update(arrival_stamp_fields(completed))
    result.update(stream)
    result.update(server)
    result.update(per_request)
    result.update(_server_timing_fields(ordered, ctx))
    result.update(acceptance_difference(stream, server))
    result.update(best_acceptance_length(stream, server, per_request))
    result["itl_chunks_merged_steps"] = itl_merged_steps(stream)
    result.update(
        golden_fields(
            ctx.golden,
            spec_tokens,
            result["acceptance_length"],
            result["acceptance_length_source"],
            al_disagreement(
                stream["stream_acceptance_length"],
                per_request["server_request_acceptance_length"],
            ),
        )
    )
    kernel = all(r.arrival_stamps is ArrivalStamps.KERNEL for r in completed)
    engines = server_after.engines if server_after is not None else None
    result.update(step_fields(arrays, kernel, ctx.stream_interval, engines))
    result.update(_per_request_lists(ordered))
    result.update(_phase_fields(ordered, completed, arrays, stream, spec_tokens, ctx))
    # Built, not cast: a key missing here or of the wrong type fails at once.
    return metrics_from_fields(result)


def _phase_fields(
    ordered: Sequence[RequestRecord],
    completed: Sequence[RequestRecord],
    arrays: PointArrays,
    stream: Mapping[str, Any],
    spec_tokens: int | None,
    ctx: PointContext,
) -> dict[str, Any]:
    """Reasoning and answer apart (metrics/phases.py); AL per phase over the same chunks
    as the stream's AL, and only where that one is valid."""
    valid = stream["stream_acceptance_length"] is not None
    decode = arrays.decode_chunk_mask(spec_tokens) if valid else None
    result, samples = phase_fields(ordered, completed, arrays, decode, ctx.thinking)
    for name in ("ttfa", "think"):
        result.update(distribution(name, samples[name], ctx.all_percentiles))
    for name in ("ttfr", "reasoning_tpot", "answer_tpot"):
        values = samples[name]
        result[f"mean_{name}_ms"] = float(values.mean()) if values.size else None
    return result


def _count_fields(
    ordered: Sequence[RequestRecord],
    completed: Sequence[RequestRecord],
    arrays: PointArrays,
    samples: Mapping[str, FloatArray],
    ctx: PointContext,
    spec_tokens: int | None,
    throughput: Mapping[str, Any],
) -> dict[str, Any]:
    """What was sent and what came back: counts, K, the start, and the throughput."""
    return {
        "num_prompts": len(ordered),
        "max_concurrency": ctx.conc,
        "completed": len(completed),
        "failed": len(ordered)
        - len(completed)
        - sum(r.error is ErrorKind.CANCELLED for r in ordered),  # cancelled: its own count
        "num_gpus": ctx.num_gpus,
        "spec_tokens": spec_tokens,
        "benchmark_start_time_unix": min(ordered, key=lambda r: r.start_ns).sent_unix
        if ordered
        else None,
        **throughput,
        "total_chunks": int(arrays.chunk_ns.size),
        # ITL gaps of exactly 0: both chunks came in one read (sent together, or read
        # late), so the gap between them was not measured
        "chunk_gaps_read_together": int(np.count_nonzero(samples["itl"] == 0)),
        "tpot_excluded_single_token": int(np.count_nonzero(arrays.output_tokens <= 1)),
    }


def _goodput(
    arrays: PointArrays,
    samples: Mapping[str, FloatArray],
    ctx: PointContext,
    duration: float | None,
) -> dict[str, Any]:
    """Goodput against the SLOs, from the send and from the schedule."""
    result = goodput_fields(arrays, samples, ctx.slos, duration)
    result.update(goodput_fields(arrays, samples, ctx.slos, duration, from_schedule=True))
    result["goodput_slos_ms"] = dict(ctx.slos) if ctx.slos else None
    return result


def _server_timing_fields(ordered: Sequence[RequestRecord], ctx: PointContext) -> dict[str, Any]:
    """The server's own per-request timings (vLLM's per-request metrics), as distributions."""
    result: dict[str, Any] = {
        "server_timing_requests": timing_requests(ordered),
        "server_timings_exceed_client": timings_exceeding_client(ordered),
    }
    server_samples = timing_samples(ordered)
    for name in TIMING_SAMPLES:
        result.update(distribution(name, server_samples[name], ctx.all_percentiles))
    return result


def _spec_tokens(
    ctx: PointContext,
    server: Mapping[str, Any],
    server_after: ServerSnapshot | None,
    completed: Sequence[RequestRecord],
) -> int | None:
    """K: the run's, else the server counters' draft tokens per draft (when a whole
    number), else their per-position series (vLLM registers all K; a draft it trimmed
    to the token budget leaves the ratio below K), else as the server's per-request
    stats say it."""
    spec_tokens = ctx.spec_tokens if ctx.spec_tokens is not None else server["server_spec_tokens"]
    if spec_tokens is None and server_after is not None:
        spec_tokens = positions_spec_tokens(server_after)
    if spec_tokens is None:
        spec_tokens = max(
            (
                r.server_spec_decode.num_spec_tokens
                for r in completed
                if r.server_spec_decode is not None
            ),
            default=None,
        )
    return spec_tokens


def _latency_fields(
    arrays: PointArrays, samples: Mapping[str, Any], ctx: PointContext
) -> dict[str, Any]:
    """Every latency distribution, and how long the new connections took."""
    result: dict[str, Any] = {}
    for name in (
        "ttft",
        "tpot",
        "itl",
        "e2el",
        "itl_per_token",
        "queue_time",
        "connect_time",
        "ttft_from_schedule",
        "e2el_from_schedule",
    ):
        result.update(distribution(name, samples[name], ctx.all_percentiles))
    result.update(
        distribution("interactivity", samples["interactivity"], ctx.all_percentiles, "tok_s_user")
    )
    connect = samples["connect_time"]
    result["max_connect_time_ms"] = float(connect.max()) if connect.size else None
    result["new_connections"] = int(np.count_nonzero(arrays.connect_ns > 0))
    return result


def early_stopping_fields(
    samples: Mapping[str, FloatArray], result: Mapping[str, Any], ctx: PointContext
) -> dict[str, EarlyStop]:
    """Per published percentile of TTFT, TPOT and E2EL: MLPerf's early-stopping figures
    against the metric's --slo bound, else against the published percentile itself."""
    found: dict[str, EarlyStop] = {}
    for name in EARLY_STOPPING_METRICS:
        values = samples[name]
        for p in ctx.all_percentiles:
            if not 0 < p < 100:
                continue
            key = f"p{percentile_word(p)}_{name}_ms"
            slo = ctx.slos.get(name)
            bound = slo if slo is not None else result[key]
            figures = early_stop(values, p, bound)
            found[key] = EarlyStop(
                samples=figures.samples,
                bound_ms=figures.bound_ms,
                bound_source="slo" if slo is not None else "percentile",
                over=figures.over,
                required_samples=figures.required,
                enough=figures.enough,
                estimate_ms=figures.estimate_ms,
                min_samples_for_estimate=figures.min_samples,
            )
    return found
