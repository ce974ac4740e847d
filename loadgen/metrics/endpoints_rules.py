"""The rules an MLPerf Endpoints rehearsal is checked against, and its headline (pure).

`--profile mlperf-endpoints` (config/endpoints_profile.py places the points,
orchestrate/endpoints_profile.py runs them). Every rule checked is named with its
section of the Endpoints v1.0 rules and one of three outcomes: met, not_met, or
not_checked (what this run cannot show, and how to show it). A rehearsal is not a
submission: loadgen is not the official client (mlcommons/endpoints), and the summary
says so first.

Headline per point, as the rules score a curve: system throughput (total tokens per
second) against tps_per_user = 1000 / TPOT p90, with TTFT p90 (§4.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from loadgen.config.endpoints_profile import (
    MAX_POINTS,
    MIN_POINTS,
    MIN_SECONDS_OTHER,
    MIN_SECONDS_ULTRA_LOW,
    SOURCE,
    ULTRA_LOW_MAX,
    EndpointsPlan,
)
from loadgen.results.accuracy import AccuracyResult
from loadgen.results.point import PointResult

NOT_OFFICIAL = (
    "a rehearsal of an MLPerf Endpoints submission, not the official client "
    "(mlcommons/endpoints) and not a result: nothing here may be published as MLPerf"
)


class Outcome(StrEnum):
    MET = "met"
    NOT_MET = "not_met"
    NOT_CHECKED = "not_checked"


class RuleCheck(msgspec.Struct, frozen=True, kw_only=True):
    rule: str
    section: str  # of the Endpoints v1.0 rules
    outcome: Outcome
    detail: str


class HeadlinePoint(msgspec.Struct, frozen=True, kw_only=True):
    conc: int
    region: str | None
    mandatory: bool
    system_tps: float | None  # total tokens / s
    output_tps: float | None
    tps_per_user: float | None  # 1000 / tpot_p90_ms
    tpot_p90_ms: float | None
    ttft_p90_ms: float | None
    duration_s: float | None
    gsm8k_strict: float | None  # its accuracy run's strict match, mandatory points only


class EndpointsSummary(msgspec.Struct, frozen=True, kw_only=True):
    profile: str
    statement: str
    source: str
    c_min: int
    c_max: int
    regions: dict[str, tuple[int, int]]
    points: list[HeadlinePoint]
    rules: list[RuleCheck]

    def unmet(self) -> list[RuleCheck]:
        return [r for r in self.rules if r.outcome is not Outcome.MET]


@dataclass(frozen=True, slots=True)
class Measured:
    """What the rehearsal measured: each point's result and each accuracy run, and the
    order the runs happened in (a point's accuracy right after it)."""

    points: Mapping[int, PointResult]
    accuracy: Mapping[int, AccuracyResult]
    accuracy_after: Mapping[int, bool]  # conc -> its accuracy ran straight after it
    spec_synthetic: bool  # the server accepts drafts synthetically (--spec-synthetic)
    accuracy_min: float | None


def _headline(plan: EndpointsPlan, measured: Measured) -> list[HeadlinePoint]:
    rows = []
    for planned in plan.points:
        result = measured.points.get(planned.conc)
        m = result.metrics if result else None
        tpot = m.p90_tpot_ms if m else None
        score = measured.accuracy.get(planned.conc)
        rows.append(
            HeadlinePoint(
                conc=planned.conc,
                region=plan.region_of(planned.conc),
                mandatory=planned.mandatory,
                system_tps=m.total_token_throughput if m else None,
                output_tps=m.output_throughput if m else None,
                tps_per_user=1000.0 / tpot if tpot else None,
                tpot_p90_ms=tpot,
                ttft_p90_ms=m.p90_ttft_ms if m else None,
                duration_s=m.duration if m else None,
                gsm8k_strict=score.strict_match.exact_match if score else None,
            )
        )
    return rows


def _check(rule: str, section: str, ok: bool, detail: str) -> RuleCheck:
    return RuleCheck(
        rule=rule, section=section, outcome=Outcome.MET if ok else Outcome.NOT_MET, detail=detail
    )


def _coverage(plan: EndpointsPlan, measured: Measured) -> list[RuleCheck]:
    done = sorted(measured.points)
    in_range = [c for c in done if plan.region_of(c) not in (None, "margin")]
    checks = [
        _check(
            "point count",
            "§5.3, §5.6",
            MIN_POINTS <= len(done) <= MAX_POINTS,
            f"{len(done)} fixed-concurrency points measured; the rules want "
            f"{MIN_POINTS} to {MAX_POINTS} (1 + 3 + 3)",
        ),
        _check(
            "Ultra Low Concurrency point",
            "§5.4",
            any(c <= ULTRA_LOW_MAX for c in done),
            f"a point at concurrency 1-{ULTRA_LOW_MAX}: "
            f"{[c for c in done if c <= ULTRA_LOW_MAX] or 'none'}",
        ),
        _check(
            "concurrency in range",
            "§9.1",
            len(in_range) == len(done),
            f"every point within C_max {plan.c_max} (the 10% margin counts towards no region)",
        ),
    ]
    for name in ("low", "medium", "high"):
        region = next(r for r in plan.regions if r.name == name)
        inside = [c for c in done if plan.region_of(c) == name]
        checks.append(
            _check(
                f"{name.capitalize()} Concurrency point",
                "§5.3",
                bool(inside),
                f"region {region.start}-{region.end}: {inside or 'no point'}"
                + (" (rounded to zero width)" if region.end < region.start else ""),
            )
        )
    return checks


def _durations(plan: EndpointsPlan, measured: Measured) -> RuleCheck:
    short = []
    for conc, result in sorted(measured.points.items()):
        need = MIN_SECONDS_ULTRA_LOW if conc <= ULTRA_LOW_MAX else MIN_SECONDS_OTHER
        took = result.metrics.duration
        if took is None or took < need:
            short.append(f"conc {conc}: {took or 0:.1f} s < {need:.0f} s")
    return _check(
        "minimum steady-state duration",
        "§6.2",
        not short,
        "600 s at Ultra Low Concurrency, 1,200 s elsewhere (measured phase; the official "
        "client takes a detected steady-state window): " + ("; ".join(short) or "all long enough"),
    )


def _accuracy(plan: EndpointsPlan, measured: Measured) -> list[RuleCheck]:
    missing = [c for c in plan.mandatory if c not in measured.accuracy]
    late = [c for c in plan.mandatory if c in measured.accuracy and not measured.accuracy_after[c]]
    incomplete = [c for c, a in measured.accuracy.items() if not a.complete]
    checks = [
        _check(
            "accuracy at every mandatory point, right after it",
            "§5.3, §6.6",
            not missing and not late and not incomplete,
            f"mandatory points {list(plan.mandatory)}: "
            + (
                "; ".join(
                    part
                    for part in (
                        f"no accuracy run at {missing}" if missing else "",
                        f"not straight after its point at {late}" if late else "",
                        f"stopped early at {incomplete}" if incomplete else "",
                    )
                    if part
                )
                or "each scored (gsm8k) straight after its performance run"
            ),
        )
    ]
    if measured.accuracy_min is None:
        checks.append(
            RuleCheck(
                rule="accuracy target",
                section="§4.3, §6.6",
                outcome=Outcome.NOT_CHECKED,
                detail="no --accuracy-min given: give the benchmark's quality target to hold "
                "each mandatory point to it",
            )
        )
    else:
        low = [c for c, a in measured.accuracy.items() if not a.passed]
        checks.append(
            _check(
                "accuracy target",
                "§4.3, §6.6",
                not low and not missing,
                f"strict match >= {measured.accuracy_min:g}: "
                + (f"below at {low}" if low else "held at every scored point"),
            )
        )
    return checks


def _lossless(measured: Measured) -> RuleCheck:
    rule, section = "speculative outputs equal the target's, token for token", "§2.9.4"
    speculative = [
        c
        for c, r in measured.points.items()
        if (r.metrics.spec_tokens or 0) > 0 or (r.metrics.acceptance_length or 1.0) > 1.0
    ]
    if measured.spec_synthetic:
        return _check(
            rule,
            section,
            False,
            "the server accepts drafts synthetically: its outputs are not the target's",
        )
    if not speculative:
        return _check(
            rule,
            section,
            True,
            "no speculative decoding seen (no drafts accepted): the outputs are the target's own",
        )
    return RuleCheck(
        rule=rule,
        section=section,
        outcome=Outcome.NOT_CHECKED,
        detail=f"speculative decoding at {sorted(speculative)}; the outputs are kept "
        "(--record-outputs): run the same points without speculation and the same --seed, "
        "then `loadgen compare PLAIN THIS --require-lossless`",
    )


def summarize(plan: EndpointsPlan, measured: Measured) -> EndpointsSummary:
    rules = [
        *_coverage(plan, measured),
        _check("fixed concurrency", "§6.1", True, "every point closed loop at its concurrency"),
        _check("streaming", "§6", True, "every request streamed, every chunk timed"),
        _durations(plan, measured),
        RuleCheck(
            rule="whole passes over the dataset",
            section="§6.4",
            outcome=Outcome.NOT_CHECKED,
            detail="the samples issued must be a multiple of the benchmark dataset's size; "
            "loadgen does not hold the official dataset",
        ),
        *_accuracy(plan, measured),
        _lossless(measured),
        RuleCheck(
            rule="Offline point",
            section="§5.7",
            outcome=Outcome.NOT_MET,
            detail="not rehearsed: the whole dataset issued at once "
            "(agentic benchmarks are exempt)",
        ),
        _check(
            "headline figures",
            "§4.1",
            all(
                p.metrics.p90_tpot_ms is not None and p.metrics.p90_ttft_ms is not None
                for p in measured.points.values()
            )
            and bool(measured.points),
            "TPOT p90 (tps_per_user = 1000 / TPOT p90) and TTFT p90 at every point",
        ),
    ]
    return EndpointsSummary(
        profile="mlperf-endpoints",
        statement=NOT_OFFICIAL,
        source=SOURCE,
        c_min=plan.c_min,
        c_max=plan.c_max,
        regions={r.name: (r.start, r.end) for r in plan.regions},
        points=_headline(plan, measured),
        rules=rules,
    )
