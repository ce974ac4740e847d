"""Flags that shape the load over a point and how it is watched: the over-saturation stop,
time slices, vLLM's ramp-up, rate stages and concurrency stages (issue 24, items 3, 5, 6).

vLLM's ramp-up (`vllm bench serve --ramp-up-strategy`) replaces the fixed rate: request i
of N goes at the rate start + (end - start) * i/(N-1) (linear) or start * (end/start)^(i/(N-1))
(exponential); vLLM refuses a --request-rate beside it and a start above the end, and so
does loadgen, which also refuses a start of 0 (vLLM's first gap would divide by it).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, TypeVar

from loadgen.config.fields import Field, flag
from loadgen.config.parsers import MAX_CONC, SpecError

N = TypeVar("N", int, float)  # a stage's value: a rate or a concurrency

RAMP_UP_STRATEGIES = ("linear", "exponential")
DEFAULT_SATURATION_WINDOW_S = 30.0


LOAD_FIELDS: tuple[Field, ...] = (
    flag(
        "--no-saturation-stop",
        action="store_true",
        help="run open-loop points to their end even when the server falls "
        "behind the arrival rate (default: such a point stops early as "
        "`saturated`, said on stderr, and no higher point runs)",
    ),
    flag(
        "--saturation-window",
        type=float,
        default=DEFAULT_SATURATION_WINDOW_S,
        metavar="SECONDS",
        help="the over-saturation test's sliding window: the slopes of requests "
        "outstanding and of TTFT from schedule over the last this many seconds, "
        "checked once one window has passed (docs/results.md)",
    ),
    flag(
        "--slice-duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="add per-slice figures to each point (throughput, TTFT/ITL "
        "percentiles, requests in flight, server KV usage) over consecutive "
        "slices of this length, and the report's slice plots (default: none)",
    ),
    flag(
        "--ramp-up-strategy",
        choices=RAMP_UP_STRATEGIES,
        default=None,
        help="open loop whose rate ramps from --ramp-up-start-rps to "
        "--ramp-up-end-rps over each point's requests, as vllm bench serve "
        "(default: a fixed --request-rate or a closed loop)",
    ),
    flag(
        "--ramp-up-start-rps",
        type=float,
        default=None,
        metavar="REQ/S",
        help="the ramp's rate at the first request",
    ),
    flag(
        "--ramp-up-end-rps",
        type=float,
        default=None,
        metavar="REQ/S",
        help="the ramp's rate at the last request",
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
    ),
    flag(
        "--conc-stages",
        shape="stages",
        default=None,
        metavar="C@S,...",
        help="closed loop in stages, each C requests in flight for S seconds (e.g. "
        "4@30s,16@60s; a sweep file's `conc-stages: [4@30s, 16@60s]`): one point "
        "of concurrency the largest C, sending for the stages' sum (default: none)",
    ),
)


def load_fields(args: argparse.Namespace) -> dict[str, Any]:
    """RunSpec's load-shape fields from the flags (checked in `check_load_shape`)."""
    return {
        "saturation_stop": not args.no_saturation_stop,
        "saturation_window_s": args.saturation_window,
        "slice_duration_s": args.slice_duration,
        "ramp_up_strategy": args.ramp_up_strategy,
        "ramp_up_start_rps": args.ramp_up_start_rps,
        "ramp_up_end_rps": args.ramp_up_end_rps,
        "rate_stages": parse_rate_stages(args.rate_stages) if args.rate_stages else (),
        "conc_stages": parse_conc_stages(args.conc_stages) if args.conc_stages else (),
    }


def stages_conc(args: argparse.Namespace) -> tuple[int, ...] | None:
    """--conc-stages' one point (its largest stage) when --conc is not given."""
    if args.conc is not None or not args.conc_stages:
        return args.conc  # type: ignore[no-any-return]
    return (max(conc for conc, _ in parse_conc_stages(args.conc_stages)),)


def parse_rate_stages(text: str) -> tuple[tuple[float, float], ...]:
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


def parse_conc_stages(text: str) -> tuple[tuple[int, float], ...]:
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
    text: str,
    value_of: Callable[[str], N],
    fits: Callable[[N], bool],
    *,
    shape: str,
    bounds: str,
) -> tuple[tuple[N, float], ...]:
    """VALUE@DURATION stages joined by commas; `shape` and `bounds` are the two errors
    (formatted with the whole text and the stage at fault)."""
    stages = []
    for part in text.split(","):
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


def check_load_shape(spec: Any) -> None:
    """One line per wrong combination (RunSpec.validate calls this)."""
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
    _check(
        start is not None and end is not None,
        "--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps",
    )
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


def _check_conc_stages(spec: Any) -> None:
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


def check_conc_stages_run(spec: Any) -> None:
    """--conc-stages against the rest of the run (RunSpec.validate: after check_load_shape)."""
    if not spec.load.conc_stages:
        return
    _check(not spec.sessions, CONC_STAGES_ALONE)
    _check(
        spec.processes.workers == 1 and spec.processes.shard_count == 1,
        "--conc-stages runs in one process: use --workers 1 and no --shard",
    )
