"""`--profile mlperf-endpoints`: where a rehearsal of an MLPerf Endpoints curve puts its
points, and what the profile turns on (pure).

Source: MLCommons Endpoints v1.0 rules (mlcommons/endpoints_policies, branch
v1.0_rules_dev), §5.3-§5.5, as the submission checker of mlcommons/endpoints-submission-cli
computes them (src/submission_checker/models/regions.py), read for behaviour only:

- the Ultra Low Concurrency region is 1-32 for every submission; C_min (1..32) is the
  curve's lowest concurrency, C_max (> 32) its highest (the system's Maximum Supported
  Concurrency);
- above C_min the space up to C_max is cut in three equal regions in log2 space:
  i = log2(C_max - C_min) / 3, Low = C_min+1 .. round(C_min + 2^i), Medium = the next
  .. round(C_min + 2^(2i)), High = the next .. C_max, rounded half to even (Python's
  round); a margin of 10 % above C_max (to ceil(1.1 C_max)) counts towards no region;
- a curve is 1 + 3 + 3 (+ 1 Offline point for a non-agentic benchmark): one point in
  Ultra Low, one in each of Low, Medium and High (the four mandatory points, each with
  an accuracy run), three more anywhere in those three regions (7 to 32 in all).

The rehearsal measures seven: C_min, and in each region its log2 middle (the
submitter's choice) and its upper end (the mandatory point; High's is C_max). A region
rounded to zero width gives fewer distinct points; the summary then says the curve
has fewer than 7.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.config.parsers import SpecError

PROFILES = ("mlperf-endpoints",)
ULTRA_LOW_MAX = 32
MIN_POINTS = 7
MAX_POINTS = 32
MARGIN = 1.10
# §6.2: the minimum steady-state duration of a point, by region
MIN_SECONDS_ULTRA_LOW = 600.0
MIN_SECONDS_OTHER = 1200.0
SOURCE = (
    "MLCommons Endpoints v1.0 rules §5.3-§5.5 (mlcommons/endpoints_policies "
    "v1.0_rules_dev; regions as mlcommons/endpoints-submission-cli computes them)"
)


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    start: int
    end: int  # inclusive; end < start: rounded to zero width

    def contains(self, conc: int) -> bool:
        return self.start <= conc <= self.end


@dataclass(frozen=True, slots=True)
class PlannedPoint:
    conc: int
    region: str
    mandatory: bool  # one per region: its accuracy run follows it


@dataclass(frozen=True, slots=True)
class EndpointsPlan:
    c_min: int
    c_max: int
    regions: tuple[Region, ...]  # ultra_low, low, medium, high, margin
    points: tuple[PlannedPoint, ...]  # ascending, distinct

    @property
    def concs(self) -> tuple[int, ...]:
        return tuple(p.conc for p in self.points)

    @property
    def mandatory(self) -> tuple[int, ...]:
        return tuple(p.conc for p in self.points if p.mandatory)

    def region_of(self, conc: int) -> str | None:
        """The first region holding `conc` (None: beyond the margin)."""
        return next((r.name for r in self.regions if r.contains(conc)), None)


def regions(c_min: int, c_max: int) -> tuple[Region, ...]:
    """§5.5's boundaries for a curve from c_min (1..32) to c_max (> 32)."""
    step = math.log2(c_max - c_min) / 3
    low_end = round(c_min + 2**step)
    med_end = round(c_min + 2 ** (2 * step))
    return (
        Region("ultra_low", 1, c_min),
        Region("low", c_min + 1, low_end),
        Region("medium", low_end + 1, med_end),
        Region("high", med_end + 1, c_max),
        Region("margin", c_max + 1, math.ceil(MARGIN * c_max)),
    )


def plan(concs: Sequence[int]) -> EndpointsPlan:
    """The seven points between the lowest and highest of `concs` (SpecError, one line,
    when they cannot bound a curve)."""
    c_min, c_max = min(concs), max(concs)
    if not 1 <= c_min <= ULTRA_LOW_MAX:
        raise SpecError(
            f"--profile mlperf-endpoints: the lowest --conc is {c_min}; the curve needs "
            f"its Ultra Low Concurrency point, 1..{ULTRA_LOW_MAX} (rules §5.4), e.g. --conc 4,512"
        )
    if c_max <= ULTRA_LOW_MAX:
        raise SpecError(
            f"--profile mlperf-endpoints: the highest --conc is {c_max}; give the system's "
            f"maximum supported concurrency, above {ULTRA_LOW_MAX} (rules §5.4), e.g. --conc 4,512"
        )
    bounds = regions(c_min, c_max)
    chosen: dict[int, PlannedPoint] = {c_min: PlannedPoint(c_min, "ultra_low", True)}
    for region in bounds[1:4]:
        if region.end < region.start:  # zero width: its one level is its boundary
            continue
        middle = round(2 ** ((math.log2(region.start) + math.log2(region.end)) / 2))
        chosen.setdefault(middle, PlannedPoint(middle, region.name, False))
        chosen[region.end] = PlannedPoint(region.end, region.name, True)
    points = tuple(chosen[c] for c in sorted(chosen))
    return EndpointsPlan(c_min, c_max, bounds, points)


def derive(settings: dict[str, Any]) -> dict[str, Any]:
    """The flat settings the profile sets over the run's own: its points, accuracy at
    the mandatory ones, outputs kept (the lossless check reads them)."""
    if settings.get("profile") is None:
        return {}
    if settings.get("profile") not in PROFILES:
        raise SpecError(
            f"--profile {settings['profile']!r}: the profiles are {', '.join(PROFILES)}"
        )
    for refused, flag in (
        (settings.get("find_max") is not None, "--find-max"),
        ((settings.get("shard_count") or 1) > 1, "--shard"),
    ):
        if refused:
            raise SpecError(
                f"--profile mlperf-endpoints: not with {flag}; the rehearsal measures its "
                "seven points from one loadgen"
            )
    chosen = plan(settings["conc"])
    return {
        "conc": chosen.concs,
        "accuracy": settings.get("accuracy") or "gsm8k",
        "accuracy_conc": chosen.mandatory,
        "record_outputs": True,
    }
