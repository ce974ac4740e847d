"""The deadlines part: how long anything may take, and how many failures a point may have
(`spec.deadlines`): its flags, its struct and its checks."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.config import limits
from loadgen.config.fields import Field, default_of, flag
from loadgen.config.parsers import SpecError, check_finite

# Deadlines (no wait is unbounded): a non-streaming call (/v1/models, /tokenize, /version,
# /metrics) must answer within DEFAULT_HTTP_TIMEOUT_S; a streamed response that delivers
# no byte for DEFAULT_STREAM_IDLE_TIMEOUT_S (time to first byte included) is a timeout.
DEFAULT_HTTP_TIMEOUT_S = 30.0
DEFAULT_STREAM_IDLE_TIMEOUT_S = 300.0
MAX_ERROR_RATE = 0.05
SESSION_MAX_ERROR_RATE = 0.10  # InferenceX's agentic gate


@dataclass(frozen=True, slots=True)
class DeadlineSpec:
    """How long anything may take, and how many failures a point may have."""

    request_timeout_s: float | None = None
    http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S
    stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S
    max_error_rate: float = MAX_ERROR_RATE


FIELDS: tuple[Field, ...] = (
    flag(
        "--request-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give up on a streamed request this long after it was sent, "
        "however steadily it streams (default: no timeout)",
        fills="request_timeout_s",
    ),
    flag(
        "--stream-idle-timeout",
        type=float,
        default=default_of(DeadlineSpec, "stream_idle_timeout_s"),
        metavar="SECONDS",
        help="a streamed request that receives no byte for this long (waiting "
        "for the first token included) ends as a timeout",
        fills="stream_idle_timeout_s",
    ),
    flag(
        "--http-timeout",
        type=float,
        default=default_of(DeadlineSpec, "http_timeout_s"),
        metavar="SECONDS",
        help="deadline of each non-streaming call: /v1/models, /version, "
        "/tokenize, /metrics scrapes",
        fills="http_timeout_s",
    ),
    flag(
        "--max-error-rate",
        type=float,
        default=None,
        metavar="FRACTION",
        help="exit non-zero when a point's failed share exceeds this "
        "(results are written anyway) (default: 0.05; 0.10 for session runs, "
        "InferenceX's agentic gate)",
    ),
)


def max_error_rate(given: float | None, sessions: bool) -> float:
    """--max-error-rate, else the gate of the run's kind."""
    if given is not None:
        return given
    return SESSION_MAX_ERROR_RATE if sessions else MAX_ERROR_RATE


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_signs(deadlines: DeadlineSpec) -> None:
    _check(
        deadlines.request_timeout_s is None or deadlines.request_timeout_s > 0,
        "--request-timeout: must be > 0 seconds",
    )
    _check(deadlines.http_timeout_s > 0, "--http-timeout: must be > 0 seconds")
    _check(deadlines.stream_idle_timeout_s > 0, "--stream-idle-timeout: must be > 0 seconds")
    _check(0.0 <= deadlines.max_error_rate <= 1.0, "--max-error-rate: must be in [0, 1]")


def _check_limits(deadlines: DeadlineSpec) -> None:
    limits.seconds(deadlines.request_timeout_s, "--request-timeout")
    limits.seconds(deadlines.http_timeout_s, "--http-timeout")
    limits.seconds(deadlines.stream_idle_timeout_s, "--stream-idle-timeout")


# floats: each must be a finite number
FLOATS = (
    ("request_timeout_s", "--request-timeout"),
    ("http_timeout_s", "--http-timeout"),
    ("stream_idle_timeout_s", "--stream-idle-timeout"),
    ("max_error_rate", "--max-error-rate"),
)


def check(deadlines: DeadlineSpec) -> None:
    """The deadlines' own checks: finite, signs, then bounds (config/limits.py)."""
    check_finite(deadlines, FLOATS)
    _check_signs(deadlines)
    _check_limits(deadlines)
