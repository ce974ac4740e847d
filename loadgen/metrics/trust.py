"""When a published number should not be trusted: warnings from one point's result, and
across the points of a comparison (pure).

A client that stamps arrivals on its event loop (`arrival_stamps` `read`) stamps late
when the loop lags, which inflates TTFT and ITL by that much; kernel stamps are not moved
by the loop, but a client short of CPU reads late, and chunks read together share one
stamp (collapsed gaps). The thresholds say when the error is a noticeable part of what
was measured:
- loop lag p99 at least LAG_SHARE_OF_ITL of the median chunk gap (and above LAG_FLOOR_MS,
  loopback noise), or at least LAG_ABS_MS whatever the gap (TTFT is hit as well);
- client CPU at least CPU_BUSY of one core over the point (the loop cannot keep up).
The other warnings repeat what the result already says in its check fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.metrics.acceptance import al_disagreement
from loadgen.results.point import PointResult
from loadgen.wording import counted

LAG_SHARE_OF_ITL = 0.25
LAG_FLOOR_MS = 1.0
LAG_ABS_MS = 10.0
CPU_BUSY = 0.90
READ_TOGETHER_SHARE = 0.01


def _stamp_sources(result: PointResult) -> set[str]:
    """Whose clocks stamped the point's requests."""
    return set(result.metrics.arrival_stamp_sources)


def _client_warnings(result: PointResult) -> list[str]:
    warnings = []
    lag, itl = result.client.client_loop_lag_p99_ms, result.metrics.median_itl_ms
    if "read" not in _stamp_sources(result):
        lag = None  # every stamp is the kernel's: the loop's lag did not move them
    relative = (
        lag is not None
        and itl is not None
        and itl > 0
        and lag >= max(LAG_FLOOR_MS, LAG_SHARE_OF_ITL * itl)
    )
    if lag is not None and (lag >= LAG_ABS_MS or relative):
        share = f" ({lag / itl:.0%} of the median ITL {itl:.2f} ms)" if itl else ""
        warnings.append(
            f"client event-loop lag p99 {lag:.2f} ms{share}: arrival stamps may "
            "be late by that much, inflating TTFT and ITL"
        )
    cpu, duration = result.client.client_cpu_seconds, result.metrics.duration
    if duration and cpu / duration >= CPU_BUSY:
        warnings.append(
            f"client used {cpu / duration:.0%} of a CPU core over the point: it "
            "was saturated, so it may have read late (late stamps, or chunks read "
            "together)"
        )
    return warnings


def _check_warnings(result: PointResult) -> list[str]:
    warnings = []
    metrics = result.metrics
    if not result.status.complete:
        warnings.append("point interrupted: figures cover only the requests that finished")
    failed, planned = metrics.failed, metrics.num_prompts
    if failed:
        kinds = {k: v for k, v in metrics.errors_by_kind.items() if v}
        warnings.append(
            f"{failed} of {planned} requests failed "
            f"({', '.join(f'{k} {v}' for k, v in kinds.items())})"
        )
    if metrics.approximate:
        warnings.append("token counts re-tokenized from text: approximate")
    together = metrics.chunk_gaps_read_together
    gaps = metrics.total_chunks - metrics.completed  # a request's first chunk has none
    if gaps > 0 and together >= READ_TOGETHER_SHARE * gaps:
        warnings.append(
            f"{together / gaps:.1%} of chunk gaps are 0: those chunks came in one "
            "read (sent together, or read late), so their ITL was not measured"
        )
    mismatches = metrics.chunk_tokens_vs_usage_mismatches
    if mismatches:
        warnings.append(
            f"the chunk token counts of {counted(mismatches, 'request')} disagree with the "
            "server's usage"
        )
    short = metrics.completion_tokens_vs_max_tokens_mismatches
    if short:
        warnings.append(
            f"{counted(short, 'request')} did not produce max_tokens tokens (server ignores "
            "ignore_eos?)"
        )
    warnings += _merged_steps_warnings(result)
    warnings += _acceptance_warnings(result)
    beyond = metrics.server_timings_exceed_client
    if beyond:
        warnings.append(
            f"the server's timings of {counted(beyond, 'request')} claim more time than the "
            "client measured (not those requests' timings): left out of the server timing "
            "figures"
        )
    # the server's counters or means it cannot have measured: null, and said here (not a
    # K that is only not the draft ratio: a busy vLLM trims drafts, every count true)
    voided = metrics.server_acceptance_length is None
    for key, reason, shown in (
        ("server_acceptance_invalid_reason", metrics.server_acceptance_invalid_reason, voided),
        ("server_latency_invalid_reason", metrics.server_latency_invalid_reason, True),
        ("frontend_latency_invalid_reason", metrics.frontend_latency_invalid_reason, True),
    ):
        if shown and reason:
            warnings.append(f"{reason} ({key})")
    return warnings


def _acceptance_warnings(result: PointResult) -> list[str]:
    """The stream's AL and the server's per-request AL of the same requests disagree
    beyond noise: one of them is not these requests' (stats tuned to a target AL, or
    chunks that are not steps), so neither should be trusted as the AL."""
    reason = al_disagreement(
        result.metrics.stream_acceptance_length, result.metrics.server_request_acceptance_length
    )
    if reason is None:
        return []
    return [
        f"{reason}: one of them does not describe these requests, so neither AL is "
        "trusted (and the golden-AL check does not pass on either)"
    ]


