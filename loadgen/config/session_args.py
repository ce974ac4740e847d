"""The session flags (multi-turn, agentic trace replay: docs/sessions.md) and the
dataset format, resolved once for both --dataset-format and vLLM's --dataset-name.

Kept apart from args.py (the one parser) so that module stays readable; args.py calls
`add_session_flags` and `session_fields`.
"""

from __future__ import annotations

import argparse
from typing import Any

from loadgen.config.dataset_format import FORMAT_CHOICES, detect_format, spec_format
from loadgen.config.dist import parse_dist
from loadgen.config.fields import Field, flag
from loadgen.config.spec import TRACE_FORMATS, SpecError

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
SESSION_PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9)  # InferenceX's agentic set
MAX_ERROR_RATE = 0.05
SESSION_MAX_ERROR_RATE = 0.10  # InferenceX's agentic gate
# Trace replay takes its lengths from the trace; --isl/--osl then only size the probe.
TRACE_PROBE_ISL, TRACE_PROBE_OSL = 256, 64


def parse_ratio_pair(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise SpecError(f"--start-ratio {text!r}: expected LO,HI like 0.25,0.75") from None
    return low, high


SESSION_FIELDS: tuple[Field, ...] = (
    flag(
        "--dataset-format",
        choices=FORMAT_CHOICES,
        default="auto",
        help="format of --dataset: sharegpt (JSON list, or one conversation per "
        "line), messages (one OpenAI messages list per line), custom (vLLM "
        "{prompt, output_tokens} per line), weka (AgentX agentic traces: a JSONL "
        "file or a directory of .json traces), mooncake (JSONL); auto detects it "
        "from the first item (vLLM's --dataset-name sharegpt|custom also names it)",
    ),
    flag(
        "--multi-turn",
        action="store_true",
        help="play each messages/ShareGPT dataset conversation as a session: one "
        "request per user turn, each sending the whole history so far",
    ),
    flag(
        "--turns",
        default=None,
        metavar="DIST",
        help="synthetic multi-turn sessions with this many turns: N, A..B "
        "(uniform) or exp:MEAN; the first turn has --isl tokens",
    ),
    flag(
        "--turn-tokens",
        default="256",
        metavar="DIST",
        help="new user tokens per later turn (N, A..B or exp:MEAN)",
    ),
    flag(
        "--think-time",
        default="0",
        metavar="DIST",
        help="seconds between a turn's reply and the next turn (N, A..B, exp:MEAN)",
    ),
    flag(
        "--sessions-per-conc",
        type=int,
        default=2,
        metavar="N",
        help="synthetic sessions per point = conc x N",
    ),
    flag(
        "--session-header",
        action="append",
        default=None,
        metavar="NAME",
        help="header carrying the session id, repeatable (e.g. "
        "X-Dynamo-Session-ID, X-SMG-Routing-Key); 'none' sends none "
        "(default: X-Session-ID)",
    ),
    flag(
        "--start-ratio",
        type=parse_ratio_pair,
        default=None,
        metavar="LO,HI",
        help="trace lanes start at a seeded turn in this fraction of their "
        "trace, after a primer that sends its prefix (default: 0.25,0.75 for "
        "weka traces, 0,0 otherwise)",
    ),
    flag(
        "--idle-cap-system",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="when nothing is in flight this long, send the next due turn now",
    ),
    flag(
        "--idle-cap-tree",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="cut any recorded gap of a session tree to this",
    ),
    flag(
        "--live-history",
        action="store_true",
        help="assistant turns in the history are the server's own replies to "
        "the previous turns (default: the recorded ones, prefix-stable); a "
        "session ends at a turn that failed or came back empty",
    ),
    flag(
        "--no-cache-bust",
        action="store_true",
        help="do not give each play of a session tree its own marker before its "
        "first user turn (recycled plays then hit the previous play's cache)",
    ),
)


def dataset_format(args: argparse.Namespace, named: str) -> str:
    """RunSpec.dataset_format from --dataset-format and `named` (--dataset-name's format,
    "auto" without it); a trace file given as auto is resolved here, since it makes the
    run a session run. ShareGPT vs JSONL stays auto: the dataset reader tells them apart."""
    given = spec_format(args.dataset_format)
    if given != "auto" and named != "auto" and given != named:
        raise SpecError(
            f"--dataset-format {args.dataset_format} and --dataset-name name "
            "different formats: give one"
        )
    fmt = given if given != "auto" else named
    if args.dataset is not None and fmt == "auto" and args.dataset.exists():
        detected = detect_format(args.dataset)
        if detected in TRACE_FORMATS:
            fmt = detected
    return fmt


def session_fields(args: argparse.Namespace, fmt: str) -> dict[str, Any]:
    """The RunSpec fields the session flags set, and the defaults a session run changes
    (isl/osl for trace replay, percentiles, max error rate)."""
    for name, text, integer in (
        ("--turns", args.turns, True),
        ("--turn-tokens", args.turn_tokens, True),
        ("--think-time", args.think_time, False),
    ):
        if text is not None:
            parse_dist(text, what=name, integer=integer)
    sessions = args.turns is not None or args.multi_turn or fmt in TRACE_FORMATS
    isl, osl = args.isl, args.osl
    if fmt in TRACE_FORMATS:
        isl, osl = isl or TRACE_PROBE_ISL, osl or TRACE_PROBE_OSL
    percentiles = args.percentiles or (SESSION_PERCENTILES if sessions else PERCENTILES)
    if args.metric_percentiles:  # vLLM's --metric-percentiles are reported too
        percentiles = tuple(sorted({*percentiles, *args.metric_percentiles}))
    headers = tuple(args.session_header or ("X-Session-ID",))
    return {
        "isl": isl,
        "osl": osl,
        "percentiles": percentiles,
        "max_error_rate": (
            args.max_error_rate
            if args.max_error_rate is not None
            else SESSION_MAX_ERROR_RATE
            if sessions
            else MAX_ERROR_RATE
        ),
        "dataset_format": fmt,
        "multi_turn": args.multi_turn,
        "turns": args.turns,
        "turn_tokens": args.turn_tokens,
        "think_time": args.think_time,
        "sessions_per_conc": args.sessions_per_conc,
        "session_headers": () if headers == ("none",) else headers,
        "start_ratio": args.start_ratio,
        "idle_cap_system_s": args.idle_cap_system,
        "idle_cap_tree_s": args.idle_cap_tree,
        "cache_bust": not args.no_cache_bust,
        "live_history": args.live_history,
    }
