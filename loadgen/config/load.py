"""The load part: how many requests, how fast, how often each point runs, the load's shape
over a point (the over-saturation stop, time slices, vLLM's ramp-up, rate and concurrency
stages) and the capacity search (`spec.load`): its flags, its struct and its checks.

vLLM's ramp-up (`vllm bench serve --ramp-up-strategy`) replaces the fixed rate: request i
of N goes at the rate start + (end - start) * i/(N-1) (linear) or start * (end/start)^(i/(N-1))
(exponential); vLLM refuses a --request-rate beside it and a start above the end, and so
does loadgen, which also refuses a start of 0 (vLLM's first gap would divide by it).
"""

from __future__ import annotations

import argparse
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from loadgen.config import limits
from loadgen.config.fields import Field, default_of, flag
from loadgen.config.objectives import (
    FIND_MAX_KINDS,
    Objective,
    Resolution,
    default_resolution,
    parse_rate_range,
    parse_resolution,
    split_slos,
)
from loadgen.config.parsers import MAX_CONC, SpecError, check_finite, conc_list, parse_conc

N = TypeVar("N", int, float)  # a stage's value: a rate or a concurrency

RAMP_UP_STRATEGIES = ("linear", "exponential")
MAX_TRIALS = 100


# --target-precision: the per-request latencies a percentile interval is taken of (ITL's
# gaps are pooled per chunk: one request's are not independent samples)
PRECISION_METRICS = ("ttft", "tpot", "e2el")
PRECISION_FORM = "METRIC:PCTL:FRACTION, e.g. ttft:p99:0.05 (METRIC ttft, tpot or e2el)"


@dataclass(frozen=True, slots=True)
class TargetPrecision:
    """--target-precision: stop a point once this percentile's interval is this narrow."""

    metric: str  # ttft | tpot | e2el
    percentile: float  # 0 < percentile < 100
    fraction: float  # 0 < fraction < 1: the interval's half-width over the percentile


def parse_target_precision(text: str) -> TargetPrecision:
    """`ttft:p99:0.05` (also `ttft:99:5%`) -> TargetPrecision; a bad value is one line."""
    parts = [part.strip() for part in text.split(":")]
    if len(parts) != 3:
        raise SpecError(f"--target-precision {text!r}: need {PRECISION_FORM}")
    metric, pctl, fraction = parts
    if metric not in PRECISION_METRICS:
        raise SpecError(
            f"--target-precision {text!r}: METRIC must be one of "
            f"{', '.join(PRECISION_METRICS)} (per-request latencies)"
        )
    try:
        percentile = float(pctl.removeprefix("p"))
        share = float(fraction[:-1]) / 100 if fraction.endswith("%") else float(fraction)
    except ValueError:
        raise SpecError(f"--target-precision {text!r}: need {PRECISION_FORM}") from None
    if not (math.isfinite(percentile) and 0 < percentile < 100):
        raise SpecError(
            f"--target-precision {text!r}: the percentile must be between 0 and 100, "
            "exclusive (e.g. p99)"
        )
    if not (math.isfinite(share) and 0 < share < 1):
        raise SpecError(
            f"--target-precision {text!r}: FRACTION must be between 0 and 1, exclusive "
            "(e.g. 0.05 or 5%: the interval's half-width over the percentile)"
        )
    return TargetPrecision(metric, percentile, share)


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How many requests, how fast, how often each point runs, and the capacity search."""

    conc: tuple[int, ...]
    prompts_per_conc: int = 10
    warmup_per_conc: int = 2
    num_prompts: int | None = None  # measured requests per point; None: conc x prompts_per_conc
    num_warmups: int | None = None  # warmup requests per point; None: conc x warmup_per_conc
    duration_s: float | None = None
    request_rate: float | None = None  # requests/s, open loop; None = closed loop
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    trials: int = 1  # --trials N: each point measured N times (run/trials.py)
    # --find-max conc|rate: the capacity search (run/capacity.py), its objectives (the
    # --slo percentile forms), when it stops, and --find-max rate's rates
    find_max: str | None = None
    objectives: tuple[Objective, ...] = ()
    find_max_resolution: Resolution | None = None
    rate_range: tuple[float, float] | None = None
    # The load's shape: the over-saturation stop, time slices, ramp-up, stages.
    saturation_stop: bool = True  # stop an open-loop point the server cannot keep up with
    saturation_window_s: float = 30.0
    slice_duration_s: float | None = None
    ramp_up_strategy: str | None = None  # linear | exponential (vllm bench serve's)
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    rate_stages: tuple[tuple[float, float], ...] = ()  # (req/s, seconds) one after another
    conc_stages: tuple[tuple[int, float], ...] = ()  # (in flight, seconds) one after another
    # stop a closed-loop point early once a percentile is known this precisely
    target_precision: TargetPrecision | None = None

    @property
    def open_loop(self) -> bool:
        """Arrivals on a schedule (a fixed rate or a ramp), not slots freeing up."""
        return (
            self.request_rate is not None
            or self.ramp_up_strategy is not None
            or bool(self.rate_stages)
        )

    @property
    def point_duration_s(self) -> float | None:
        """How long a point sends: --duration, or the rate or concurrency stages' sum."""
        if self.rate_stages or self.conc_stages:
            return math.fsum(seconds for _, seconds in self.rate_stages or self.conc_stages)
        return self.duration_s

    def measured_requests(self, conc: int) -> int:
        if self.rate_stages:
            return stage_request_bound(self.rate_stages, self.burstiness)
        return self.num_prompts if self.num_prompts is not None else conc * self.prompts_per_conc

    def warmup_requests(self, conc: int) -> int:
        return self.num_warmups if self.num_warmups is not None else conc * self.warmup_per_conc


