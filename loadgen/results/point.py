"""The one typed result of a concurrency point (`conc_<N>.json`) and its file form.

`PointResult` groups what its producers each know: the metrics `summarize` computes from
the records, the client's health over the measured phase, the run's identity and the
point's status, and (session runs) the session figures. The live run, its worker
processes and `loadgen merge` all build it through run/assemble.py, so a field one of them
forgets is an error where it is built. The file is flat, in vLLM / InferenceX spelling
(docs/results.md): `PointResult.to_json` and `point_from_json` are the only places that
spelling is produced or read.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_origin

import msgspec
from msgspec import UNSET, UnsetType

from loadgen.errors import UsageError
from loadgen.results.point_metrics import EXTRA_PERCENTILE_KEY, PointMetrics

S = TypeVar("S", bound=msgspec.Struct)


class ResultFileError(UsageError):
    """A file loadgen reads back is not what it wrote: str() names the file and field."""


class CacheLossByContext(msgspec.Struct, frozen=True, kw_only=True):
    """One context bin's prefix-cache loss (metrics/session_rollup.py), over its requests
    that report cached_tokens: loss = theoretical - client hit rate."""

    context_min: int
    context_max: int | None  # None: the last, open bin
    requests: int
    prompt_tokens: int
    theoretical_hit_rate: float
    client_hit_rate: float
    loss: float


class CacheLossOverTime(msgspec.Struct, frozen=True, kw_only=True):
    """The same loss in one span of the point by request start (seconds from the first
    request's start). Its own type, not CacheLossByContext's figures inherited: a
    subclass would write its fields after the inherited ones, and the file puts the
    span first."""

    start_s: float
    end_s: float
    requests: int
    prompt_tokens: int
    theoretical_hit_rate: float
    client_hit_rate: float
    loss: float


class SessionMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """Session runs only (--turns, multi-turn datasets, trace replay): docs/results.md,
    "Sessions and prefix caching"."""

    session_history: str
    prompt_tokens_sent: int
    theoretical_cached_tokens: int | None
    theoretical_prefix_hit_rate: float | None
    server_prefix_cache_queries: int | None
    server_prefix_cache_hits: int | None
    server_prefix_hit_rate: float | None
    client_cached_tokens: int | None
    client_cached_requests: int
    client_prefix_hit_rate: float | None
    prefix_hit_rate_diff: float | None
    session_ttft_ms: dict[str, float | None]
    session_e2el_ms: dict[str, float | None]
    session_itl_ms: dict[str, float | None]
    session_interactivity_tok_s_user: dict[str, float | None]
    session_e2e_interactivity_tok_s_user: dict[str, float | None]
    ttft_by_context: list[dict[str, Any]]
    session_ids: int
    session_trees: int
    subagent_session_ids: int
    replay_trees_started: int
    replay_trees_completed: int
    replay_sessions_started: int
    replay_subagents_started: int
    replay_max_live_trees: int
    replay_gaps_capped_tree: int
    replay_gaps_cut_system: int
    replay_primers: int
    replay_primers_failed: int
    replay_sessions_cut: int
    replay_turns_skipped: int
    replay_arrivals_unsent: int = 0  # (0 in the files of a loadgen before it)
    # metrics/session_rollup.py: distributions over sessions and trees of their rollups,
    # session goodput (--slo), prefix-cache loss (defaults: files of an older loadgen)
    session_rollup: dict[str, dict[str, float | None]] = msgspec.field(default_factory=dict)
    tree_rollup: dict[str, dict[str, float | None]] = msgspec.field(default_factory=dict)
    good_sessions: int | None = None
    good_session_share: float | None = None
    prefix_cache_loss: float | None = None
    prefix_cache_loss_by_context: list[CacheLossByContext] = msgspec.field(default_factory=list)
    prefix_cache_loss_over_time: list[CacheLossOverTime] = msgspec.field(default_factory=list)


class ClientProcess(msgspec.Struct, frozen=True, kw_only=True):
    """One client process over a point's measured phase (run/client_health.py), so a
    hot or lagging one among the workers and shards can be found."""

    process: str  # "shard I/N worker W/M", "parent", "... (lost)", "trial K: ..."
    requests: int
    chunks: int
    cpu_seconds: float
    cpu_per_chunk_us: float | None  # None: it received no chunk
    loop_lag_p99_ms: float | None  # None: it stamps nothing (no loop-lag samples)
    loop_lag_max_ms: float | None
    loop_lag_samples: int
    # the event loop it timed on: None for the parent of workers (it times nothing)
    event_loop: str | None = None


class ClientHealth(msgspec.Struct, frozen=True, kw_only=True):
    """The client processes over the measured phase (run/client_health.py)."""

    client_cpu_seconds: float
    client_cpu_per_chunk_us: float | None
    client_loop_lag_p99_ms: float | None
    client_loop_lag_max_ms: float | None
    client_loop_lag_samples: int
    client_processes: list[ClientProcess]
    clock_alignment_uncertainty_ms: float | None


class PointIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """What was measured, by which run and client (shards: which share)."""

    shard: str | None
    shards_merged: int
    target: str
    run_id: str
    model_id: str | None
    endpoint_type: str
    endpoint: str
    base_url: str
    backend: str
    http_client: str
    input_len: int | None
    output_len: int | None
    range_ratio: float
    request_rate: float | str  # "inf": closed loop; "ramp", "stages": the other schedules
    burstiness: float
    ramp_up_strategy: str | None = None  # vllm bench serve's ramp-up (workload/ramp.py)
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    rate_stages: list[list[float]] | None = None  # --rate-stages: [req/s, seconds] each
    conc_stages: list[tuple[int, float]] | None = None  # --conc-stages: [in flight, seconds]
    loadgen_version: str
    tokenizer_check: dict[str, Any] | None


class SimulatorHealth(msgspec.Struct, frozen=True, kw_only=True):
    """The embedded simulator's lateness over the measured phase (run/embedded_sim.py):
    None when loadgen did not start the server it measured. Defaults: files from before
    these fields read as unknown."""

    simulator_behind_warnings: int | None = None
    simulator_behind_max_ms: int | None = None

    @staticmethod
    def combined(parts: list[SimulatorHealth]) -> SimulatorHealth:
        """Several simulators' (shards'): warnings summed, the worst lateness."""
        counts = [
            p.simulator_behind_warnings for p in parts if p.simulator_behind_warnings is not None
        ]
        worst = [p.simulator_behind_max_ms for p in parts if p.simulator_behind_max_ms is not None]
        return SimulatorHealth(
            simulator_behind_warnings=sum(counts) if counts else None,
            simulator_behind_max_ms=max(worst) if worst else None,
        )


# What the server's prefix cache held when the measured phase began (--reset-prefix-cache):
# emptied on every server loadgen knows, a reset asked for that did not happen, or
# whatever the points before left in it.
CacheStateName = Literal["reset", "reset_failed", "uncontrolled"]


class CacheState(msgspec.Struct, frozen=True, kw_only=True):
    """The prefix cache at the start of the point's measured work (run/cache_control.py).
    Defaults: files from before these fields read as uncontrolled, which they were."""

    cache_state: CacheStateName = "uncontrolled"
    cache_reset_detail: str | None = None  # reset_failed: why (each server's reason)

    @staticmethod
    def combined(parts: list[CacheState]) -> CacheState:
        """Several trials' or shards': reset only when each was; one failure fails it."""
        failed = [p for p in parts if p.cache_state == "reset_failed"]
        if failed:
            details = dict.fromkeys(p.cache_reset_detail or "" for p in failed)
            return CacheState(cache_state="reset_failed", cache_reset_detail="; ".join(details))
        if parts and all(p.cache_state == "reset" for p in parts):
            return CacheState(cache_state="reset")
        return CacheState()


class ProfileState(msgspec.Struct, frozen=True, kw_only=True):
    """--profile-conc: whether the measured phase ran inside a server profiler window
    (run/profiler_control.py). Defaults: files from before these fields were not profiled."""

    profiled: bool = False  # a window was opened around the measured phase: a slower server
    profile_prefix: str | None = None  # the trace files' name prefix asked of the server
    profile_trace: str | None = None  # where the server writes them, as far as known
    profile_error: str | None = None  # the window's start or stop failed: why

    @staticmethod
    def combined(parts: list[ProfileState]) -> ProfileState:
        """Several trials' or shards': profiled when any was; every failure kept (also a
        refused start's, on a part that was not profiled)."""
        profiled = [p for p in parts if p.profiled]
        errors = dict.fromkeys(p.profile_error for p in parts if p.profile_error)
        if not profiled:
            return ProfileState(profile_error="; ".join(errors) or None)
        return ProfileState(
            profiled=True,
            profile_prefix=profiled[0].profile_prefix,
            profile_trace=profiled[0].profile_trace,
            profile_error="; ".join(errors) or None,
        )


class Submission(msgspec.Struct, frozen=True, kw_only=True):
    """`loadgen profile --scenario inferencex-agentx-mvp` only: whether the point counts
    as a submission under the scenario's rules (metrics/submission.py), and why not."""

    submission_valid: bool
    submission_reasons: list[str]
    context_overflow_requests: int


class PointStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the point ran to its end, and why not (run/stops.py)."""

    complete: bool
    incomplete_reason: str | None
    stop_reason: str | None
    stop_detail: str | None


class PromptLengths(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the prompts have the lengths asked for (metrics/prompt_lengths.py)."""

    prompt_synthesis: str
    prompt_synthesis_note: str | None
    input_len_approximate: bool | None
    input_len_mismatches: int | None
    input_len_max_abs_diff: int | None


class GpuEnergy(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU over a point's window (metrics/energy.py); docs/results.md, "Energy"."""

    source: str  # the --gpu-metrics URL (credentials redacted)
    gpu: str  # the exporter's GPU index label
    uuid: str | None
    energy_j: float | None
    avg_power_w: float | None
    energy_source: str | None  # "counter" | "power" (trapezoid), None when not integrated
    # the trapezoid of power, also where the counter gave energy_j (InferenceX's figure)
    trapezoid_energy_j: float | None
    samples: int
    max_sample_gap_s: float | None
    issues: list[str]


class EnergyMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """GPU energy over the point's window, InferenceX's definition (--gpu-metrics only);
    the figures are null when `power_valid` is false."""

    power_valid: bool
    power_invalid_reasons: list[str]
    energy_source: str | None  # "counter", "power" or "mixed" over the GPUs
    gpu_metrics_interval_s: float
    power_num_gpus: int
    avg_power_w: float | None  # per GPU
    avg_total_gpu_power_w: float | None
    total_gpu_energy_j: float | None
    joules_per_output_token: float | None
    joules_per_input_token: float | None
    joules_per_total_token: float | None
    joules_per_request: float | None
    output_tokens_per_joule: float | None
    gpu_energy: list[GpuEnergy]


class SliceMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """One time slice of a point (`--slice-duration`; metrics/slices.py, docs/results.md
    "Time slices")."""

    start_s: float  # from the point's first send
    duration_s: float
    requests_started: int
    requests_completed: int
    output_tokens: int
    chunks: int
    output_throughput: float
    request_throughput: float
    ttft_samples: int
    p50_ttft_ms: float | None
    p99_ttft_ms: float | None
    itl_samples: int
    p50_itl_ms: float | None
    p99_itl_ms: float | None
    in_flight_mean: float
    in_flight_max: int
    kv_cache_usage_mean: float | None


class FigureSpread(msgspec.Struct, frozen=True, kw_only=True):
    """One headline figure over a point's trials (metrics/spread.py): each trial's value
    and the Student-t 95 % interval of their mean."""

    values: list[float | None]  # trial 1..N's own value (None: that trial had none)
    n: int  # trials with a value
    mean: float | None
    std: float | None
    cv: float | None
    ci_low: float | None
    ci_high: float | None
    ci_half_width: float | None
    wide: bool  # fewer than 5 trials: the interval is honest but wide


class TrialSpread(msgspec.Struct, frozen=True, kw_only=True):
    """--trials N: how the point moved between its N trials (docs/results.md, "Trials")."""

    trials: int
    trial_seeds: list[int]
    trial_files: list[str]
    trial_ci_method: str
    trial_spread: dict[str, FigureSpread]  # PointMetrics field name -> its spread


class ServerUrlFigures(msgspec.Struct, frozen=True, kw_only=True):
    """One --server-metrics URL's figures over a point (metrics/server_urls.py;
    docs/results.md). A fixed set of keys, but some are absent from a row rather than
    null, and the file keeps it so: UNSET (written as no key) for the counter figures of
    a URL not scraped before and after, server_latency_invalid_reason in `loadgen
    merge`'s rows (no client maxima to hold the means to) and `role` without ROLE=URL."""

    url: str
    scraped: bool  # read before and after the point
    server_acceptance_length: float | UnsetType | None = UNSET
    server_acceptance_rate: float | UnsetType | None = UNSET
    server_acceptance_per_position: list[float] | UnsetType | None = UNSET
    server_spec_tokens: int | UnsetType | None = UNSET
    server_spec_decode_drafts: int | UnsetType | None = UNSET
    server_spec_decode_draft_tokens: int | UnsetType | None = UNSET
    server_spec_decode_accepted_tokens: int | UnsetType | None = UNSET
    server_acceptance_invalid_reason: str | UnsetType | None = UNSET
    server_mean_ttft_ms: float | UnsetType | None = UNSET
    server_mean_e2el_ms: float | UnsetType | None = UNSET
    server_mean_itl_ms: float | UnsetType | None = UNSET
    server_mean_queue_time_ms: float | UnsetType | None = UNSET
    server_requests: float | UnsetType | None = UNSET  # the TTFT histogram's count delta
    server_latency_invalid_reason: str | UnsetType | None = UNSET
    # the gauges sampled during the point (null: no sample, e.g. `loadgen merge`'s rows)
    kv_cache_usage_max: float | None
    kv_cache_usage_mean: float | None
    requests_waiting_max: float | None
    requests_waiting_mean: float | None
    requests_running_max: float | None
    requests_running_mean: float | None
    gauge_samples: int
    role: str | UnsetType = UNSET  # frontend | prefill | decode | worker


class ServerRoleFigures(msgspec.Struct, frozen=True, kw_only=True):
    """A role's server figures over a point (`--server-metrics ROLE=URL`): its URLs'
    counters summed, its gauges added up (docs/results.md, "Per-role server figures")."""

    role: str  # frontend | prefill | decode | worker
    urls: list[str]
    scraped: bool  # every URL of the role read before and after
    server_requests: float | None = None
    server_mean_ttft_ms: float | None = None
    server_mean_e2el_ms: float | None = None
    server_mean_itl_ms: float | None = None
    server_mean_queue_time_ms: float | None = None
    server_acceptance_length: float | None = None
    server_acceptance_rate: float | None = None
    # why its acceptance or latency figures are null though counted (docs/results.md)
    server_acceptance_invalid_reason: str | None = None
    server_latency_invalid_reason: str | None = None
    requests_running_mean: float | None = None  # summed over the role's URLs
    requests_waiting_mean: float | None = None
    kv_cache_usage_mean: float | None = None  # the mean of its URLs' means
    kv_cache_usage_max: float | None = None  # the fullest URL's

    def figures(self) -> dict[str, float | None]:
        """The figures a console line and the exporter show, by a short name."""
        return {
            "requests": self.server_requests,
            "ttft_ms": self.server_mean_ttft_ms,
            "itl_ms": self.server_mean_itl_ms,
            "queue_ms": self.server_mean_queue_time_ms,
            "running": self.requests_running_mean,
            "waiting": self.requests_waiting_mean,
            "kv_usage": self.kv_cache_usage_mean,
        }


class TtftPart(msgspec.Struct, frozen=True, kw_only=True):
    """One part of a disaggregated point's TTFT (docs/results.md, "TTFT taken apart")."""

    mean_ms: float | None  # over the requests its histogram observed in the point
    p50_ms: float | None = None  # from the histogram's buckets, where they allow
    requests: float | None = None  # observations behind the mean
    source: str  # role: series it comes from
    reason: str | None = None  # why mean_ms (or p50_ms) is null


class NestedValue(msgspec.Struct, frozen=True, kw_only=True):
    """A Struct kept as one object under its key in the flat file (not a group)."""


class TtftParts(NestedValue, frozen=True, kw_only=True):
    """A disaggregated point's TTFT taken apart (metrics/ttft_parts.py)."""

    frontend_ms: TtftPart
    prefill_queue_ms: TtftPart
    prefill_ms: TtftPart
    kv_transfer_ms: TtftPart
    decode_first_ms: TtftPart
    unexplained_ms: TtftPart
    client_mean_ttft_ms: float | None
    parts_sum_ms: float | None
    bound_ms: float | None  # |unexplained| allowed for the parts to add up
    adds_up: bool | None  # None: not checked (a part or the client's TTFT unknown)
    verdict: str

    def means(self) -> dict[str, float | None]:
        """Each part's mean (ms) by its name without `_ms`, in TTFT's order."""
        return {
            "frontend": self.frontend_ms.mean_ms,
            "prefill_queue": self.prefill_queue_ms.mean_ms,
            "prefill": self.prefill_ms.mean_ms,
            "kv_transfer": self.kv_transfer_ms.mean_ms,
            "decode_first": self.decode_first_ms.mean_ms,
            "unexplained": self.unexplained_ms.mean_ms,
        }


class TargetPrecisionOutcome(NestedValue, frozen=True, kw_only=True):
    """--target-precision: whether the point stopped on it, and the interval it reached
    (run/features/target_precision.py; docs/results.md)."""

    metric: str  # ttft | tpot | e2el
    percentile: float
    fraction: float  # the half-width asked for, over the percentile
    confidence: float
    reached: bool  # the interval got narrow enough and the point stopped sending
    requests_at_stop: int | None  # records (in completion order) the stop was judged on
    samples_at_stop: int | None  # of which samples of the metric
    value_at_stop_ms: float | None
    low_at_stop_ms: float | None
    high_at_stop_ms: float | None
    relative_at_stop: float | None  # half-width / value when it stopped (< fraction)
    # the most it could reach once the requests in flight ended (< fraction to stop)
    worst_relative_at_stop: float | None
    samples: int  # over the point's records, those that ended after the stop included
    value_ms: float | None
    low_ms: float | None
    high_ms: float | None
    relative: float | None  # null: too few samples for an interval
    checks: int  # how often it was judged


class PointResult(msgspec.Struct, frozen=True, kw_only=True):
    """One point, as every producer builds it (run/assemble.py) and every reader gets it."""

    metrics: PointMetrics
    client: ClientHealth
    identity: PointIdentity
    status: PointStatus
    prompts: PromptLengths
    planned_requests: int
    warmup_requests: int
    warmup_failed: int
    server_metrics_by_url: list[ServerUrlFigures] | None
    simulator: SimulatorHealth = msgspec.field(default_factory=SimulatorHealth)
    cache: CacheState = msgspec.field(default_factory=CacheState)
    profile: ProfileState = msgspec.field(default_factory=ProfileState)
    sessions: SessionMetrics | None = None
    energy: EnergyMetrics | None = None
    slices: list[SliceMetrics] | None = None  # --slice-duration
    stage_slices: list[SliceMetrics] | None = None  # --conc-stages: one per stage reached
    trials: TrialSpread | None = None
    submission: Submission | None = None
    # --server-metrics ROLE=URL: each role's figures (None when no entry names a role)
    server_metrics_by_role: list[ServerRoleFigures] | None = None
    # a disaggregated run's (--server-metrics prefill=/decode=): its TTFT taken apart
    ttft_parts: TtftParts | None = None
    # --target-precision: the point's interval and whether it stopped the point
    target_precision: TargetPrecisionOutcome | None = None

    @property
    def conc(self) -> int:
        return self.metrics.max_concurrency

    def to_json(self) -> dict[str, Any]:
        """The flat file form: every group's fields side by side, extra percentiles flat."""
        return flat_fields(self)


# A nested Struct is a group of the flat file's keys; `session_history` marks a session
# point, `power_valid` a point with --gpu-metrics, `trial_seeds` a point pooled over
# --trials and `submission_valid` a scenario run's (the optional groups).
_OPTIONAL_MARKER: dict[type[msgspec.Struct], str] = {
    SessionMetrics: "session_history",
    EnergyMetrics: "power_valid",
    TrialSpread: "trial_seeds",
    Submission: "submission_valid",
}
_EXTRA = "extra_percentiles"


def _group_type(annotation: Any) -> type[msgspec.Struct] | None:
    """The Struct a field holds (`X` or `X | None`), None for a plain value (a list or a
    `dict[str, X]` of Structs too: that is one value, `gpu_energy`, `slices`)."""
    union = isinstance(annotation, types.UnionType) or get_origin(annotation) is Union
    options = annotation.__args__ if union else (annotation,)
    for option in options:
        if (
            isinstance(option, type)
            and issubclass(option, msgspec.Struct)
            and not issubclass(option, NestedValue)
        ):
            return option
    return None


def flat_fields(struct: msgspec.Struct) -> dict[str, Any]:
    """A Struct of the result model in its flat file spelling (nested groups side by side)."""
    flat: dict[str, Any] = {}
    for field in msgspec.structs.fields(struct):
        value = getattr(struct, field.name)
        if isinstance(value, msgspec.Struct) and not isinstance(value, NestedValue):
            flat.update(flat_fields(value))
        elif field.name == _EXTRA:
            flat.update(value)
        elif _group_type(field.type) is None:  # an absent optional group writes nothing
            flat[field.encode_name] = msgspec.to_builtins(value)
    return flat


def point_from_json(obj: object, source: str) -> PointResult:
    """A point file's decoded JSON -> PointResult; ResultFileError names `source` and the
    field that is missing or of the wrong type. Keys loadgen does not know are ignored
    (a newer loadgen may add fields)."""
    if not isinstance(obj, dict):
        raise ResultFileError(
            f"{source}: not a loadgen point result (a JSON "
            f"{type(obj).__name__}, expected an object)"
        )
    try:
        return _unflatten(PointResult, obj)
    except msgspec.ValidationError as exc:
        raise ResultFileError(
            f"{source}: {field_message(exc)}; not a point result of this "
            "loadgen (written by another version, or edited?)"
        ) from None


def metrics_from_fields(fields: Mapping[str, Any]) -> PointMetrics:
    """summarize's computed fields (file spelling) -> the Struct; msgspec.ValidationError
    names a missing or mistyped field (a programming error, never a user's)."""
    return _unflatten(PointMetrics, fields)


def _unflatten(cls: type[S], flat: Mapping[str, Any]) -> S:
    part: dict[str, Any] = {}
    for field in msgspec.structs.fields(cls):
        group = _group_type(field.type)
        if group is not None:
            marker = _OPTIONAL_MARKER.get(group)
            part[field.name] = None if marker and marker not in flat else _unflatten(group, flat)
        elif field.name == _EXTRA:
            part[_EXTRA] = {
                k: v
                for k, v in flat.items()
                if EXTRA_PERCENTILE_KEY.match(k) and k not in _METRIC_NAMES
            }
        elif field.encode_name in flat:
            part[field.encode_name] = flat[field.encode_name]
    return msgspec.convert(part, cls)


_METRIC_NAMES = frozenset(f.encode_name for f in msgspec.structs.fields(PointMetrics))


def field_message(exc: msgspec.ValidationError) -> str:
    """msgspec's `Expected `int`, got `str` - at `$.completed`` with the field named first;
    a missing field by its whole path (`missing field `points[0].conc``)."""
    text = str(exc)
    head, sep, where = text.rpartition(" - at `$")
    path = where.rstrip("`").lstrip(".") if sep else ""
    head = head if sep else text
    missing = re.match(r"Object missing required field `([^`]+)`", head)
    if missing:
        return f"missing field `{path + '.' if path else ''}{missing[1]}`"
    return f"field {path!r}: {head}" if path else head


def file_keys(cls: type[msgspec.Struct]) -> frozenset[str]:
    """Every key the flat file form of `cls` has (docs/results.md documents each)."""
    keys: set[str] = set()
    for field in msgspec.structs.fields(cls):
        group = _group_type(field.type)
        if group is not None:
            keys |= file_keys(group)
        elif field.name != _EXTRA:
            keys.add(field.encode_name)
    return frozenset(keys)
