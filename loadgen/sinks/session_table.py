"""The console table of a session run: sessions, prefix-cache hit rates side by side,
latency percentiles and TTFT by context length, one line per point. "hit router" is a
Dynamo KV router's predicted hit rate per routed request (router_kv_hit_rate), beside
the engine's token-weighted one ("hit server")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.results.point import PointResult


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def format_session_table(results: Sequence[PointResult]) -> str | None:
    """None when no point is a session run."""
    rows = [r.to_json() for r in results if r.sessions is not None]
    if not rows:
        return None
    head = (
        "conc  trees  sessions  turns  hit theory  hit server  hit router  hit client  "
        "TTFT p50  TTFT p90  TTFT p99  E2E tok/s/user p50  TTFT p50 by context"
    )
    lines = [head, "  ".join("-" * len(part) for part in head.split("  ") if part)]
    for r in sorted(rows, key=lambda r: r["max_concurrency"]):
        ttft = r.get("session_ttft_ms") or {}
        e2e = r.get("session_e2e_interactivity_tok_s_user") or {}
        bins = " ".join(
            f"<{(b['context_max'] or 0) // 1024}k:{_ms(b['p50_ttft_ms'])}"
            if b["context_max"]
            else f">={b['context_min'] // 1024}k:{_ms(b['p50_ttft_ms'])}"
            for b in r.get("ttft_by_context", [])
        )
        lines.append(
            f"{r['max_concurrency']:>4}  {r.get('session_trees', 0):>5}  "
            f"{r.get('session_ids', 0):>8}  {r['completed']:>5}  "
            f"{_pct(r.get('theoretical_prefix_hit_rate')):>10}  "
            f"{_pct(r.get('server_prefix_hit_rate')):>10}  "
            f"{_pct(r.get('router_kv_hit_rate')):>10}  "
            f"{_pct(r.get('client_prefix_hit_rate')):>10}  {_ms(ttft.get('p50')):>8}  "
            f"{_ms(ttft.get('p90')):>8}  {_ms(ttft.get('p99')):>8}  "
            f"{_ms(e2e.get('p50')):>18}  {bins}"
        )
    return "\n".join([*lines, *_rollup_lines(rows)])


def _rollup_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per-session rollups (metrics/session_rollup.py): turns and the time a session
    waited on the server (its E2ELs summed), good sessions (--slo), prefix-cache loss."""
    head = (
        "conc  turns/session p50  session wait p50 ms  session wait p90 ms  "
        "cached share p50  good sessions  cache loss"
    )
    lines = [head, "  ".join("-" * len(part) for part in head.split("  ") if part)]
    for r in sorted(rows, key=lambda r: r["max_concurrency"]):
        rollup = r.get("session_rollup") or {}
        turns, wait = rollup.get("turns") or {}, rollup.get("e2el_total_ms") or {}
        share = (rollup.get("cached_share") or {}).get("p50")
        good = r.get("good_sessions")
        goods = "-" if good is None else f"{good}/{r.get('session_ids', 0)}"
        lines.append(
            f"{r['max_concurrency']:>4}  {_ms(turns.get('p50')):>17}  "
            f"{_ms(wait.get('p50')):>19}  {_ms(wait.get('p90')):>19}  {_pct(share):>16}  "
            f"{goods:>13}  "
            f"{_pct(r.get('prefix_cache_loss')):>10}"
        )
    return lines