DEFAULT_SATURATION_WINDOW_S: float = default_of(LoadSpec, "saturation_window_s")


def parse_request_rate(text: str) -> float | None:
    """Requests/s; `inf` (vLLM's default: all at once, capped by the concurrency) is the
    closed loop, None."""
    try:
        rate = float(text)
    except ValueError:
        raise SpecError(f"--request-rate {text!r}: need a number of requests/s or inf") from None
    return None if rate == float("inf") else rate


def _rate_stages(given: Stages | None) -> tuple[tuple[float, float], ...]:
    return parse_rate_stages(given) if given else ()


def _conc_stages(given: Stages | None) -> tuple[tuple[int, float], ...]:
    return parse_conc_stages(given) if given else ()


FIELDS: tuple[Field, ...] = (
    flag(
        "--conc",
        shape="numbers",
        type=parse_conc,
        read=conc_list,
        metavar="SPEC",
        help="concurrency points: 4..512 (powers of two), 8,16,64, or A..B:+S "
        "(required, or --max-concurrency)",
        section="workload",
    ),
    flag(
        "--prompts-per-conc",
        type=int,
        default=default_of(LoadSpec, "prompts_per_conc"),
        metavar="N",
        help="measured requests per point = conc x N",
        fills="prompts_per_conc",
        section="workload",
    ),
    flag(
        "--warmup-per-conc",
        type=int,
        default=default_of(LoadSpec, "warmup_per_conc"),
        metavar="N",
        help="unrecorded warmup requests per point = conc x N (they also open the connections)",
        fills="warmup_per_conc",
        section="workload",
    ),
    flag(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop sending new requests this long into a point (default: no limit)",
        fills="duration_s",
        section="workload",
    ),
    flag(
        "--request-rate",
        type=parse_request_rate,
        default=None,
        metavar="REQ/S",
        help="open loop at this arrival rate, capped by --conc (default: closed loop, also `inf`)",
        fills="request_rate",
        section="workload",
    ),
    flag(
        "--burstiness",
        type=float,
        default=default_of(LoadSpec, "burstiness"),
        metavar="SHAPE",
        help="gamma shape of open-loop arrival gaps (1.0 = Poisson)",
        fills="burstiness",
        section="workload",
    ),
    flag(
        "--trials",
        type=int,
        default=default_of(LoadSpec, "trials"),
        metavar="N",
        help="measure every point N times (fresh connections, a seed per trial) "
        "and report each headline figure's mean, sd, CV and 95%% CI (default: 1)",
        fills="trials",
    ),
    flag(
        "--find-max",
        choices=FIND_MAX_KINDS,
        default=None,
        help="find the largest concurrency (between --conc's smallest and "
        "largest) or request rate (--rate-range) whose point meets every --slo "
        "objective, e.g. --slo ttft:p99=2s,tpot:p50=20ms (default: no search)",
    ),
    flag(
        "--find-max-resolution",
        type=parse_resolution,
        default=None,
        metavar="STEP|PCT",
        help="stop when the first failing and the last passing load are this "
        "close: a step (1) or a percentage (5%%) (default: 1 for conc, 5%% for "
        "rate)",
    ),
    flag(
        "--rate-range",
        type=parse_rate_range,
        default=None,
        metavar="LOW..HIGH",
        help="--find-max rate: the request rates to search between (open loop, "
        "capped by the largest --conc)",
    ),
    flag(
        "--no-saturation-stop",
        action="store_true",
        help="run open-loop points to their end even when the server falls "
        "behind the arrival rate (default: such a point stops early as "
        "`saturated`, said on stderr, and no higher point runs)",
        fills="saturation_stop",
        to=operator.not_,
    ),
    flag(
        "--saturation-window",
        type=float,
        default=default_of(LoadSpec, "saturation_window_s"),
        metavar="SECONDS",
        help="the over-saturation test's sliding window: the slopes of requests "
        "outstanding and of TTFT from schedule over the last this many seconds, "
        "checked once one window has passed (docs/results.md)",
        fills="saturation_window_s",
    ),
    flag(
        "--slice-duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="add per-slice figures to each point (throughput, TTFT/ITL "
        "percentiles, requests in flight, server KV usage) over consecutive "
        "slices of this length, and the report's slice plots (default: none)",
        fills="slice_duration_s",
    ),
    flag(
        "--ramp-up-strategy",
        choices=RAMP_UP_STRATEGIES,
        default=None,
        help="open loop whose rate ramps from --ramp-up-start-rps to "
        "--ramp-up-end-rps over each point's requests, as vllm bench serve "
        "(default: a fixed --request-rate or a closed loop)",
        fills="ramp_up_strategy",
    ),
    flag(
        "--ramp-up-start-rps",
        type=float,
        default=None,
        metavar="REQ/S",
        help="the ramp's rate at the first request",
        fills="ramp_up_start_rps",
    ),
    flag(
        "--ramp-up-end-rps",
        type=float,
        default=None,
        metavar="REQ/S",
        help="the ramp's rate at the last request",
        fills="ramp_up_end_rps",
    ),
    flag(
        "--rate-stages",
        shape="stages",
        default=None,
        metavar="R@S,...",
        help="open loop in stages, each R req/s for S seconds (e.g. "
        "5@30s,20@30s,40@60s; a sweep file's `rate-stages: [5@30s, 20@30s]`): "
        "the stages set each point's duration and how many requests it plans "
        "(default: none)",
        fills="rate_stages",
        to=_rate_stages,
    ),
    flag(
        "--conc-stages",
        shape="stages",
        default=None,
        metavar="C@S,...",
        help="closed loop in stages, each C requests in flight for S seconds (e.g. "
        "4@30s,16@60s; a sweep file's `conc-stages: [4@30s, 16@60s]`): one point "
        "of concurrency the largest C, sending for the stages' sum (default: none)",
        fills="conc_stages",
        to=_conc_stages,
    ),
    flag(
        "--target-precision",
        type=parse_target_precision,
        default=None,
        metavar="METRIC:PCTL:FRACTION",
        help="stop each point once that percentile's 95%% order-statistic interval has a "
        "half-width below FRACTION of its value, checked about every second, e.g. "
        "ttft:p99:0.05; the point's request count and --duration still bound it "
        "(closed loop, one process; default: none)",
        fills="target_precision",
    ),
)


def derive(values: argparse.Namespace) -> dict[str, Any]:
    """The points: --conc (or --max-concurrency), or --conc-stages' largest stage."""
    conc = values.conc
    if conc is None and values.conc_stages:
        conc = (max(c for c, _ in parse_conc_stages(values.conc_stages)),)
    if conc is None:
        raise SpecError("--conc is required (or --max-concurrency), e.g. --conc 4..512")
    return {"conc": conc}


def derive_search(values: argparse.Namespace) -> dict[str, Any]:
    """The goodput SLOs, objectives and search settings from --slo and --find-max."""
    goodput, objectives = split_slos(values.slo, values.find_max)
    if values.find_max is not None and not objectives:
        raise SpecError(
            f"--find-max {values.find_max}: give the objectives with --slo, e.g. "
            "--slo ttft:p99=2s,tpot:p50=20ms"
        )
    if values.find_max is None and (values.rate_range or values.find_max_resolution):
        raise SpecError("--rate-range and --find-max-resolution are for --find-max")
    if values.find_max == "rate" and values.rate_range is None:
        raise SpecError("--find-max rate: give the rates to search with --rate-range LOW..HIGH")
    if values.find_max == "conc" and values.rate_range is not None:
        raise SpecError("--rate-range is for --find-max rate (conc searches --conc's range)")
    resolution = values.find_max_resolution or (
        default_resolution(values.find_max) if values.find_max else None
    )
    return {
        "slos_ms": goodput,
        "find_max": values.find_max,
        "objectives": objectives,
        "find_max_resolution": resolution,
        "rate_range": values.rate_range,
    }


# --rate-stages' text `5@30s,20@30s`, or a document's list of stages `[5@30s, 20@30s]`
Stages = str | Sequence[str]


def parse_rate_stages(text: Stages) -> tuple[tuple[float, float], ...]:
    """`5@30s,20@30,40@1m` -> ((5.0, 30.0), (20.0, 30.0), (40.0, 60.0)): req/s @ seconds
    (a bare number is seconds; units ms, s, m)."""
    return _stages(
        text,
        float,
        lambda rate: math.isfinite(rate) and rate > 0,
        shape="--rate-stages {text!r}: each stage is RATE@DURATION, e.g. 5@30s (req/s at a "
        "duration in ms, s or m)",
        bounds="--rate-stages {text!r}: {part!r} needs a rate > 0 and a duration > 0, e.g. 5@30s",
    )


def parse_conc_stages(text: Stages) -> tuple[tuple[int, float], ...]:
    """`4@30s,16@1m` -> ((4, 30.0), (16, 60.0)): requests in flight @ seconds."""
    return _stages(
        text,
        int,
        lambda conc: 1 <= conc <= MAX_CONC,
        shape="--conc-stages {text!r}: each stage is CONCURRENCY@DURATION, e.g. 4@30s (a "
        "whole number of requests in flight at a duration in ms, s or m)",
        bounds="--conc-stages {text!r}: {part!r} needs a concurrency in "
        f"1..{MAX_CONC} and a duration > 0, e.g. 4@30s",
    )


def _stages(
    given: Stages,
    value_of: Callable[[str], N],
    fits: Callable[[N], bool],
    *,
    shape: str,
    bounds: str,
) -> tuple[tuple[N, float], ...]:
    """VALUE@DURATION stages, the flag's joined by commas; `shape` and `bounds` are the
    two errors (formatted with the whole value as the flag reads and the stage at fault)."""
    parts, text = (given.split(","), given) if isinstance(given, str) else (given, ",".join(given))
    stages = []
    for part in parts:
        head, at, seconds = part.strip().partition("@")
        try:
            value = value_of(head)
            span = _seconds(seconds.strip())
        except ValueError:
            raise SpecError(shape.format(text=text)) from None
        if not at or not (fits(value) and math.isfinite(span) and span > 0):
            raise SpecError(bounds.format(text=text, part=part.strip()))
        stages.append((value, span))
    return tuple(stages)


def stage_request_bound(stages: tuple[tuple[float, float], ...], burstiness: float) -> int:
    """Requests to plan for the stages: each stage's mean arrivals m plus 6 of their standard
    deviations (gamma gaps of shape b: about sqrt(m / b)), so a seeded schedule practically
    never runs out of prompts; the requests not due before the stages end are not sent."""
    bound = 0
    for rate, seconds in stages:
        mean = rate * seconds
        bound += math.ceil(mean + 6 * math.sqrt(mean / burstiness) + 2)
    return bound


def _seconds(text: str) -> float:
    for unit, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


def _finite_positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)


