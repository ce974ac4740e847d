"""RunSpec's session checks (multi-turn, trace replay: docs/sessions.md), apart from
spec_checks.py for their number; `validate` calls them after the processes' checks."""

from __future__ import annotations

from loadgen.config.parsers import SpecError
from loadgen.config.subspecs import TRACE_FORMATS, SpecParts


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def validate_sessions(spec: SpecParts) -> None:
    _check(spec.session.sessions_per_conc >= 1, "--sessions-per-conc: must be >= 1")
    _check(
        not spec.session.multi_turn or spec.workload.dataset is not None,
        "--multi-turn plays a --dataset's conversations: give --dataset (or --turns N "
        "for synthetic sessions)",
    )
    _check(
        not spec.session.multi_turn or spec.workload.osl is not None,
        "--multi-turn: --osl is required (the max_tokens of each turn)",
    )
    _check(
        not spec.session.live_history or spec.workload.dataset_format not in TRACE_FORMATS,
        "--live-history: trace replay rebuilds each prompt from the trace's `in` and "
        "hash_ids, which a reply cannot change; use it with --turns or --multi-turn",
    )
    _check(
        not spec.session.live_history or spec.sessions,
        "--live-history puts the server's replies into the history of a session: use "
        "it with --turns N or --multi-turn",
    )
    _check(
        spec.session.turns is None or spec.workload.dataset is None,
        "--turns makes synthetic sessions; it excludes --dataset (use --multi-turn)",
    )
    if spec.session.start_ratio is not None:
        low, high = spec.session.start_ratio
        _check(0.0 <= low <= high < 1.0, "--start-ratio LO,HI: need 0 <= LO <= HI < 1")
    for flag, cap in (
        ("--idle-cap-system", spec.session.idle_cap_system_s),
        ("--idle-cap-tree", spec.session.idle_cap_tree_s),
    ):
        _check(cap is None or cap > 0, f"{flag}: must be > 0 seconds (0 = no cap: omit it)")
    _check(
        all(
            name and not any(c in name for c in " :\t\r\n") for name in spec.session.session_headers
        ),
        "--session-header: a header name without spaces or colons, e.g. X-Session-ID",
    )
    # Session runs on workers: each plays whole lanes (a tree and its subagents in one
    # process: run/sessions.py). Refused where a play's figures would depend on plays in
    # other processes: Mooncake's one hash scope per point, plays without their own
    # cache-bust marker. Shards (other machines) are refused for session runs.
    _check(
        not spec.sessions or spec.processes.shard_count == 1,
        "--shard does not support session runs (--turns, --multi-turn, trace replay): "
        "run them on one machine (--workers N splits their lanes over processes)",
    )
    if spec.sessions and spec.processes.workers is not None and spec.processes.workers > 1:
        _check(
            spec.workload.dataset_format != "mooncake",
            "--workers with a Mooncake trace: its requests share one hash scope per "
            "point, which processes cannot share; use --workers 1",
        )
        _check(
            spec.session.cache_bust,
            "--workers with --no-cache-bust: recycled plays of a tree "
            "would hit a cache another process filled; use --workers 1",
        )
