"""A verdict between two runs' points: better, worse or no difference detectable (pure).

`loadgen compare A B --verdict` (compare/verdict_inputs.py reads the records). For each
concurrency both runs measured and each metric, the effect is the relative change of the
run against the baseline (run / baseline - 1), its interval a circular block bootstrap
over each run's request sequence, and the minimum detectable effect the spread of that
bootstrap allows at these sample sizes.

Why blocks: at concurrency c the c requests in flight share engine steps, so a slow step
slows all of them; neighbours in send order are correlated and an i.i.d. bootstrap's
interval is too narrow (two runs of one build would "differ"). Blocks of consecutive
requests keep that correlation inside a resample.

Block-length rule (one place: `block_length`): b = max(ceil(m ** (1/3)), ceil(L)) for a
sequence of m requests, with L the mean number of requests in flight over it (sum of
request latencies / the sequence's span, Little's law). m ** (1/3) is the rate that
minimises the block bootstrap's error for variances and distribution functions (Hall,
Horowitz & Jing 1995); L is how far the correlation reaches: a request shares its steps
with the ~L requests around it, so a block never cuts a batch in half more often than
it keeps one. Blocks wrap around the sequence (circular: Politis & Romano 1992), so
every request is equally likely to be drawn. With --trials each trial is its own
sequence (blocks never span two trials) and the trials' resamples are pooled as the
point is.

Effect and interval are on the log ratio d = log(run / baseline). Its standard error
has two parts (`log_ratio_se`): within each run, the variance of the block-bootstrap
replicates of its log statistic (each run resampled on its own); between runs, with
--trials, a random run effect whose variance is estimated from the trials' spread (less
what the within-run variance explains), and the interval then takes Student's t with
the trials' degrees of freedom. Without trials one run a side cannot show how much two
runs of one build differ: the run effect's spread is then assumed, a relative standard
deviation per metric (RUN_NOISE, measured by bench/verdict_calibration.py on the A/A
runs of a shared machine; `compare --verdict-run-noise` sets another), and `run_to_run`
says assumed with the figure used. Left out (noise 0), the within-run interval alone
raised false alarms at 2.7 to 4 times the nominal rate (docs/verdict.md). The interval
is d +- q x se, shown as relative changes (exp - 1); the verdict is better or worse
when it excludes 0, by the metric's direction, else no_difference. The minimum
detectable effect is (q + q(power)) x se at power 0.8: the smallest change these
sample sizes find four times in five.

Estimators (the same for the point estimate and every replicate):
- throughput: L x sum(output tokens) / sum(latency), Little's law, with L = sum(latency)
  / span fixed at the run's own; on the run itself it equals output tokens / span.
- TTFT and TPOT per request, ITL per chunk gap (the gaps of the requests drawn), at p50
  and p99 as the lower empirical quantile (the smallest value with at least q of the
  weight at or below it); the published percentiles interpolate and may differ from it
  by less than one sample step.
- AL: decode tokens / decode chunks of the requests drawn (metrics/acceptance.py's
  chunks), when both runs decoded speculatively.
- J/token: the point's joules per output token, scaled by each replicate's token rate;
  the GPU power's own variation is not resampled (it is one series per point).

Too few requests for a verdict is said in `reason`, with verdict, effect and interval
null: fewer than MIN_BLOCKS blocks in either run, or a percentile with fewer than
MIN_TAIL samples beyond it (p99 of 200 samples has 2: its resamples are its maximum).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist

import msgspec
import numpy as np
import numpy.typing as npt

from loadgen.metrics.arrays import PointArrays

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

ALPHA = 0.05  # two-sided: the false-alarm rate per test bench/verdict_calibration.py measures
POWER = 0.8  # the power at which the minimum detectable effect is stated
REPLICATES = 1000
MIN_BLOCKS = 5
MIN_TAIL = 5
PERCENTILES = (50.0, 99.0)
# The run effect's relative standard deviation (between runs of one build, beyond what
# each run's own resampling shows), assumed when no side has --trials to measure it:
# bench/verdict_calibration.py's 90% upper bound (a bootstrap over pairs) from 20 A/A
# pairs of runs one after the other against the simulator on a shared, busy 2-core
# machine, conc 8, 80 requests a run (docs/verdict.md). An upper bound, not the point
# estimate: a variance put in as known makes the interval too narrow by its own error.
# Its machine's, not every machine's: a quiet GPU server's runs may differ less or more;
# --trials measures it, --verdict-run-noise sets it. A metric not here was never
# measured (p99 TTFT and TPOT need 500 requests a run, J/token a GPU): no noise assumed,
# said as not_measured.
RUN_NOISE: Mapping[str, float] = {
    "output_throughput": 0.0065,
    "p50_ttft_ms": 0.015,
    "p50_tpot_ms": 0.004,
    "p50_itl_ms": 0.022,
    "p99_itl_ms": 0.165,
    "acceptance_length": 0.004,
}


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    NO_DIFFERENCE = "no_difference"


class VerdictRow(msgspec.Struct, frozen=True, kw_only=True):
    """One concurrency and metric of one run against the baseline (docs/comparing-runs.md)."""

    baseline: str
    run: str
    conc: int
    metric: str
    verdict: Verdict | None  # None: too few requests (reason says why)
    effect: float | None  # run / baseline - 1
    interval: tuple[float, float] | None  # of effect, at 1 - alpha
    mde: float | None  # minimum detectable |effect| at power 0.8
    baseline_value: float | None
    value: float | None
    samples: tuple[int, int]  # requests (baseline, run)
    block_length: tuple[int, int]  # requests per block (baseline, run)
    trials: tuple[int, int] = (1, 1)  # sequences (--trials) per side
    # measured: --trials on a side gave the runs' own variation a place in the
    # interval; assumed: one run a side, `run_noise` (relative SD of a run's figure
    # between runs) stood in for it; not_measured: neither, the within-run interval
    run_to_run: str | None = None
    run_noise: float | None = None  # assumed: the relative SD used
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PointSeries:
    """One run's point as the bootstrap draws it: per request, in send order (trials
    one after another, `segments` their [start, stop) ranges)."""

    segments: tuple[tuple[int, int], ...]
    blocks: tuple[int, ...]  # block length of each segment
    span_s: float  # summed over the segments
    latency_ms: FloatArray  # start -> last chunk
    tokens: FloatArray  # output tokens
    ttft_ms: FloatArray
    tpot_ms: FloatArray  # NaN for a single-token request (no TPOT)
    itl_ms: FloatArray  # every chunk gap, request after request
    itl_owner: IntArray  # the request each gap belongs to
    decode_tokens: FloatArray  # AL's numerator per request (0 without speculation)
    decode_chunks: FloatArray
    speculative: bool
    joules_per_token: float | None

    @property
    def requests(self) -> int:
        return int(self.tokens.size)


def block_length(requests: int, latency_ms: FloatArray, span_s: float) -> int:
    """The block-length rule (module docstring): max(ceil(m^(1/3)), ceil(mean in flight))."""
    if requests == 0:
        return 1
    in_flight = float(latency_ms.sum()) / 1000.0 / span_s if span_s > 0 else 1.0
    return int(max(1, math.ceil(requests ** (1.0 / 3.0)), math.ceil(in_flight - 1e-9)))


def point_series(
    trials: Sequence[PointArrays], spec_tokens: int | None, joules_per_token: float | None
) -> PointSeries:
    """Arrays of each trial's completed records (already in send order), joined."""
    segments, blocks, span = [], [], 0.0
    parts: dict[str, list[npt.NDArray[np.generic]]] = {}
    owner_offset, start = 0, 0
    for arrays in trials:
        n = arrays.num_records
        latency = arrays.e2el_ms()
        end_ns = arrays.chunk_ns[arrays.last] if n else np.zeros(0, dtype=np.int64)
        seg_span = float(end_ns.max() - arrays.start_ns.min()) / 1e9 if n else 0.0
        segments.append((start, start + n))
        blocks.append(block_length(n, latency, seg_span))
        span += seg_span
        start += n
        ttft = arrays.ttft_ms()
        multi = arrays.output_tokens > 1
        tpot = np.full(n, np.nan)
        tpot[multi] = (latency - ttft)[multi] / (arrays.output_tokens[multi] - 1)
        gaps, _ = arrays.itl_per_chunk_ms()
        owner = np.repeat(np.arange(n, dtype=np.int64), arrays.last - arrays.first)
        mask = arrays.decode_chunk_mask(spec_tokens) if spec_tokens else None
        dec_tok, dec_chunks = np.zeros(n), np.zeros(n)
        if mask is not None and mask.any():
            chunk_owner = np.repeat(np.arange(n), arrays.last - arrays.first + 1)
            dec_tok = np.bincount(chunk_owner[mask], arrays.chunk_tokens[mask], minlength=n).astype(
                np.float64
            )
            dec_chunks = np.bincount(chunk_owner[mask], minlength=n).astype(np.float64)
        for key, value in (
            ("latency", latency),
            ("tokens", arrays.output_tokens.astype(np.float64)),
            ("ttft", ttft),
            ("tpot", tpot),
            ("itl", gaps),
            ("owner", owner + owner_offset),
            ("dec_tok", dec_tok.astype(np.float64)),
            ("dec_chunks", dec_chunks),
        ):
            parts.setdefault(key, []).append(value)
        owner_offset += n

    def joined(key: str) -> FloatArray:
        return np.concatenate(parts[key]).astype(np.float64) if key in parts else np.zeros(0)

    dec_chunks_all = joined("dec_chunks")
    return PointSeries(
        segments=tuple(segments),
        blocks=tuple(blocks),
        span_s=span,
        latency_ms=joined("latency"),
        tokens=joined("tokens"),
        ttft_ms=joined("ttft"),
        tpot_ms=joined("tpot"),
        itl_ms=joined("itl"),
        itl_owner=np.concatenate(parts["owner"]) if parts else np.zeros(0, dtype=np.int64),
        decode_tokens=joined("dec_tok"),
        decode_chunks=dec_chunks_all,
        speculative=bool(spec_tokens) and bool(dec_chunks_all.sum() > 0),
        joules_per_token=joules_per_token,
    )