def _check_load_shape(spec: LoadSpec) -> None:
    """One line per wrong combination of the load's shape."""
    _check(
        _finite_positive(spec.saturation_window_s),
        f"--saturation-window {spec.saturation_window_s}: must be > 0 seconds",
    )
    _check(
        _finite_positive(spec.slice_duration_s),
        f"--slice-duration {spec.slice_duration_s}: must be > 0 seconds",
    )
    if spec.rate_stages:
        _check(
            spec.request_rate is None and spec.ramp_up_strategy is None,
            "--rate-stages sets the rate: drop --request-rate and --ramp-up-strategy",
        )
        _check(
            spec.duration_s is None,
            "--rate-stages sets each point's duration (the stages' sum): drop --duration",
        )
    if spec.conc_stages:
        _check_conc_stages(spec)
    strategy, start, end = spec.ramp_up_strategy, spec.ramp_up_start_rps, spec.ramp_up_end_rps
    if strategy is None:
        _check(
            start is None and end is None,
            "--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|exponential",
        )
        return
    _check(
        strategy in RAMP_UP_STRATEGIES,
        f"--ramp-up-strategy {strategy!r}: allowed: {', '.join(RAMP_UP_STRATEGIES)}",
    )
    if start is None or end is None:
        raise SpecError("--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps")
    _check(
        spec.request_rate is None,
        "--ramp-up-strategy sets the rate: drop --request-rate (as vllm bench serve)",
    )
    # vLLM accepts a linear ramp from 0, then divides by that rate for the first gap
    _check(
        math.isfinite(start) and math.isfinite(end) and start > 0,
        f"--ramp-up-start-rps {start} / --ramp-up-end-rps {end}: finite rates > 0 req/s",
    )
    _check(
        start <= end,
        f"--ramp-up-start-rps {start} is above --ramp-up-end-rps {end}: a ramp goes up",
    )


