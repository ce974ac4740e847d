"""The North-Star frontier (metrics/north_star.py) as console lines and JSON, for
`loadgen compare --frontier north-star` and the end of a sweep file."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from loadgen.metrics.north_star import NorthStar, StarPoint


def _point(p: StarPoint, unit: str) -> str:
    e2e = "-" if p.e2e_norm_intvty is None else f"{p.e2e_norm_intvty:,.1f}"
    intvty = "-" if p.interactivity is None else f"{p.interactivity:,.1f}"
    return (
        f"  {p.run} conc {p.conc}: E2E norm. intvty p90 {e2e} tok/s/user, "
        f"interactivity {intvty} tok/s/user, {p.throughput:,.1f} {unit}"
    )


def north_star_lines(star: NorthStar) -> list[str]:
    unit = "out tok/s/GPU" if star.throughput_field.endswith("_per_gpu") else "out tok/s"
    lines = [
        f"North-Star frontier (InferenceX AgentX rule; every run's points one group): "
        f"{unit} against p90 E2E normalized interactivity",
        *(_point(p, unit) for p in star.canonical),
    ]
    if not star.canonical:
        lines.append("  no point has p90_e2e_norm_intvty (result files from before it?)")
    lines.append(
        f"{unit} against interactivity (1/TPOT), gated: the points on both that view's "
        "frontier and the North-Star frontier"
    )
    lines += [_point(p, unit) for p in star.gated] or ["  none"]
    if star.dropped:
        lines.append("left off (on the interactivity frontier, not North-Star winners):")
        lines += [_point(p, unit) for p in star.dropped]
    if star.without_metric:
        names = ", ".join(f"{p.run} conc {p.conc}" for p in star.without_metric)
        lines.append(f"not in the North-Star frontier (no p90_e2e_norm_intvty): {names}")
    return lines


def north_star_json(star: NorthStar) -> dict[str, Any]:
    return {
        "rule": "InferenceX AgentX North-Star: a point is on a published frontier only if "
        "it is on the frontier of throughput per GPU against p90 E2E normalized "
        "interactivity",
        "throughput_field": star.throughput_field,
        "metric_field": "p90_e2e_norm_intvty",
        "canonical": [asdict(p) for p in star.canonical],
        "interactivity_gated": [asdict(p) for p in star.gated],
        "interactivity_dropped": [asdict(p) for p in star.dropped],
        "without_metric": [asdict(p) for p in star.without_metric],
    }
