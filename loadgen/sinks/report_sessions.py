"""The HTML report's Sessions section: per run and point, the prefix-cache hit rates side
by side with their loss, session goodput and the per-session rollups, then the loss by
context bin (fields of docs/results.md, "Sessions and prefix caching"; a point's typed
SessionMetrics, None for a point of a run without sessions)."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loadgen.results.point import PointResult, SessionMetrics
from loadgen.results.point_metrics import PointMetrics

Points = Mapping[int, PointResult]  # conc -> conc_<N>.json
# the hit rates, by the field each cell names
HIT_RATES: tuple[tuple[str, Callable[[SessionMetrics, PointMetrics], float | None]], ...] = (
    ("theoretical_prefix_hit_rate", lambda s, _: s.theoretical_prefix_hit_rate),
    ("server_prefix_hit_rate", lambda s, _: s.server_prefix_hit_rate),
    # a Dynamo KV router's, predicted per routed request (a point figure, not a session's)
    ("router_kv_hit_rate", lambda _, m: m.router_kv_hit_rate),
    ("client_prefix_hit_rate", lambda s, _: s.client_prefix_hit_rate),
    ("prefix_cache_loss", lambda s, _: s.prefix_cache_loss),
    ("good_session_share", lambda s, _: s.good_session_share),
)
ROLLUPS = (
    ("session_rollup", "turns", "p50"),
    ("session_rollup", "e2el_total_ms", "p50"),
    ("session_rollup", "e2el_total_ms", "p90"),
    ("session_rollup", "cached_share", "p50"),
    ("tree_rollup", "e2el_total_ms", "p50"),
    ("tree_rollup", "e2el_total_ms", "p90"),
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cell(value: Any, field: str, percent: bool = False) -> str:
    if value is None:
        text = "-"
    elif percent:
        text = f"{100 * value:.1f}%"
    else:
        text = f"{value:,.1f}" if isinstance(value, float) else str(value)
    return f'<td class=num data-field="{_e(field)}">{_e(text)}</td>'


def _rollup(sessions: SessionMetrics, group: str) -> dict[str, dict[str, float | None]]:
    return sessions.session_rollup if group == "session_rollup" else sessions.tree_rollup


def _row(run: str, conc: int, sessions: SessionMetrics, metrics: PointMetrics) -> str:
    cells = _cell(sessions.session_ids, "session_ids")
    cells += _cell(sessions.session_trees, "session_trees")
    cells += "".join(_cell(read(sessions, metrics), k, percent=True) for k, read in HIT_RATES)
    for group, figure, stat in ROLLUPS:
        value = (_rollup(sessions, group).get(figure) or {}).get(stat)
        cells += _cell(value, f"{group}.{figure}.{stat}", percent=figure == "cached_share")
    return (
        f'<tr data-run="{_e(run)}" data-conc="{conc}"><th>{_e(run)}</th><td>{conc}</td>{cells}</tr>'
    )


def _loss_rows(run: str, conc: int, sessions: SessionMetrics) -> list[str]:
    rows = []
    for b in sessions.prefix_cache_loss_by_context:
        high = b.context_max
        span = f"{b.context_min}-{high}" if high is not None else f"{b.context_min}+"
        rates = (
            (b.theoretical_hit_rate, "theoretical_hit_rate"),
            (b.client_hit_rate, "client_hit_rate"),
            (b.loss, "loss"),
        )
        rows.append(
            f'<tr data-run="{_e(run)}" data-conc="{conc}"><th>{_e(run)}</th>'
            f"<td>{conc}</td><td>{_e(span)}</td>"
            + _cell(b.requests, "requests")
            + "".join(_cell(value, k, percent=True) for value, k in rates)
            + "</tr>"
        )
    return rows


def sessions_section(runs: Sequence[tuple[str, Points]]) -> str:
    rows, losses = [], []
    for name, points in runs:
        for conc in sorted(points):
            sessions = points[conc].sessions
            if sessions is None:
                continue  # not a session run
            rows.append(_row(name, conc, sessions, points[conc].metrics))
            losses += _loss_rows(name, conc, sessions)
    if not rows:
        return "<p>No session run (no per-session figures).</p>"
    head = (
        "<tr><th>run</th><th>conc</th><th>sessions</th><th>trees</th><th>hit theory</th>"
        "<th>hit server</th><th>hit router</th><th>hit client</th><th>cache loss</th>"
        "<th>good sessions</th>"
        "<th>turns/session p50</th><th>session wait p50 ms</th>"
        "<th>session wait p90 ms</th><th>cached share p50</th><th>tree wait p50 ms</th>"
        "<th>tree wait p90 ms</th></tr>"
    )
    out = f'<div class="wide"><table id="sessions">{head}{"".join(rows)}</table></div>'
    if losses:
        out += (
            "<h3>Prefix-cache loss by context (requests reporting cached_tokens)</h3>"
            '<table id="cache-loss"><tr><th>run</th><th>conc</th><th>context tokens</th>'
            "<th>requests</th><th>hit theory</th><th>hit client</th><th>loss</th></tr>"
            + "".join(losses)
            + "</table>"
        )
    return out
