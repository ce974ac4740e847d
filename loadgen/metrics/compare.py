"""Runs side by side: the numbers behind `loadgen compare` and the HTML report (pure).

A run is its typed point results (`conc_<N>.json` as PointResult) keyed by concurrency;
the first run is the baseline. Three comparisons, as MTP-vs-no-speculation studies
publish them:

- matched concurrency: each metric of each run divided by the baseline's at the same
  concurrency (the DeepSeek-V4 recipe's "+75% at conc 1" is the interactivity ratio);
- matched interactivity: on each run's throughput-vs-interactivity Pareto frontier,
  throughput interpolated linearly between frontier points (never extrapolated) at the
  interactivity of each of the baseline's frontier points, where the run's frontier
  reaches it: "at the interactivity the baseline had at conc N, this run serves x times
  the throughput";
- crossover: the concurrency where a run stops being ahead of (or behind) the baseline
  in throughput at matched concurrency, estimated where the ratio crosses 1 between two
  measured concurrencies (linear in log ratio against log concurrency); and the same in
  output tokens per joule (--gpu-metrics runs): where MTP stops paying in energy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from loadgen.metrics.compare_disagg import DisaggComparison, disagg_comparison
from loadgen.metrics.spread import Spread, within_noise
from loadgen.results.accuracy import AccuracyResult
from loadgen.results.point import EnergyMetrics, FigureSpread, PointResult

Reader = Callable[[PointResult], float | None]

INTERACTIVITY = "median_interactivity_tok_s_user"
# metric key -> the result field it is (as compare.json names it, and the key of the
# point's trial_spread); "throughput" is resolved per comparison (THROUGHPUT).
METRIC_FIELDS: Mapping[str, str] = {
    "throughput": "",
    "interactivity": INTERACTIVITY,
    "ttft_p50_ms": "median_ttft_ms",
    "ttft_p99_ms": "p99_ttft_ms",
    # time to first answer token (metrics/phases.py): null where phases were not told apart
    "ttfa_p50_ms": "median_ttfa_ms",
    "ttfa_p99_ms": "p99_ttfa_ms",
    "tpot_p50_ms": "median_tpot_ms",
    "tpot_p99_ms": "p99_tpot_ms",
    # InferenceX AgentX's metric of record (metrics/e2e_norm.py): the North-Star axis
    "e2e_norm_intvty_p90": "p90_e2e_norm_intvty",
    # the best valid source (stream, else the server's): acceptance_length_source says
    "acceptance_length": "acceptance_length",
    # --gpu-metrics runs (null otherwise): GPU energy per output token, and its inverse
    "joules_per_token": "joules_per_output_token",
    "tokens_per_joule": "output_tokens_per_joule",
    # --accuracy gsm8k runs (null otherwise): the accuracy point's strict-match exact
    # match at this concurrency (RunInput.accuracy, beside the point's figures)
    "gsm8k_strict": "gsm8k_exact_match_strict",
    # engine steps reconstructed from the arrivals (metrics/steps.py): what a scheduling
    # flag did to the steps, shown as a line under each concurrency's table
    "decode_step_ms": "steps_decode_time_p50_ms",
    "prefill_step_ms": "steps_prefill_time_p50_ms",
    "stall_share": "steps_stall_share",
}
STEP_METRICS = ("decode_step_ms", "prefill_step_ms", "stall_share")
ENERGY_METRICS = ("joules_per_token", "tokens_per_joule")
ACCURACY_METRICS = ("gsm8k_strict",)
PHASE_METRICS = ("ttfa_p50_ms", "ttfa_p99_ms")
# The throughput a comparison uses, by its field: per GPU when every point has it.
THROUGHPUT: Mapping[str, Reader] = {
    "output_throughput": lambda p: p.metrics.output_throughput,
    "output_throughput_per_gpu": lambda p: p.metrics.output_throughput_per_gpu,
}


def _energy(read: Callable[[EnergyMetrics], float | None]) -> Reader:
    """A --gpu-metrics figure: None for a point without energy."""
    return lambda p: None if p.energy is None else read(p.energy)


# metric key -> its value on a point (but throughput and the accuracy metrics: above).
READERS: Mapping[str, Reader] = {
    "interactivity": lambda p: p.metrics.median_interactivity_tok_s_user,
    "ttft_p50_ms": lambda p: p.metrics.median_ttft_ms,
    "ttft_p99_ms": lambda p: p.metrics.p99_ttft_ms,
    "ttfa_p50_ms": lambda p: p.metrics.median_ttfa_ms,
    "ttfa_p99_ms": lambda p: p.metrics.p99_ttfa_ms,
    "tpot_p50_ms": lambda p: p.metrics.median_tpot_ms,
    "tpot_p99_ms": lambda p: p.metrics.p99_tpot_ms,
    "e2e_norm_intvty_p90": lambda p: p.metrics.p90_e2e_norm_intvty,
    "acceptance_length": lambda p: p.metrics.acceptance_length,
    "joules_per_token": _energy(lambda e: e.joules_per_output_token),
    "tokens_per_joule": _energy(lambda e: e.output_tokens_per_joule),
    "decode_step_ms": lambda p: p.metrics.steps_decode_time_p50_ms,
    "prefill_step_ms": lambda p: p.metrics.steps_prefill_time_p50_ms,
    "stall_share": lambda p: p.metrics.steps_stall_share,
}


@dataclass(frozen=True, slots=True)
class RunInput:
    name: str
    points: Mapping[int, PointResult]  # concurrency -> its point result
    # concurrency -> the run's accuracy point there (--accuracy gsm8k), where it has one
    accuracy: Mapping[int, AccuracyResult] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PointRow:
    """One run at one concurrency: its metrics and their ratios to the baseline's."""

    conc: int
    run: str
    values: Mapping[str, float | None]
    ratios: Mapping[str, float | None]  # value / baseline value; None when either is unknown
    complete: bool
    acceptance_source: str | None = None  # where values["acceptance_length"] came from
    # --trials: the 95 % CI half-width of each metric (None without trials), and whether
    # the interval overlaps the baseline's (None unless both points have intervals): a
    # difference the trials cannot tell from noise is said so, not given as a bare ratio
    halves: Mapping[str, float | None] = field(default_factory=dict)
    noise: Mapping[str, bool | None] = field(default_factory=dict)
    # --trials: the trials' mean the interval is around (a pooled p99 is not it); where
    # both points have one, the ratio is of these means, as the noise verdict is
    means: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    conc: int
    interactivity: float
    throughput: float


