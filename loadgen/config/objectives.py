"""`--find-max` objectives: `--slo ttft:p99=2s,tpot:p50=20ms` (docs/capacity.md).

`--slo` takes two forms side by side. `METRIC=T` is a goodput SLO, judged per request
(docs/results.md, "Goodput"), as before. `METRIC:pNN=T` is a capacity objective, judged
per point: the point's NN-th percentile of METRIC must be at most T. With `--find-max`, a
plain `METRIC=T` is also an objective at the default percentile, p99 (and stays a goodput
SLO); without `--find-max`, a percentile form is refused (it would measure nothing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from loadgen.config.parsers import SLO_METRICS, SpecError, parse_duration_ms

DEFAULT_PERCENTILE = 99.0
FIND_MAX_KINDS = ("conc", "rate")
_OBJECTIVE_KEY = re.compile(r"^([a-z0-9]+):p([0-9]+(?:\.[0-9]+)?)$")


@dataclass(frozen=True, slots=True)
class Objective:
    """The point's `percentile` of `metric` (ms) must be at most `limit_ms`."""

    metric: str  # one of SLO_METRICS
    percentile: float
    limit_ms: float

    @property
    def name(self) -> str:
        """`ttft:p99`, `tpot:p50`, `itl:p99.9` (as the flag spells it)."""
        return f"{self.metric}:p{self.percentile:g}"

    @property
    def field(self) -> str:
        """The point result's field (file spelling): p50 is `median_*`, as vLLM's."""
        if self.percentile == 50:
            return f"median_{self.metric}_ms"
        return f"p{self.percentile:g}_{self.metric}_ms"


def find_max_problem(
    kind: str,
    objectives: Sequence[Objective],
    conc: Sequence[int],
    rate_range: tuple[float, float] | None,
    request_rate: float | None,
    percentiles: Sequence[float],
) -> str | None:
    """What is wrong with a --find-max setting (RunSpec's check), None when nothing."""
    reported = {50.0, *percentiles}
    missing = [o.name for o in objectives if o.percentile not in reported]
    problems = [
        (kind not in FIND_MAX_KINDS, f"--find-max {kind!r}: conc or rate"),
        (not objectives, "--find-max: give the objectives with --slo"),
        (
            kind == "conc" and len(conc) < 2,
            "--find-max conc: --conc gives the range to search: LOW..HIGH or a list",
        ),
        (
            kind == "rate" and rate_range is None,
            "--find-max rate: give the rates to search with --rate-range LOW..HIGH",
        ),
        (
            kind == "rate" and request_rate is not None,
            "--find-max rate sets each probe's rate: drop --request-rate",
        ),
        (
            bool(missing),
            f"--slo {', '.join(missing)}: that percentile is not reported; add it to --percentiles",
        ),
    ]
    return next((message for bad, message in problems if bad), None)


def parse_slo_flag(text: str) -> dict[str, float]:
    """`ttft=2s,tpot:p50=20ms` -> {"ttft": 2000.0, "tpot:p50": 20.0} (milliseconds): both
    forms, each checked; split_slos tells them apart."""
    pairs: list[tuple[str, object]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        pairs.append((key, value if sep else None))
    return slo_pairs(pairs)


def slo_pairs(pairs: Iterable[tuple[str, object]]) -> dict[str, float]:
    """SLOs as (METRIC or METRIC:pNN, DURATION) pairs: --slo's text split at `,` and `=`
    (DURATION None: no `=`), or a document's mapping `{ttft: 2s}`."""
    slos: dict[str, float] = {}
    for given, value in pairs:
        part = given if value is None else f"{given}={value}"  # as the flag reads
        key = given.strip().lower()
        match = _OBJECTIVE_KEY.match(key)
        metric = match[1] if match else key
        if value is None or metric not in SLO_METRICS:
            raise SpecError(
                f"--slo {part!r}: expected METRIC=DURATION (goodput) or "
                f"METRIC:pNN=DURATION (--find-max) with METRIC in "
                f"{', '.join(SLO_METRICS)}"
            )
        if match and not 0 < float(match[2]) < 100:
            raise SpecError(f"--slo {part!r}: the percentile must be strictly between 0 and 100")
        slos[key] = parse_duration_ms(str(value), what=f"--slo {key}")
        if slos[key] <= 0:
            raise SpecError(f"--slo {key}: must be > 0")
    return slos


def split_slos(
    slos: Mapping[str, float],
    find_max: str | None,
) -> tuple[dict[str, float], tuple[Objective, ...]]:
    """(goodput SLOs, --find-max objectives) of what parse_slo_flag read."""
    goodput = {k: v for k, v in slos.items() if ":" not in k}
    pinned = {k: v for k, v in slos.items() if ":" in k}
    if pinned and find_max is None:
        raise SpecError(
            f"--slo {next(iter(pinned))}=...: a percentile objective is for "
            "--find-max conc|rate; a goodput SLO is METRIC=DURATION"
        )
    objectives: list[Objective] = []
    if find_max is not None:
        for key, limit in slos.items():
            match = _OBJECTIVE_KEY.match(key)
            objectives.append(
                Objective(match[1], float(match[2]), limit)
                if match
                else Objective(key, DEFAULT_PERCENTILE, limit)
            )
    return goodput, tuple(objectives)


@dataclass(frozen=True, slots=True)
class Resolution:
    """When the search stops: first fail - last pass <= value (relative: as a fraction of
    the last pass)."""

    value: float
    relative: bool

    def describe(self) -> str:
        return f"{self.value:.0%}" if self.relative else f"{self.value:g}"


def parse_resolution(text: str) -> Resolution:
    """`1` (absolute: concurrency or req/s) or `5%` (relative to the last passing load)."""
    raw = text.strip()
    relative = raw.endswith("%")
    try:
        value = float(raw[:-1] if relative else raw)
    except ValueError:
        raise SpecError(
            f"--find-max-resolution {text!r}: a number (1, 0.5) or a percentage (5%)"
        ) from None
    if not value > 0:
        raise SpecError(f"--find-max-resolution {text!r}: must be > 0")
    return Resolution(value / 100 if relative else value, relative)


def default_resolution(kind: str) -> Resolution:
    """One concurrency step; 5 % of the rate."""
    return Resolution(1.0, False) if kind == "conc" else Resolution(0.05, True)


def parse_rate_range(text: str) -> tuple[float, float]:
    """`--rate-range 1..64`: the request rates --find-max rate searches between."""
    low, sep, high = text.partition("..")
    try:
        bounds = (float(low), float(high)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or not 0 < bounds[0] < bounds[1] or bounds[1] == float("inf"):
        raise SpecError(
            f"--rate-range {text!r}: expected LOW..HIGH requests/s with 0 < LOW < HIGH, e.g. 1..64"
        )
    return bounds
