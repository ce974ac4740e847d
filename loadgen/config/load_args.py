"""Flags that shape the load over a point and how it is watched: the over-saturation stop,
time slices, and vLLM's ramp-up (issue 24, items 3, 5, 6).

vLLM's ramp-up (`vllm bench serve --ramp-up-strategy`) replaces the fixed rate: request i
of N goes at the rate start + (end - start) * i/(N-1) (linear) or start * (end/start)^(i/(N-1))
(exponential); vLLM refuses a --request-rate beside it and a start above the end, and so
does loadgen, which also refuses a start of 0 (vLLM's first gap would divide by it).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from loadgen.config.parsers import SpecError

RAMP_UP_STRATEGIES = ("linear", "exponential")
DEFAULT_SATURATION_WINDOW_S = 30.0


def add_load_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--no-saturation-stop", action="store_true",
                   help="run open-loop points to their end even when the server falls "
                   "behind the arrival rate (default: such a point stops early as "
                   "`saturated`, said on stderr, and no higher point runs)")
    g.add_argument("--saturation-window", type=float, default=DEFAULT_SATURATION_WINDOW_S,
                   metavar="SECONDS",
                   help="the over-saturation test's sliding window: the slopes of requests "
                   "outstanding and of TTFT from schedule over the last this many seconds, "
                   "checked once one window has passed (docs/results.md)")
    g.add_argument("--slice-duration", type=float, default=None, metavar="SECONDS",
                   help="add per-slice figures to each point (throughput, TTFT/ITL "
                   "percentiles, requests in flight, server KV usage) over consecutive "
                   "slices of this length, and the report's slice plots (default: none)")
    g.add_argument("--ramp-up-strategy", choices=RAMP_UP_STRATEGIES, default=None,
                   help="open loop whose rate ramps from --ramp-up-start-rps to "
                   "--ramp-up-end-rps over each point's requests, as vllm bench serve "
                   "(default: a fixed --request-rate or a closed loop)")
    g.add_argument("--ramp-up-start-rps", type=float, default=None, metavar="REQ/S",
                   help="the ramp's rate at the first request")
    g.add_argument("--ramp-up-end-rps", type=float, default=None, metavar="REQ/S",
                   help="the ramp's rate at the last request")


def load_fields(args: argparse.Namespace) -> dict[str, Any]:
    """RunSpec's load-shape fields from the flags (checked in `check_load_shape`)."""
    return {"saturation_stop": not args.no_saturation_stop,
            "saturation_window_s": args.saturation_window,
            "slice_duration_s": args.slice_duration,
            "ramp_up_strategy": args.ramp_up_strategy,
            "ramp_up_start_rps": args.ramp_up_start_rps,
            "ramp_up_end_rps": args.ramp_up_end_rps}


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


def _finite_positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)


def check_load_shape(spec: Any) -> None:
    """One line per wrong combination (RunSpec.validate calls this)."""
    _check(_finite_positive(spec.saturation_window_s),
           f"--saturation-window {spec.saturation_window_s}: must be > 0 seconds")
    _check(_finite_positive(spec.slice_duration_s),
           f"--slice-duration {spec.slice_duration_s}: must be > 0 seconds")
    strategy, start, end = spec.ramp_up_strategy, spec.ramp_up_start_rps, spec.ramp_up_end_rps
    if strategy is None:
        _check(start is None and end is None,
               "--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|"
               "exponential")
        return
    _check(strategy in RAMP_UP_STRATEGIES,
           f"--ramp-up-strategy {strategy!r}: allowed: {', '.join(RAMP_UP_STRATEGIES)}")
    _check(start is not None and end is not None,
           "--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps")
    _check(spec.request_rate is None,
           "--ramp-up-strategy sets the rate: drop --request-rate (as vllm bench serve)")
    # vLLM accepts a linear ramp from 0, then divides by that rate for the first gap
    _check(math.isfinite(start) and math.isfinite(end) and start > 0,
           f"--ramp-up-start-rps {start} / --ramp-up-end-rps {end}: finite rates > 0 req/s")
    _check(start <= end, f"--ramp-up-start-rps {start} is above --ramp-up-end-rps {end}: "
           "a ramp goes up")