def _merged_steps_warnings(result: PointResult) -> list[str]:
    """Chunks that merged engine steps: the stream AL is void (null in new results) and
    each per-chunk ITL gap spans several steps."""
    reason = result.metrics.stream_acceptance_invalid_reason
    oversized = result.metrics.stream_acceptance_oversized_chunks or 0
    if reason is None and oversized:  # a result from before the reason was recorded
        carry = "carries" if oversized == 1 else "carry"
        reason = f"{counted(oversized, 'decode chunk')} {carry} more than K+1 tokens (steps merged)"
    if reason is None:
        return []
    return [
        f"{reason}; so no stream AL is published (the AL shown is the server "
        "counters'), and per-chunk ITL pools gaps that span several engine steps "
        "(itl_chunks_merged_steps)"
    ]


def _simulator_warnings(result: PointResult) -> list[str]:
    """The simulator loadgen started fell behind its step schedule during the point: it
    sent late steps back to back, so the figures are an overloaded simulator's."""
    count = result.simulator.simulator_behind_warnings
    if count is None or count <= 0:
        return []
    worst = result.simulator.simulator_behind_max_ms
    by = f" by up to {worst:.0f} ms" if worst is not None else ""
    return [
        f"the simulator fell behind its step schedule{by} ({counted(count, 'warning')}) during "
        "the point: short of CPU, it sent late steps back to back, so ITL/TTFT describe "
        "an overloaded simulator, not the engine it models"
    ]


def _profile_warnings(result: PointResult) -> list[str]:
    """--profile-conc: the server ran its profiler through the measured phase, which
    slows every step; the numbers are kept for the trace's sake, never as the server's."""
    if not result.profile.profiled:
        return []
    error = result.profile.profile_error
    return [
        "profiled: a profiled server is slower (the server's profiler ran through this "
        "point's measured phase), so its latency and throughput are not the server's own"
        + (f"; the profiler window failed: {error}" if error else "")
    ]


def _early_stopping_warnings(result: PointResult) -> list[str]:
    """A percentile held to an --slo bound on too few samples for MLPerf's early stopping
    (metrics/early_stopping.py) to claim it at 0.99 confidence."""
    return [
        f"{key}: {entry.samples} samples, {entry.over} over the --slo "
        f"bound {entry.bound_ms} ms: MLPerf early stopping (0.99) needs "
        f"{entry.required_samples} to claim it"
        for key, entry in result.metrics.early_stopping.items()
        if entry.bound_source == "slo" and entry.enough is False
    ]


def point_warnings(result: PointResult) -> list[str]:
    """Why this point's numbers may be off; empty when nothing is suspect."""
    return (
        _client_warnings(result)
        + _check_warnings(result)
        + _simulator_warnings(result)
        + _profile_warnings(result)
        + _early_stopping_warnings(result)
    )


def stamp_warnings(
    points: Mapping[str, Mapping[int, PointResult]],
) -> list[tuple[str, int, str]]:
    """Across the runs of a comparison (run -> concurrency -> result): points stamped at
    the read compared with kernel-stamped ones differ by the client's read delay, which
    is not the server's (a run before kernel stamps, https, or an earlier --http-client aiohttp)."""
    kernel = sorted(
        name
        for name, run in points.items()
        if any("kernel" in _stamp_sources(p) for p in run.values())
    )
    if not kernel:
        return []
    return [
        (
            name,
            conc,
            f"stamped at the read, compared with kernel-stamped {kernel[0]}: "
            "its TTFT and ITL include the client's read delay (client_loop_lag_p99_ms)",
        )
        for name, run in points.items()
        for conc, point in run.items()
        if "read" in _stamp_sources(point)
    ]


def cache_warnings(
    points: Mapping[str, Mapping[int, PointResult]],
) -> list[tuple[str, int, str]]:
    """Across the runs of a comparison: points whose prefix cache was in another state
    (cache_state: reset, reset_failed, uncontrolled; a file from before the field was
    uncontrolled) measured prompts against another cache, so their TTFT and prefix hits
    say as much about the cache as about the server. Said of every point when the runs
    differ, each naming the states of the others."""
    states = {
        (name, conc): point.cache.cache_state
        for name, run in points.items()
        for conc, point in run.items()
    }
    if len(set(states.values())) < 2:
        return []
    return [
        (
            name,
            conc,
            f"cache_state {state}, while "
            + ", ".join(sorted({s for s in states.values() if s != state}))
            + " elsewhere in this comparison: its TTFT and prefix hits reflect a different "
            "prefix cache (--reset-prefix-cache on every lane makes them alike)",
        )
        for (name, conc), state in states.items()
    ]


def workload_mismatch(workloads: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One line when the runs of a comparison (run -> what shapes its requests) measured
    different work: a ratio between 1k/256 and 8k/1k says nothing about the servers."""
    differ = [
        key
        for key in dict.fromkeys(k for w in workloads.values() for k in w)
        if len({repr(w.get(key)) for w in workloads.values()}) > 1
    ]
    if not differ:
        return None
    parts = [
        f"{key} "
        + " vs ".join(f"{workload.get(key)} ({name})" for name, workload in workloads.items())
        for key in differ
    ]
    return (
        f"the runs measured different workloads ({'; '.join(parts)}): their ratios "
        "compare different work, not only different servers"
    )
