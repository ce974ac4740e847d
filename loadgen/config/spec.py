"""What a run is asked to do: `RunSpec`, frozen and validated, plus the small parsers behind it.

Every value that reaches the engine has passed through here, whether it came from argv or
from the sidecar's JSON options, so both paths reject bad input with the same message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from encoders import ENCODERS
from loadgen.errors import UsageError

Endpoint = Literal["completions", "chat"]
ENDPOINTS: tuple[str, ...] = ("completions", "chat")
ENCODER_NAMES: tuple[str, ...] = tuple(ENCODERS)
THINKING_MODES: tuple[str, ...] = ("chat", "thinking")
REASONING_EFFORTS: tuple[str, ...] = ("low", "high", "max")
SLO_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
HTTP_CLIENTS: tuple[str, ...] = ("native", "aiohttp")
MAX_CONC = 65536


class SpecError(UsageError):
    """A run setting is invalid; the message says what is wrong and what is allowed."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One benchmark run: a sweep of concurrency points against one server."""

    conc: tuple[int, ...]
    isl: int
    osl: int
    base_url: str | None = None  # None only with sim=True (filled in when it starts)
    model: str | None = None  # None: the only model the server serves
    endpoint: Endpoint = "completions"
    encoder: str = "dsv4"
    thinking: str = "thinking"
    reasoning_effort: str | None = None
    prompts_per_conc: int = 10
    warmup_per_conc: int = 2
    duration_s: float | None = None
    range_ratio: float = 1.0
    dataset: Path | None = None
    request_rate: float | None = None  # requests/s, open loop; None = closed loop
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    temperature: float = 0.0
    seed: int = 0
    num_gpus: int | None = None
    spec_tokens: int | None = None
    slos_ms: Mapping[str, float] = field(default_factory=dict)
    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
    request_timeout_s: float | None = None
    max_error_rate: float = 0.05
    results_dir: Path | None = None  # None: ./results/<timestamp>
    tokenizer: str | None = None
    api_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    sim: bool = False
    sim_args: tuple[str, ...] = ()
    progress: bool = True
    http_client: str = "native"  # the measured streams' client (see HTTP_CLIENTS)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def total_len(self) -> int:
        return self.isl + self.osl


_RANGE = re.compile(r"^(\d+)\.\.(\d+)(?::\+(\d+))?$")


def parse_conc(text: str) -> tuple[int, ...]:
    """`4..512` (powers of two), `8,16,64` (a list, order kept) or `A..B:+S` (arithmetic)."""
    text = text.strip().replace(" ", "")
    match = _RANGE.match(text)
    if match:
        low, high = int(match.group(1)), int(match.group(2))
        if low < 1 or high < low:
            raise SpecError(f"--conc {text}: need 1 <= A <= B in A..B")
        if match.group(3) is not None:
            step = int(match.group(3))
            if step < 1:
                raise SpecError(f"--conc {text}: the step S in A..B:+S must be >= 1")
            values = list(range(low, high + 1, step))
        else:
            if low & (low - 1):
                raise SpecError(f"--conc {text}: A in A..B must be a power of two (or use A..B:+S)")
            values = []
            value = low
            while value <= high:
                values.append(value)
                value *= 2
    else:
        try:
            values = [int(part) for part in text.split(",") if part]
        except ValueError:
            raise SpecError(
                f"--conc {text!r}: expected A..B (powers of two), A..B:+S or a list like 8,16,64"
            ) from None
    if not values or any(v < 1 or v > MAX_CONC for v in values):
        raise SpecError(f"--conc {text!r}: every concurrency must be in 1..{MAX_CONC}")
    if len(set(values)) != len(values):
        raise SpecError(f"--conc {text!r}: a concurrency appears twice")
    return tuple(values)


_DURATION = re.compile(r"^([0-9]*\.?[0-9]+)\s*(us|ms|s|m)?$")
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, None: 1.0}