def resample_weights(series: PointSeries, replicates: int, rng: np.random.Generator) -> FloatArray:
    """(replicates, requests): how often each request is drawn in each circular block
    bootstrap replicate, every segment resampled to its own length. Row 0 is not special."""
    weights = np.zeros((replicates, series.requests))
    rows = np.arange(replicates)[:, None]
    for (lo, hi), b in zip(series.segments, series.blocks, strict=True):
        m = hi - lo
        if m == 0:
            continue
        count = math.ceil(m / b)
        starts = rng.integers(0, m, size=(replicates, count))
        drawn = ((starts[:, :, None] + np.arange(b)) % m).reshape(replicates, count * b)[:, :m]
        np.add.at(weights, (np.broadcast_to(rows, drawn.shape), drawn + lo), 1.0)
    return weights


def weighted_quantile(
    values: FloatArray, owner: IntArray, weights: FloatArray, q: float
) -> FloatArray:
    """Per row of `weights` (requests' draw counts), the lower empirical q-quantile of
    `values` (each weighted by its request's count); NaN values are left out."""
    keep = ~np.isnan(values)
    values, owner = values[keep], owner[keep]
    order = np.argsort(values, kind="stable")
    values, owner = values[order], owner[order]
    out = np.full(weights.shape[0], np.nan)
    for lo in range(0, weights.shape[0], 64):  # rows x values at once, bounded in memory
        w = weights[lo : lo + 64][:, owner]
        cdf = np.cumsum(w, axis=1)
        total = cdf[:, -1:]
        idx = np.argmax(cdf >= q / 100.0 * total - 1e-9, axis=1)
        out[lo : lo + 64] = np.where(total[:, 0] > 0, values[idx], np.nan)
    return out