@dataclass(frozen=True, slots=True)
class MatchedPoint:
    """Throughput of a run and of the baseline at one interactivity level."""

    run: str
    baseline_conc: int  # the baseline point that set the level
    interactivity: float
    baseline_throughput: float
    throughput: float
    ratio: float


@dataclass(frozen=True, slots=True)
class Crossover:
    run: str
    baseline: str
    low_conc: int  # last measured concurrency before the lead changes
    high_conc: int  # first measured concurrency after it
    ahead_below: str  # who has more throughput at low_conc
    ahead_above: str
    estimate: float  # where the ratio crosses 1 (log-log interpolation)
    quantity: str = "throughput"  # or "tokens per joule"


@dataclass(frozen=True, slots=True)
class Comparison:
    runs: tuple[str, ...]  # the first is the baseline
    throughput_field: str  # output_throughput_per_gpu when every point has it
    concs: tuple[int, ...]  # every concurrency of any run, ascending
    rows: tuple[PointRow, ...]  # by concurrency, then run order
    frontiers: Mapping[str, tuple[FrontierPoint, ...]]
    all_points: Mapping[str, tuple[FrontierPoint, ...]]  # every point with both values
    matched: tuple[MatchedPoint, ...]
    crossovers: tuple[Crossover, ...]
    energy_crossovers: tuple[Crossover, ...] = ()  # in tokens per joule
    # lanes read per role (--server-metrics ROLE=URL): TTFT parts, role figures, winners
    disagg: DisaggComparison | None = None

    @property
    def baseline(self) -> str:
        return self.runs[0]

    @property
    def per_gpu(self) -> bool:
        return self.throughput_field.endswith("_per_gpu")

    def rows_at(self, conc: int) -> list[PointRow]:
        return [row for row in self.rows if row.conc == conc]