def _check_conc_stages(spec: LoadSpec) -> None:
    top = max(conc for conc, _ in spec.conc_stages)
    _check(
        not spec.open_loop,
        "--conc-stages is a closed loop: drop --request-rate, --rate-stages and --ramp-up-strategy",
    )
    _check(
        spec.duration_s is None,
        "--conc-stages sets the point's duration (the stages' sum): drop --duration",
    )
    _check(
        tuple(spec.conc) == (top,),
        f"--conc-stages runs one point of concurrency {top} (its largest stage): "
        f"drop --conc or give --conc {top}",
    )
    _check(spec.find_max is None, CONC_STAGES_ALONE)


# session runs send by sessions, not slots; slot i belongs to one process
CONC_STAGES_ALONE = "--conc-stages: not with --find-max or session runs (multi-turn, traces)"


def _check_conc(load: LoadSpec) -> None:
    _check(
        bool(load.conc) and all(1 <= c <= MAX_CONC for c in load.conc),
        f"--conc: every concurrency must be in 1..{MAX_CONC}",
    )


def _check_request_counts(load: LoadSpec) -> None:
    _check(load.num_prompts is None or load.num_prompts >= 1, "--num-prompts: must be >= 1")
    _check(load.num_warmups is None or load.num_warmups >= 0, "--num-warmups: must be >= 0")