Statistic = Callable[[PointSeries, FloatArray], FloatArray]


def _throughput(s: PointSeries, w: FloatArray) -> FloatArray:
    in_flight = s.latency_ms.sum() / 1000.0 / s.span_s
    return np.asarray(in_flight * (w @ s.tokens) / (w @ s.latency_ms / 1000.0))


def _percentile(field: str, q: float) -> Statistic:
    def statistic(s: PointSeries, w: FloatArray) -> FloatArray:
        if field == "itl":
            return weighted_quantile(s.itl_ms, s.itl_owner, w, q)
        values = s.ttft_ms if field == "ttft" else s.tpot_ms
        return weighted_quantile(values, np.arange(s.requests, dtype=np.int64), w, q)

    return statistic


def _al(s: PointSeries, w: FloatArray) -> FloatArray:
    return np.asarray((w @ s.decode_tokens) / (w @ s.decode_chunks))


def _joules(s: PointSeries, w: FloatArray) -> FloatArray:
    assert s.joules_per_token is not None
    rate = s.tokens.sum() / s.latency_ms.sum()
    return np.asarray(s.joules_per_token * rate / ((w @ s.tokens) / (w @ s.latency_ms)))


@dataclass(frozen=True, slots=True)
class MetricRule:
    name: str
    statistic: Statistic
    higher_is_better: bool
    percentile: float | None = None  # its tail must hold MIN_TAIL samples
    field: str | None = None  # the samples the percentile is over


