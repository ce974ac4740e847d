"""The session part: multi-turn sessions and agentic trace replay (`spec.session`,
docs/sessions.md): its flags, its struct and its checks (those that cross parts are
RunSpec's, config/spec.py)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.config import limits
from loadgen.config.dist import parse_dist
from loadgen.config.fields import Field, default_of, flag
from loadgen.config.parsers import SpecError

# X-Session-ID for the routers that read that name; X-Dynamo-Session-ID, the name Dynamo's
# recipes tell clients to send (its router reads it first; 1.4.2 also falls back to
# x-session-id, measured: tests/integration/test_dynamo_sessions.py) and that nginx
# affinity in front of several Dynamo frontends hashes. Both carry the same id.
DEFAULT_SESSION_HEADERS = ("X-Session-ID", "X-Dynamo-Session-ID")


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """Sessions (multi-turn, trace replay): docs/sessions.md."""

    multi_turn: bool = False  # a messages/ShareGPT dataset as one session per conversation
    turns: str | None = None  # synthetic sessions: turns per session (a distribution)
    turn_tokens: str = "256"  # new user tokens per later turn
    think_time: str = "0"  # seconds between a reply and the next turn
    sessions_per_conc: int = 2  # synthetic sessions per point = conc x this
    session_headers: tuple[str, ...] = DEFAULT_SESSION_HEADERS
    start_ratio: tuple[float, float] | None = None  # None: (0.25, 0.75) for Weka traces
    idle_cap_system_s: float | None = 10.0
    idle_cap_tree_s: float | None = 300.0
    cache_bust: bool = True
    live_history: bool = False  # history assistant turns: the server's replies


def parse_ratio_pair(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise SpecError(f"--start-ratio {text!r}: expected LO,HI like 0.25,0.75") from None
    return low, high


def _dist(name: str, *, integer: bool) -> Callable[[str | None], str | None]:
    """The distribution's text, once it reads as one (the workload draws from it)."""

    def checked(text: str | None) -> str | None:
        if text is not None:
            parse_dist(text, what=name, integer=integer)
        return text

    return checked


def _session_headers(names: Sequence[str] | None) -> tuple[str, ...]:
    headers = tuple(names or DEFAULT_SESSION_HEADERS)
    return () if headers == ("none",) else headers


FIELDS: tuple[Field, ...] = (
    flag(
        "--multi-turn",
        action="store_true",
        help="play each messages/ShareGPT dataset conversation as a session: one "
        "request per user turn, each sending the whole history so far",
        fills="multi_turn",
    ),
    flag(
        "--turns",
        default=None,
        metavar="DIST",
        help="synthetic multi-turn sessions with this many turns: N, A..B "
        "(uniform) or exp:MEAN; the first turn has --isl tokens",
        fills="turns",
        to=_dist("--turns", integer=True),
    ),
    flag(
        "--turn-tokens",
        default=default_of(SessionSpec, "turn_tokens"),
        metavar="DIST",
        help="new user tokens per later turn (N, A..B or exp:MEAN)",
        fills="turn_tokens",
        to=_dist("--turn-tokens", integer=True),
    ),
    flag(
        "--think-time",
        default=default_of(SessionSpec, "think_time"),
        metavar="DIST",
        help="seconds between a turn's reply and the next turn (N, A..B, exp:MEAN)",
        fills="think_time",
        to=_dist("--think-time", integer=False),
    ),
    flag(
        "--sessions-per-conc",
        type=int,
        default=default_of(SessionSpec, "sessions_per_conc"),
        metavar="N",
        help="synthetic sessions per point = conc x N",
        fills="sessions_per_conc",
    ),
    flag(
        "--session-header",
        action="append",
        default=None,
        metavar="NAME",
        help="header carrying the session id, repeatable (e.g. "
        "X-Dynamo-Session-ID, X-SMG-Routing-Key); 'none' sends none "
        "(default: X-Session-ID and X-Dynamo-Session-ID)",
        fills="session_headers",
        to=_session_headers,
    ),
    flag(
        "--start-ratio",
        type=parse_ratio_pair,
        default=None,
        metavar="LO,HI",
        help="trace lanes start at a seeded turn in this fraction of their "
        "trace, after a primer that sends its prefix (default: 0.25,0.75 for "
        "weka traces, 0,0 otherwise)",
        fills="start_ratio",
    ),
    flag(
        "--idle-cap-system",
        type=float,
        default=default_of(SessionSpec, "idle_cap_system_s"),
        metavar="SECONDS",
        help="when nothing is in flight this long, send the next due turn now",
        fills="idle_cap_system_s",
    ),
    flag(
        "--idle-cap-tree",
        type=float,
        default=default_of(SessionSpec, "idle_cap_tree_s"),
        metavar="SECONDS",
        help="cut any recorded gap of a session tree to this",
        fills="idle_cap_tree_s",
    ),
    flag(
        "--live-history",
        action="store_true",
        help="assistant turns in the history are the server's own replies to "
        "the previous turns (default: the recorded ones, prefix-stable); a "
        "session ends at a turn that failed or came back empty",
        fills="live_history",
    ),
    flag(
        "--no-cache-bust",
        action="store_true",
        help="do not give each play of a session tree its own marker before its "
        "first user turn (recycled plays then hit the previous play's cache)",
        fills="cache_bust",
        to=operator.not_,
    ),
)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_count(session: SessionSpec) -> None:
    _check(session.sessions_per_conc >= 1, "--sessions-per-conc: must be >= 1")


def _check_limits(session: SessionSpec) -> None:
    limits.count(session.sessions_per_conc, "--sessions-per-conc")


def largest(text: str, what: str) -> float:
    """The largest value a `N`, `A..B` or `exp:MEAN` flag draws: an exponential's 10 x
    its mean (e^-10 of the draws go beyond)."""
    dist = parse_dist(text, what=what)
    return {"const": dist.low, "uniform": dist.high, "exp": 10 * dist.low}[dist.kind]


def _check_timing(session: SessionSpec) -> None:
    if session.start_ratio is not None:
        low, high = session.start_ratio
        _check(0.0 <= low <= high < 1.0, "--start-ratio LO,HI: need 0 <= LO <= HI < 1")
    for flag_name, cap in (
        ("--idle-cap-system", session.idle_cap_system_s),
        ("--idle-cap-tree", session.idle_cap_tree_s),
    ):
        _check(cap is None or cap > 0, f"{flag_name}: must be > 0 seconds (0 = no cap: omit it)")
    _check(
        all(name and not any(c in name for c in " :\t\r\n") for name in session.session_headers),
        "--session-header: a header name without spaces or colons, e.g. X-Session-ID",
    )


def check(session: SessionSpec) -> None:
    """The session part's own checks; what sessions need of other parts is spec.py's."""
    _check_count(session)
    _check_timing(session)
    _check_limits(session)
