"""The lossless check (metrics/lossless.py) in words and columns, for every sink that
shows it: the console, compare.csv/.json and the HTML report read these."""

from __future__ import annotations

from typing import Any

from loadgen.metrics.lossless import LaneCheck, LosslessCheck, Share

# CSV columns, one set per run and concurrency (empty for the baseline and its repeat)
COLUMNS = (
    "identical_share",
    "identical_pairs",
    "identical_ci95_low",
    "identical_ci95_high",
    "first_divergence_median",
    "first_divergence_p10",
    "divergence_unit",
    "noise_floor",
    "noise_floor_pairs",
    "noise_floor_ci95_low",
    "lossless_pairs_needed",
    "lossless_verdict",
    "lossless_note",
)


def _share(share: Share | None) -> str:
    if share is None or share.value is None:
        return "-"
    low, high = share.interval() or (0.0, 0.0)
    return f"{share.value:.1%} of {share.pairs} [{low:.1%}, {high:.1%}]"


def lane_sentence(lane: LaneCheck) -> str:
    where = (
        ""
        if lane.divergence_median is None
        else f"; first divergence at {lane.divergence_unit} {lane.divergence_median:g} "
        f"(median), {lane.divergence_p10:g} (p10)"
    )
    return (
        f"{lane.run} conc {lane.conc}: identical to the baseline {_share(lane.share)}, "
        f"noise floor {_share(lane.floor)}{where}: {lane.label}"
    )


def lossless_lines(check: LosslessCheck | None) -> list[str]:
    """The console's section ([] when no run kept its outputs)."""
    if check is None:
        return []
    floor = (
        f"noise floor: {check.repeat} (a repeat of the baseline)"
        if check.repeat
        else "no noise floor: no repeat of the baseline (--repeat-baseline RUN, or a lane "
        f"named {check.baseline}.repeat)"
    )
    head = (
        f"outputs against the baseline {check.baseline}, prompt by prompt "
        f"(share identical [95 % interval]); {floor}"
    )
    return [head, *(f"  {lane_sentence(lane)}" for lane in check.lanes)]


def lane_columns(lane: LaneCheck) -> dict[str, Any]:
    interval = lane.share.interval() or (None, None)
    floor = lane.floor
    floor_interval = (floor.interval() if floor is not None else None) or (None, None)
    return {
        "identical_share": lane.share.value,
        "identical_pairs": lane.share.pairs,
        "identical_ci95_low": interval[0],
        "identical_ci95_high": interval[1],
        "first_divergence_median": lane.divergence_median,
        "first_divergence_p10": lane.divergence_p10,
        "divergence_unit": lane.divergence_unit,
        "noise_floor": None if floor is None else floor.value,
        "noise_floor_pairs": None if floor is None else floor.pairs,
        "noise_floor_ci95_low": floor_interval[0],
        "lossless_pairs_needed": lane.needed,
        "lossless_verdict": lane.verdict.value,
        "lossless_note": lane.label,
    }


def columns_by_row(check: LosslessCheck | None) -> dict[tuple[str, int], dict[str, Any]]:
    """(run, conc) -> its columns, for the comparison's rows."""
    if check is None:
        return {}
    return {(lane.run, lane.conc): lane_columns(lane) for lane in check.lanes}


def lossless_json(check: LosslessCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    return {
        "baseline": check.baseline,
        "repeat": check.repeat,
        "lanes": [
            {"run": lane.run, "conc": lane.conc, **lane_columns(lane)} for lane in check.lanes
        ],
        "flagged": [f"{lane.run} conc {lane.conc}" for lane in check.flagged],
        "failures": check.failures(),
    }