def parse_duration_ms(text: str, *, what: str) -> float:
    """`2s`, `50ms`, `250us`, `0.5m`, or a bare number of milliseconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise SpecError(f"{what}: {text!r} is not a duration (use e.g. 2s, 50ms, 250us)")
    return float(match.group(1)) * _UNIT_MS[match.group(2)]


def parse_slos(text: str) -> dict[str, float]:
    """`ttft=2s,tpot=50ms` -> {"ttft": 2000.0, "tpot": 50.0} (milliseconds)."""
    slos: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in SLO_METRICS:
            raise SpecError(
                f"--slo {part!r}: expected METRIC=DURATION with METRIC in {', '.join(SLO_METRICS)}"
            )
        slos[name] = parse_duration_ms(value, what=f"--slo {name}")
        if slos[name] <= 0:
            raise SpecError(f"--slo {name}: must be > 0")
    return slos


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise SpecError(f"--percentiles {text!r}: expected numbers like 50,90,99,99.9") from None
    if not values or any(not 0 < v < 100 for v in values):
        raise SpecError(f"--percentiles {text!r}: each must be strictly between 0 and 100")
    return values


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c in name for c in " \t\r\n"):
        raise SpecError(f"--header {text!r}: expected NAME:VALUE, e.g. X-Session-Affinity:abc")
    if any(c in value for c in "\r\n\0"):
        raise SpecError(f"--header {text!r}: a value cannot hold CR, LF or NUL")
    return name.strip(), value.strip()


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def validate(spec: RunSpec) -> None:
    """Raise SpecError for the first invalid setting (RunSpec calls this on construction)."""
    _check(bool(spec.conc) and all(1 <= c <= MAX_CONC for c in spec.conc),
           f"--conc: every concurrency must be in 1..{MAX_CONC}")
    _check(spec.isl >= 1, f"--isl {spec.isl}: must be >= 1 token")
    _check(spec.osl >= 1, f"--osl {spec.osl}: must be >= 1 token")
    _check(spec.sim or bool(spec.base_url), "--base-url is required (or use --sim)")
    if spec.base_url:
        _check(spec.base_url.startswith(("http://", "https://")),
               f"--base-url {spec.base_url!r}: must start with http:// or https://")
    _check(spec.endpoint in ENDPOINTS, f"--endpoint {spec.endpoint!r}: allowed: completions, chat")
    _check(spec.encoder in ENCODER_NAMES,
           f"--encoder {spec.encoder!r}: allowed: {', '.join(ENCODER_NAMES)}")
    _check(spec.thinking in THINKING_MODES,
           f"--thinking {spec.thinking!r}: allowed: chat, thinking")
    _check(spec.reasoning_effort is None or spec.reasoning_effort in REASONING_EFFORTS,
           f"--reasoning-effort {spec.reasoning_effort!r}: allowed: low, high, max")
    _check(spec.prompts_per_conc >= 1, "--prompts-per-conc: must be >= 1")
    _check(spec.warmup_per_conc >= 0, "--warmup-per-conc: must be >= 0")
    _check(spec.duration_s is None or spec.duration_s > 0, "--duration: must be > 0 seconds")
    _check(0.0 <= spec.range_ratio <= 1.0, f"--range-ratio {spec.range_ratio}: must be in [0, 1]")
    _check(spec.request_rate is None or spec.request_rate > 0,
           "--request-rate: must be > 0 requests/s (omit it for a closed loop)")
    _check(spec.burstiness > 0, "--burstiness: the gamma shape must be > 0 (1 = Poisson)")
    _check(spec.temperature >= 0, "--temperature: must be >= 0")
    _check(spec.num_gpus is None or spec.num_gpus >= 1, "--num-gpus: must be >= 1")
    _check(spec.spec_tokens is None or spec.spec_tokens >= 1, "--spec-tokens: must be >= 1")
    _check(all(k in SLO_METRICS and v > 0 for k, v in spec.slos_ms.items()),
           f"--slo: metrics must be among {', '.join(SLO_METRICS)} with positive limits")
    _check(bool(spec.percentiles) and all(0 < p < 100 for p in spec.percentiles),
           "--percentiles: each must be strictly between 0 and 100")
    _check(spec.request_timeout_s is None or spec.request_timeout_s > 0,
           "--request-timeout: must be > 0 seconds")
    _check(0.0 <= spec.max_error_rate <= 1.0, "--max-error-rate: must be in [0, 1]")
    _check(spec.http_client in HTTP_CLIENTS,
           f"--http-client {spec.http_client!r}: allowed: {', '.join(HTTP_CLIENTS)}")
    if spec.dataset is not None:
        _check(spec.dataset.is_file(), f"--dataset {spec.dataset}: no such file")
