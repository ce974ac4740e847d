"""The console's and compare.json's disaggregated-lanes block (metrics/compare_disagg.py):
per concurrency each lane's TTFT parts and role figures, then who wins."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from loadgen.metrics.compare_disagg import PART_NAMES, DisaggComparison, LanePoint

ROLE_SHOWN = (
    ("requests", "req", 0),
    ("ttft_ms", "ttft ms", 1),
    ("itl_ms", "itl ms", 2),
    ("running", "running", 1),
    ("waiting", "waiting", 1),
    ("kv_usage", "kv", 2),
)


def _n(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _role_text(lane: LanePoint) -> str:
    return "; ".join(
        f"{role} " + " ".join(f"{short} {_n(figures.get(key), d)}" for key, short, d in ROLE_SHOWN)
        for role, figures in lane.roles.items()
        if any(figures.get(key) is not None for key, _, _ in ROLE_SHOWN)
    )


def disagg_lines(disagg: DisaggComparison | None) -> list[str]:
    if disagg is None:
        return []
    width = max(len(run) for run in disagg.runs)
    head = f"  {'lane':<{width}}  " + "  ".join(f"{p:>13}" for p in PART_NAMES)
    lines = [
        "disaggregated lanes: TTFT parts (mean ms, docs/results.md 'TTFT taken apart') and "
        "each role's server figures",
    ]
    for conc in disagg.concs:
        lines += [f"conc {conc}", head + f"  {'client TTFT':>11}"]
        for lane in disagg.lanes_at(conc):
            parts = "  ".join(f"{_n(lane.parts.get(p), 1):>13}" for p in PART_NAMES)
            lines.append(
                f"  {lane.run:<{width}}  {parts}  {_n(lane.client_mean_ttft_ms, 1):>11}"
                + (f"  ({lane.parts_verdict})" if lane.parts_verdict else "")
            )
            if lane.roles:
                lines.append(f"  {'':<{width}}  roles: {_role_text(lane)}")
        lines += [f"  {w.sentence}" for w in disagg.winners_at(conc)]
    return [*lines, ""]


def disagg_json(disagg: DisaggComparison | None) -> dict[str, Any] | None:
    if disagg is None:
        return None
    return {
        "runs": list(disagg.runs),
        "lanes": [asdict(lane) for lane in disagg.lanes],
        "winners": [asdict(w) for w in disagg.winners],
    }
