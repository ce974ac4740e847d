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
from loadgen.wording import counted

LAG_SHARE_OF_ITL = 0.25
LAG_FLOOR_MS = 1.0
LAG_ABS_MS = 10.0
CPU_BUSY = 0.90
READ_TOGETHER_SHARE = 0.01


def _get(result: Mapping[str, Any], key: str) -> float | None:
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _stamp_sources(result: Mapping[str, Any]) -> set[str]:
    """Whose clocks stamped the point's requests; a result from before loadgen recorded it
    was stamped at the read."""
    sources = result.get("arrival_stamp_sources", {"read": 1})
    return set(sources) if isinstance(sources, dict) else set()


def _client_warnings(result: Mapping[str, Any]) -> list[str]:
    warnings = []
    lag, itl = _get(result, "client_loop_lag_p99_ms"), _get(result, "median_itl_ms")
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
    cpu, duration = _get(result, "client_cpu_seconds"), _get(result, "duration")
    if cpu is not None and duration and cpu / duration >= CPU_BUSY:
        warnings.append(
            f"client used {cpu / duration:.0%} of a CPU core over the point: it "
            "was saturated, so it may have read late (late stamps, or chunks read "
            "together)"
        )
    return warnings


def _check_warnings(result: Mapping[str, Any]) -> list[str]:
    warnings = []
    if result.get("complete") is False:
        warnings.append("point interrupted: figures cover only the requests that finished")
    failed, planned = result.get("failed") or 0, result.get("num_prompts") or 0
    if failed:
        kinds = {k: v for k, v in (result.get("errors_by_kind") or {}).items() if v}
        warnings.append(
            f"{failed} of {planned} requests failed "
            f"({', '.join(f'{k} {v}' for k, v in kinds.items())})"
        )
    if result.get("approximate"):
        warnings.append("token counts re-tokenized from text: approximate")
    together, chunks = result.get("chunk_gaps_read_together") or 0, result.get("total_chunks")
    gaps = (chunks or 0) - (result.get("completed") or 0)  # a request's first chunk has none
    if gaps > 0 and together >= READ_TOGETHER_SHARE * gaps:
        warnings.append(
            f"{together / gaps:.1%} of chunk gaps are 0: those chunks came in one "
            "read (sent together, or read late), so their ITL was not measured"
        )
    mismatches = result.get("chunk_tokens_vs_usage_mismatches") or 0
    if mismatches:
        warnings.append(
            f"the chunk token counts of {counted(mismatches, 'request')} disagree with the "
            "server's usage"
        )
    short = result.get("completion_tokens_vs_max_tokens_mismatches") or 0
    if short:
        warnings.append(
            f"{counted(short, 'request')} did not produce max_tokens tokens (server ignores "
            "ignore_eos?)"
        )
    warnings += _merged_steps_warnings(result)
    warnings += _acceptance_warnings(result)
    beyond = result.get("server_timings_exceed_client") or 0
    if beyond:
        warnings.append(
            f"the server's timings of {counted(beyond, 'request')} claim more time than the "
            "client measured (not those requests' timings): left out of the server timing "
            "figures"
        )
    # the server's counters or means it cannot have measured: null, and said here (not a
    # K that is only not the draft ratio: a busy vLLM trims drafts, every count true)
    voided = result.get("server_acceptance_length") is None
    for key, shown in (
        ("server_acceptance_invalid_reason", voided),
        ("server_latency_invalid_reason", True),
        ("frontend_latency_invalid_reason", True),
    ):
        reason = result.get(key)
        if shown and isinstance(reason, str) and reason:
            warnings.append(f"{reason} ({key})")
    return warnings


def _acceptance_warnings(result: Mapping[str, Any]) -> list[str]:
    """The stream's AL and the server's per-request AL of the same requests disagree
    beyond noise: one of them is not these requests' (stats tuned to a target AL, or
    chunks that are not steps), so neither should be trusted as the AL."""
    reason = al_disagreement(
        _get(result, "stream_acceptance_length"), _get(result, "server_request_acceptance_length")
    )
    if reason is None:
        return []
    return [
        f"{reason}: one of them does not describe these requests, so neither AL is "
        "trusted (and the golden-AL check does not pass on either)"
    ]


def _merged_steps_warnings(result: Mapping[str, Any]) -> list[str]:
    """Chunks that merged engine steps: the stream AL is void (null in new results) and
    each per-chunk ITL gap spans several steps."""
    reason = result.get("stream_acceptance_invalid_reason")
    oversized = result.get("stream_acceptance_oversized_chunks") or 0
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


def _simulator_warnings(result: Mapping[str, Any]) -> list[str]:
    """The simulator loadgen started fell behind its step schedule during the point: it
    sent late steps back to back, so the figures are an overloaded simulator's."""
    count = result.get("simulator_behind_warnings")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return []
    worst = _get(result, "simulator_behind_max_ms")
    by = f" by up to {worst:.0f} ms" if worst is not None else ""
    return [
        f"the simulator fell behind its step schedule{by} ({counted(count, 'warning')}) during "
        "the point: short of CPU, it sent late steps back to back, so ITL/TTFT describe "
        "an overloaded simulator, not the engine it models"
    ]


def _profile_warnings(result: Mapping[str, Any]) -> list[str]:
    """--profile-conc: the server ran its profiler through the measured phase, which
    slows every step; the numbers are kept for the trace's sake, never as the server's."""
    if result.get("profiled") is not True:
        return []
    error = result.get("profile_error")
    return [
        "profiled: a profiled server is slower (the server's profiler ran through this "
        "point's measured phase), so its latency and throughput are not the server's own"
        + (f"; the profiler window failed: {error}" if error else "")
    ]


def _early_stopping_warnings(result: Mapping[str, Any]) -> list[str]:
    """A percentile held to an --slo bound on too few samples for MLPerf's early stopping
    (metrics/early_stopping.py) to claim it at 0.99 confidence."""
    found = []
    entries = result.get("early_stopping")
    for key, entry in entries.items() if isinstance(entries, Mapping) else ():
        if not isinstance(entry, Mapping) or entry.get("bound_source") != "slo":
            continue
        if entry.get("enough") is False:
            found.append(
                f"{key}: {entry.get('samples')} samples, {entry.get('over')} over the --slo "
                f"bound {entry.get('bound_ms')} ms: MLPerf early stopping (0.99) needs "
                f"{entry.get('required_samples')} to claim it"
            )
    return found


def point_warnings(result: Mapping[str, Any]) -> list[str]:
    """Why this point's numbers may be off; empty when nothing is suspect."""
    return (
        _client_warnings(result)
        + _check_warnings(result)
        + _simulator_warnings(result)
        + _profile_warnings(result)
        + _early_stopping_warnings(result)
    )


def stamp_warnings(
    points: Mapping[str, Mapping[int, Mapping[str, Any]]],
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
    points: Mapping[str, Mapping[int, Mapping[str, Any]]],
) -> list[tuple[str, int, str]]:
    """Across the runs of a comparison: points whose prefix cache was in another state
    (cache_state: reset, reset_failed, uncontrolled; a file from before the field was
    uncontrolled) measured prompts against another cache, so their TTFT and prefix hits
    say as much about the cache as about the server. Said of every point when the runs
    differ, each naming the states of the others."""
    states = {
        (name, conc): str(point.get("cache_state") or "uncontrolled")
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