def metric_rules() -> tuple[MetricRule, ...]:
    rules = [MetricRule("output_throughput", _throughput, True)]
    for field in ("ttft", "tpot", "itl"):
        rules += [
            MetricRule(f"p{q:g}_{field}_ms", _percentile(field, q), False, q, field)
            for q in PERCENTILES
        ]
    rules += [
        MetricRule("acceptance_length", _al, True),
        MetricRule("joules_per_output_token", _joules, False),
    ]
    return tuple(rules)


def _samples(s: PointSeries, field: str) -> int:
    if field == "itl":
        return int(s.itl_ms.size)
    values = s.ttft_ms if field == "ttft" else s.tpot_ms
    return int(np.count_nonzero(~np.isnan(values)))


def _applies(rule: MetricRule, a: PointSeries, b: PointSeries) -> bool:
    if rule.name == "acceptance_length":
        return a.speculative and b.speculative
    if rule.name == "joules_per_output_token":
        return a.joules_per_token is not None and b.joules_per_token is not None
    return True


def _too_few(rule: MetricRule, pair: tuple[PointSeries, PointSeries]) -> str | None:
    """Why this metric gets no verdict (either run's), None when both runs have enough:
    too few blocks first (no metric can be judged), then too thin a percentile tail."""
    for s in pair:
        pairs = zip(s.segments, s.blocks, strict=True)
        blocks = sum(math.ceil((hi - lo) / b) for (lo, hi), b in pairs)
        if s.requests == 0 or blocks < MIN_BLOCKS:
            return (
                f"too few requests for a verdict: {s.requests} requests make {blocks} "
                f"blocks of {max(s.blocks)} (in flight together); at least {MIN_BLOCKS} "
                "blocks are needed (more requests: --prompts-per-conc, --trials)"
            )
    if rule.percentile is None or rule.field is None:
        return None
    tail = min(rule.percentile, 100.0 - rule.percentile) / 100.0
    for s in pair:
        n = _samples(s, rule.field)
        if n * tail < MIN_TAIL:
            return (
                f"too few samples for a p{rule.percentile:g} verdict: {n}, of which "
                f"{n * tail:.1f} lie beyond it; at least {math.ceil(MIN_TAIL / tail)} "
                "are needed"
            )
    return None


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, else the
    Cornish-Fisher expansion about the normal quantile (within 0.5% from 3 on)."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


@dataclass(frozen=True, slots=True)
class _Spread:
    """One side's log statistic: its bootstrap variance (within the run) and, with
    --trials, each trial's own value."""

    within: float
    trials: tuple[float, ...]

    @property
    def k(self) -> int:
        return len(self.trials)


def _spread(rule: MetricRule, s: PointSeries, weights: FloatArray) -> _Spread:
    with np.errstate(divide="ignore"):  # a replicate of zero (ITLs read together) drops out
        reps = np.log(rule.statistic(s, weights))
    reps = reps[np.isfinite(reps)]
    within = float(np.var(reps, ddof=1)) if reps.size > 1 else math.inf
    per_trial = []
    if len(s.segments) > 1:
        for lo, hi in s.segments:
            w = np.zeros((1, s.requests))
            w[0, lo:hi] = 1.0
            value = float(rule.statistic(s, w)[0])
            per_trial.append(math.log(value) if value > 0 else math.nan)
    return _Spread(within, tuple(v for v in per_trial if math.isfinite(v)))