def finite(value: float | None) -> float | None:
    """The figure as a float; None for an unknown or a non-finite one."""
    return float(value) if value is not None and math.isfinite(value) else None


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return value / base


def throughput_field(runs: Sequence[RunInput]) -> str:
    per_gpu = all(
        finite(p.metrics.output_throughput_per_gpu) is not None
        for run in runs
        for p in run.points.values()
    )
    return "output_throughput_per_gpu" if per_gpu else "output_throughput"


def metric_values(
    result: PointResult, throughput: str, accuracy: AccuracyResult | None = None
) -> dict[str, float | None]:
    """Each metric of the point (in METRIC_FIELDS' order); `accuracy`: its concurrency's
    accuracy point, when the run has one."""
    values: dict[str, float | None] = {}
    for key in METRIC_FIELDS:
        if key == "throughput":
            values[key] = finite(THROUGHPUT[throughput](result))
        elif key in ACCURACY_METRICS:
            values[key] = None if accuracy is None else finite(accuracy.strict_match.exact_match)
        else:
            values[key] = finite(READERS[key](result))
    return values


def metric_spreads(result: PointResult, throughput: str) -> dict[str, Spread | None]:
    """Each metric's trial interval (the point file's `trial_spread`), None without one."""
    spreads = result.trials.trial_spread if result.trials else {}
    found: dict[str, Spread | None] = {}
    for key, name in METRIC_FIELDS.items():
        entry = spreads.get(name or throughput)
        found[key] = None if entry is None else _spread(entry)
    return found


def _spread(entry: FigureSpread) -> Spread | None:
    mean, low, high = finite(entry.mean), finite(entry.ci_low), finite(entry.ci_high)
    if mean is None or low is None or high is None:
        return None
    return Spread(entry.n, mean, finite(entry.std), finite(entry.cv), low, high, entry.wide)


def _ratio_of(
    key: str,
    value: float | None,
    base: Mapping[str, float | None],
    mine: Mapping[str, Spread | None],
    theirs: Mapping[str, Spread | None],
) -> float | None:
    """Of the trials' means where both points have them, else of the point values."""
    spread, other = mine.get(key), theirs.get(key)
    if spread is not None and other is not None:
        return ratio(spread.mean, other.mean)
    return ratio(value, base.get(key))


def noise_of(
    mine: Mapping[str, Spread | None], base: Mapping[str, Spread | None]
) -> dict[str, bool | None]:
    found: dict[str, bool | None] = {}
    for key, spread in mine.items():
        other = base.get(key)
        found[key] = None if spread is None or other is None else within_noise(spread, other)
    return found