def _check_counts(load: LoadSpec) -> None:
    _check(load.prompts_per_conc >= 1, "--prompts-per-conc: must be >= 1")
    _check(load.warmup_per_conc >= 0, "--warmup-per-conc: must be >= 0")
    _check(load.duration_s is None or load.duration_s > 0, "--duration: must be > 0 seconds")


def _check_rate(load: LoadSpec) -> None:
    _check(
        load.request_rate is None or load.request_rate > 0,
        "--request-rate: must be > 0 requests/s (omit it for a closed loop)",
    )
    _check(load.burstiness > 0, "--burstiness: the gamma shape must be > 0 (1 = Poisson)")


def _check_limits(load: LoadSpec) -> None:
    """The load's rates, durations and request counts within config/limits.py's bounds."""
    for value, flag_name in (
        (load.request_rate, "--request-rate"),
        (load.ramp_up_start_rps, "--ramp-up-start-rps"),
        (load.ramp_up_end_rps, "--ramp-up-end-rps"),
        *(((end, "--rate-range") for end in load.rate_range) if load.rate_range else ()),
    ):
        limits.rate(value, flag_name)
    for stage_rate, stage_s in load.rate_stages:
        limits.rate(stage_rate, f"--rate-stages {stage_rate:g}@{stage_s:g}s: the rate")
        limits.seconds(stage_s, f"--rate-stages {stage_rate:g}@{stage_s:g}s: the duration")
    for stage_conc, stage_s in load.conc_stages:
        limits.seconds(stage_s, f"--conc-stages {stage_conc}@{stage_s:g}s: the duration")
    limits.check(
        limits.MIN_BURSTINESS <= load.burstiness <= limits.MAX_BURSTINESS,
        f"--burstiness {load.burstiness:g}: must be in "
        f"{limits.MIN_BURSTINESS:g}..{limits.MAX_BURSTINESS:g} (the gamma shape; 1 = Poisson)",
    )
    _check_duration_limits(load)
    limits.count(load.num_prompts, "--num-prompts")
    limits.count(load.num_warmups, "--num-warmups")
    limits.count(load.prompts_per_conc, "--prompts-per-conc")
    limits.count(load.warmup_per_conc, "--warmup-per-conc")
    top = max(load.conc)
    for name, flag_name, requests in (
        ("measured", "--prompts-per-conc", load.measured_requests(top)),
        ("warmup", "--warmup-per-conc", load.warmup_requests(top)),
    ):
        why = (
            "--rate-stages"
            if name == "measured" and load.rate_stages
            else f"--conc {top} x {flag_name}"
        )
        limits.check(
            requests <= limits.MAX_REQUESTS_PER_POINT,
            f"{why}: {requests:,} {name} requests per point, over the limit of "
            f"{limits.MAX_REQUESTS_PER_POINT:,}; split a longer soak into several points or runs",
        )


