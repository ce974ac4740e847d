"""The --find-max search on made-up servers (pure: metrics/capacity.py): it finds what
probing every load would, in fewer probes, and stops at its resolution."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from loadgen.config.objectives import (
    Objective,
    Resolution,
    parse_resolution,
    parse_slo_flag,
    split_slos,
)
from loadgen.config.parsers import SpecError
from loadgen.metrics.capacity import Check, Probe, Search, checks_of

TTFT = Objective("ttft", 99.0, 100.0)


def probe(load: float, ttft_ms: float | None) -> Probe:
    return Probe(load, checks_of([TTFT], {"ttft:p99": (ttft_ms, ttft_ms)}))


def search(server: Callable[[float], float | None], s: Search) -> tuple[list[float], Probe]:
    probes: list[Probe] = []
    while (load := s.next_load(probes)) is not None:
        assert load not in [p.load for p in probes], "a load measured twice"
        assert s.low <= load <= s.high
        probes.append(probe(load, server(load)))
    answer = s.answer(probes)
    assert answer.load is None or answer.last_pass is not None
    return [p.load for p in probes], probes[-1]


CONC = Search(1, 64, Resolution(1, False), integer=True)


@pytest.mark.parametrize("knee", [1.0, 2.0, 7.0, 13.0, 31.0, 50.0, 63.0])
@pytest.mark.parametrize("shape", ["linear", "convex", "cliff"])
def test_conc_search_finds_what_every_conc_would_in_fewer_probes(knee: float, shape: str) -> None:
    curves: dict[str, Callable[[float], float]] = {
        "linear": lambda c: 100.0 * c / (knee + 0.5),
        "convex": lambda c: 100.0 * (c / (knee + 0.5)) ** 3,
        "cliff": lambda c: 50.0 if c <= knee else 5000.0,
    }
    server = curves[shape]
    probed, _ = search(server, CONC)
    brute = max(c for c in range(1, 65) if server(c) <= 100.0)
    answer = CONC.answer([probe(c, server(c)) for c in probed])
    assert answer.load == brute == knee
    assert (answer.first_fail is not None and answer.first_fail.load == brute + 1) or brute == 64
    assert answer.binding == "ttft:p99"
    assert len(probed) <= 12, probed  # a brute-force sweep measures 64


def test_the_upper_bound_passing_is_the_answer_in_one_probe() -> None:
    probed, _ = search(lambda c: 10.0, CONC)
    assert probed == [64]
    assert CONC.answer([probe(64, 10.0)]).load == 64


def test_the_lower_bound_failing_means_no_answer() -> None:
    probed, _ = search(lambda c: 500.0, CONC)
    answer = CONC.answer([probe(c, 500.0) for c in probed])
    assert probed == [64, 1] and answer.load is None and answer.first_fail is not None


def test_rate_search_stops_at_its_relative_resolution() -> None:
    rates = Search(1.0, 100.0, Resolution(0.05, True), integer=False)
    capacity = 37.3
    probed, _ = search(lambda r: 100.0 * (r / capacity) ** 2, rates)
    probes = [probe(r, 100.0 * (r / capacity) ** 2) for r in probed]
    answer = rates.answer(probes)
    assert answer.load is not None and answer.first_fail is not None
    assert answer.load <= capacity < answer.first_fail.load
    assert answer.first_fail.load - answer.load <= 0.05 * answer.load
    assert len(probed) <= 8, probed


def test_a_missing_figure_fails_and_the_search_bisects() -> None:
    """No TTFT at all (every request failed) is a failure, with no margin to interpolate."""
    probed, _ = search(lambda c: 50.0 if c <= 20 else None, CONC)
    answer = CONC.answer([probe(c, 50.0 if c <= 20 else None) for c in probed])
    assert answer.load == 20 and math.isinf(answer.first_fail.margin)  # type: ignore[union-attr]


def test_a_pass_above_the_first_failure_is_flagged_not_taken() -> None:
    probes = [probe(64, 500.0), probe(1, 10.0), probe(8, 200.0), probe(16, 90.0)]
    answer = CONC.answer(probes)
    assert answer.load == 1 and answer.non_monotone == (16,)


def test_with_trials_the_interval_bound_is_held_to_the_limit() -> None:
    """The pooled p99 meets 100 ms but its interval's upper end does not: a fail."""
    [check] = checks_of([TTFT], {"ttft:p99": (95.0, 120.0)})
    assert check.margin == pytest.approx(0.2) and not check.passed
    assert Probe(4, (check,)).binding.objective == "ttft:p99"
    assert not Probe(4, (Check("ttft:p99", 10.0, 10.0, 100.0),), complete=False).passed


def test_slo_flag_forms_coexist() -> None:
    slos = parse_slo_flag("ttft=2s,tpot:p50=20ms,itl:p99.9=80")
    assert slos == {"ttft": 2000.0, "tpot:p50": 20.0, "itl:p99.9": 80.0}
    goodput, objectives = split_slos(slos, "conc")
    assert goodput == {"ttft": 2000.0}  # a plain M=T stays a goodput SLO ...
    assert [(o.name, o.field, o.limit_ms) for o in objectives] == [
        ("ttft:p99", "p99_ttft_ms", 2000.0),  # ... and is a p99 objective too
        ("tpot:p50", "median_tpot_ms", 20.0),
        ("itl:p99.9", "p99.9_itl_ms", 80.0),
    ]
    assert split_slos({"ttft": 2000.0}, None) == ({"ttft": 2000.0}, ())
    with pytest.raises(SpecError, match="percentile objective is for --find-max"):
        split_slos(slos, None)
    with pytest.raises(SpecError, match="METRIC:pNN"):
        parse_slo_flag("ttfx:p99=2s")
    assert parse_resolution("5%") == Resolution(0.05, True)
    assert parse_resolution("2") == Resolution(2.0, False)