def log_ratio_se(a: _Spread, b: _Spread, noise: float = 0.0) -> tuple[float, int | None]:
    """(standard error of log(run / baseline), degrees of freedom or None for normal).

    Within a run: each side's block-bootstrap variance. Between runs (--trials on
    either side): a random run effect, its variance tau^2 the trials' spread of the log
    statistic less what the within-run variance explains (k trials: each trial's own
    variance is about k x the pooled one), pooled over the sides that have trials and
    floored at 0; it adds tau^2 / k per side, and the interval takes Student's t with
    the trials' degrees of freedom. Without trials tau^2 is not measured (one run a
    side cannot show it): tau is the assumed `noise` (log scale, ~ relative), a known
    variance, and the interval stays normal.
    """
    sides = [x for x in (a, b) if x.k >= 2]
    variance = a.within + b.within
    if not sides:
        return math.sqrt(variance + 2.0 * noise * noise), None
    df = sum(x.k - 1 for x in sides)
    spread = sum((x.k - 1) * float(np.var(x.trials, ddof=1)) for x in sides) / df
    explained = sum((x.k - 1) * x.k * x.within for x in sides) / df
    tau2 = max(0.0, spread - explained)
    k_a = a.k if a.k >= 2 else 1
    k_b = b.k if b.k >= 2 else 1
    return math.sqrt(variance + tau2 / k_a + tau2 / k_b), df


def judge(
    names: tuple[str, str],
    conc: int,
    pair: tuple[PointSeries, PointSeries],
    rng: np.random.Generator,
    *,
    alpha: float = ALPHA,
    replicates: int = REPLICATES,
    run_noise: Mapping[str, float] = RUN_NOISE,
) -> list[VerdictRow]:
    """Every metric both points have, `pair` = (baseline, run); `rng` seeded by the
    caller; `run_noise` per metric, used where no side has trials (log_ratio_se)."""
    a, b = pair
    wa, wb = resample_weights(a, replicates, rng), resample_weights(b, replicates, rng)
    ones_a, ones_b = np.ones((1, a.requests)), np.ones((1, b.requests))
    rows = []
    for rule in metric_rules():
        if not _applies(rule, a, b):
            continue
        base = float(rule.statistic(a, ones_a)[0]) if a.requests else math.nan
        value = float(rule.statistic(b, ones_b)[0]) if b.requests else math.nan
        row = VerdictRow(
            baseline=names[0],
            run=names[1],
            conc=conc,
            metric=rule.name,
            verdict=None,
            effect=None,
            interval=None,
            mde=None,
            baseline_value=None if math.isnan(base) else base,
            value=None if math.isnan(value) else value,
            samples=(a.requests, b.requests),
            block_length=(max(a.blocks, default=1), max(b.blocks, default=1)),
            trials=(len(a.segments), len(b.segments)),
        )
        reason = _too_few(rule, pair)
        if reason is None and not (base > 0 and value > 0):
            reason = "a figure is zero or missing in one run: no ratio to judge"
        if reason is not None:
            rows.append(msgspec.structs.replace(row, reason=reason))
            continue
        noise = run_noise.get(rule.name, 0.0)
        se, df = log_ratio_se(_spread(rule, a, wa), _spread(rule, b, wb), noise)
        q = t_quantile(1 - alpha / 2, df) if df else NormalDist().inv_cdf(1 - alpha / 2)
        q_power = t_quantile(POWER, df) if df else NormalDist().inv_cdf(POWER)
        d = math.log(value / base)
        interval = (math.expm1(d - q * se), math.expm1(d + q * se))
        rows.append(
            msgspec.structs.replace(
                row,
                verdict=_verdict(interval, rule.higher_is_better),
                effect=value / base - 1.0,
                interval=interval,
                mde=math.expm1((q + q_power) * se),
                run_to_run="measured" if df else "assumed" if noise > 0 else "not_measured",
                run_noise=None if df or noise <= 0 else noise,
            )
        )
    return rows


def _verdict(interval: tuple[float, float], higher_is_better: bool) -> Verdict:
    if interval[0] <= 0 <= interval[1]:
        return Verdict.NO_DIFFERENCE
    return Verdict.BETTER if (interval[0] > 0) == higher_is_better else Verdict.WORSE