def _check_duration_limits(load: LoadSpec) -> None:
    limits.seconds(load.duration_s, "--duration")
    stages = load.rate_stages or load.conc_stages
    if stages:
        limits.seconds(math.fsum(stage_s for _, stage_s in stages), "the stages' sum")
    limits.seconds(load.saturation_window_s, "--saturation-window")
    limits.seconds(load.slice_duration_s, "--slice-duration", limits.MIN_SLICE_SECONDS)
    duration = load.point_duration_s
    if load.slice_duration_s is not None and duration is not None:
        slices = duration / load.slice_duration_s
        limits.check(
            slices <= limits.MAX_SLICES_PER_POINT,
            f"--slice-duration {load.slice_duration_s:g}: {duration:g} s points would have "
            f"{slices:,.0f} slices, over the limit of {limits.MAX_SLICES_PER_POINT:,}; "
            "give longer slices",
        )


def point_memory_bytes(
    load: LoadSpec, conc: int, isl: int | None, osl: int | None, record_outputs: bool = False
) -> int:
    """limits.point_memory_bytes for the point of `conc` (warmup and measured)."""
    requests = load.measured_requests(conc) + load.warmup_requests(conc)
    return limits.point_memory_bytes(requests, isl, osl, record_outputs)


def _check_trials(load: LoadSpec) -> None:
    _check(1 <= load.trials <= MAX_TRIALS, f"--trials {load.trials}: must be in 1..{MAX_TRIALS}")


# floats: each must be a finite number
FLOATS = (
    ("duration_s", "--duration"),
    ("request_rate", "--request-rate"),
    ("burstiness", "--burstiness"),
)


def check(load: LoadSpec) -> None:
    """The load's own checks, in the order the first error is reported; the bounds
    (config/limits.py) after the signs."""
    check_finite(load, FLOATS)
    _check_conc(load)
    _check_request_counts(load)
    _check_counts(load)
    _check_rate(load)
    _check_load_shape(load)
    _check_trials(load)
    _check(
        load.target_precision is None or not (load.open_loop or load.conc_stages),
        "--target-precision stops a closed-loop point: drop --request-rate, the ramp-up, "
        "--rate-stages and --conc-stages, or the target",
    )
    _check_limits(load)