def pareto_frontier(points: Sequence[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """The points no other point beats in both interactivity and throughput, ascending in
    interactivity (so descending in throughput)."""
    frontier: list[FrontierPoint] = []
    best = -math.inf
    for point in sorted(points, key=lambda p: (-p.interactivity, -p.throughput)):
        if point.throughput > best:
            frontier.append(point)
            best = point.throughput
    return tuple(reversed(frontier))


def interpolate(frontier: Sequence[FrontierPoint], interactivity: float) -> float | None:
    """Throughput on the frontier at this interactivity; None outside its range."""
    if not frontier or not (
        frontier[0].interactivity <= interactivity <= frontier[-1].interactivity
    ):
        return None
    for low, high in itertools.pairwise(frontier):
        if low.interactivity <= interactivity <= high.interactivity:
            span = high.interactivity - low.interactivity
            if span == 0:
                return max(low.throughput, high.throughput)
            t = (interactivity - low.interactivity) / span
            return low.throughput + t * (high.throughput - low.throughput)
    return frontier[0].throughput  # a one-point frontier, at exactly its interactivity


def matched_interactivity(
    name: str, frontier: Sequence[FrontierPoint], base: Sequence[FrontierPoint]
) -> list[MatchedPoint]:
    """The run's frontier at the interactivity of each baseline frontier point it covers."""
    matched = []
    for point in base:
        mine = interpolate(frontier, point.interactivity)
        if mine is not None and point.throughput > 0:
            matched.append(
                MatchedPoint(
                    name,
                    point.conc,
                    point.interactivity,
                    point.throughput,
                    mine,
                    mine / point.throughput,
                )
            )
    return matched


def crossovers(
    name: str, baseline: str, ratios: Sequence[tuple[int, float]], quantity: str = "throughput"
) -> list[Crossover]:
    """Where the run's ratio to the baseline (higher is better) crosses 1, over ascending
    concurrency (ties, ratio exactly 1, are skipped: no one is ahead there)."""
    signed = [(conc, r) for conc, r in sorted(ratios) if r > 0 and r != 1.0]
    found = []
    for (c1, r1), (c2, r2) in itertools.pairwise(signed):
        if (r1 > 1) == (r2 > 1):
            continue
        t = math.log(r1) / (math.log(r1) - math.log(r2))
        estimate = math.exp(math.log(c1) + t * (math.log(c2) - math.log(c1)))
        ahead_below, ahead_above = (name, baseline) if r1 > 1 else (baseline, name)
        found.append(
            Crossover(name, baseline, c1, c2, ahead_below, ahead_above, estimate, quantity)
        )
    return found


def compare(runs: Sequence[RunInput]) -> Comparison:
    """The comparison of `runs` (at least one; the first is the baseline)."""
    if not runs:
        raise ValueError("compare needs at least one run")
    field = throughput_field(runs)
    concs = tuple(sorted({c for run in runs for c in run.points}))
    base = runs[0]
    rows = []
    for conc in concs:
        mine = base.points.get(conc)
        base_values = {} if mine is None else metric_values(mine, field, base.accuracy.get(conc))
        base_spreads = {} if mine is None else metric_spreads(mine, field)
        for run in runs:
            point = run.points.get(conc)
            if point is None:
                continue
            values = metric_values(point, field, run.accuracy.get(conc))
            spreads = metric_spreads(point, field)
            rows.append(
                PointRow(
                    conc,
                    run.name,
                    values,
                    {
                        k: _ratio_of(k, v, base_values, spreads, base_spreads)
                        for k, v in values.items()
                    },
                    point.status.complete,
                    point.metrics.acceptance_length_source,
                    {
                        k: None if s is None or s.ci_high is None else s.ci_high - s.mean
                        for k, s in spreads.items()
                    },
                    noise_of(spreads, base_spreads),
                    {k: s.mean if s else None for k, s in spreads.items()},
                )
            )
    all_points = {run.name: _points(run, field) for run in runs}
    frontiers = {name: pareto_frontier(points) for name, points in all_points.items()}
    matched: list[MatchedPoint] = []
    found: list[Crossover] = []
    energy: list[Crossover] = []
    for run in runs[1:]:
        matched += matched_interactivity(run.name, frontiers[run.name], frontiers[base.name])
        found += crossovers(run.name, base.name, _ratios(rows, run.name, "throughput"))
        energy += crossovers(
            run.name, base.name, _ratios(rows, run.name, "tokens_per_joule"), "tokens per joule"
        )
    return Comparison(
        tuple(run.name for run in runs),
        field,
        concs,
        tuple(rows),
        frontiers,
        all_points,
        tuple(matched),
        tuple(found),
        tuple(energy),
        disagg_comparison({run.name: run.points for run in runs}, field, THROUGHPUT[field]),
    )


def _ratios(rows: Sequence[PointRow], run: str, key: str) -> list[tuple[int, float]]:
    return [(row.conc, r) for row in rows if row.run == run and (r := row.ratios[key]) is not None]


def _points(run: RunInput, field: str) -> tuple[FrontierPoint, ...]:
    points = []
    for conc, result in sorted(run.points.items()):
        x = finite(result.metrics.median_interactivity_tok_s_user)
        y = finite(THROUGHPUT[field](result))
        if x is not None and y is not None:
            points.append(FrontierPoint(conc, x, y))
    return tuple(points)
