"""Flag values from text: concurrency lists, durations, SLOs, percentiles, headers,
extra body, workers, CPU lists, shards; and `SpecError`, which every one of them and
RunSpec's validation raise.

Kept apart from spec.py (the RunSpec record and its validation): the parsers turn text into
typed values, argv and the sidecar's JSON options alike go through them via config/args.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from loadgen.errors import UsageError

SLO_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
# vLLM `--percentile-metrics` names loadgen can report (client_queue_time = queue_time).
VLLM_PERCENTILE_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el", "client_queue_time")
MAX_CONC = 65536
MAX_WORKERS = 256


class SpecError(UsageError):
    """A run setting is invalid; the message says what is wrong and what is allowed."""


def check_finite(part: object, floats: Iterable[tuple[str, str]]) -> None:
    """Each (setting, flag) of a part whose value is a float: a finite number (`inf` would
    overflow a deadline or turn arrival gaps into NaN; `nan` passes every `>`)."""
    for name, flag in floats:
        value = getattr(part, name)
        if value is not None and not math.isfinite(value):
            raise SpecError(f"{flag} {value}: must be a finite number")


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
        return conc_list([part for part in text.split(",") if part], shown=text)
    return _checked_conc(values, text)


def conc_list(items: Sequence[object], shown: str | None = None) -> tuple[int, ...]:
    """A list of concurrencies, order kept: --conc's `8,16,64` or a document's
    `[8, 16, 64]` (`shown`: how the value reads in a message, the list's own text)."""
    shown = ",".join(map(str, items)) if shown is None else shown
    try:
        values = [v if type(v) is int else int(str(v)) for v in items]  # not 1.5, not true
    except ValueError:
        raise SpecError(
            f"--conc {shown!r}: expected A..B (powers of two), A..B:+S or a list like 8,16,64"
        ) from None
    return _checked_conc(values, shown)


def _checked_conc(values: list[int], shown: str) -> tuple[int, ...]:
    if not values or any(v < 1 or v > MAX_CONC for v in values):
        raise SpecError(f"--conc {shown!r}: every concurrency must be in 1..{MAX_CONC}")
    if len(set(values)) != len(values):
        raise SpecError(f"--conc {shown!r}: a concurrency appears twice")
    return tuple(values)


_DURATION = re.compile(r"^([0-9]*\.?[0-9]+)\s*(us|ms|s|m)?$")
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, None: 1.0}


def parse_duration_ms(text: str, *, what: str) -> float:
    """`2s`, `50ms`, `250us`, `0.5m`, or a bare number of milliseconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise SpecError(f"{what}: {text!r} is not a duration (use e.g. 2s, 50ms, 250us)")
    return float(match.group(1)) * _UNIT_MS[match.group(2)]


def seconds_parser(flag: str, example: str) -> Callable[[str], float]:
    """The parser of a flag that takes a finite number of seconds above 0."""

    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            raise SpecError(f"{flag} {text!r}: a number of seconds, e.g. {example}") from None
        if not (math.isfinite(seconds) and seconds > 0):
            raise SpecError(f"{flag} {text}: must be a finite number of seconds > 0")
        return seconds

    return parse


def parse_percentiles(text: str) -> tuple[float, ...]:
    return percentile_list([p for p in text.split(",") if p.strip()], shown=text)


def percentile_list(items: Sequence[object], shown: str | None = None) -> tuple[float, ...]:
    """Percentiles: --percentiles' `50,99` or a document's `[50, 99]`."""
    shown = ",".join(map(str, items)) if shown is None else shown
    try:
        values = tuple(float(v) if isinstance(v, int | float) else float(str(v)) for v in items)
    except ValueError:
        raise SpecError(f"--percentiles {shown!r}: expected numbers like 50,90,99,99.9") from None
    if not values or any(not 0 < v < 100 for v in values):
        raise SpecError(f"--percentiles {shown!r}: each must be strictly between 0 and 100")
    return values


_HEADER_SEP = re.compile(r"[:=]")
# Body fields loadgen sets itself: overriding them would change what is measured (the
# token counts, the stream, the length) behind the back of the flag that owns them.
EXTRA_BODY_RESERVED: Mapping[str, str] = {
    "model": "use --model",
    "prompt": "loadgen builds the prompt",
    "messages": "loadgen builds the messages",
    "max_tokens": "use --osl",
    "max_completion_tokens": "use --osl",
    "temperature": "use --temperature",
    "seed": "use --seed",
    "chat_template_kwargs": "use --thinking / --reasoning-effort",
    "stream": "loadgen always streams",
    "stream_options": "loadgen needs per-chunk usage",
    "ignore_eos": "loadgen needs exactly --osl tokens",
    "return_token_ids": "loadgen counts tokens with it",
    "logprobs": "loadgen may count tokens with it",
    "top_logprobs": "loadgen may count tokens with it",
    "add_special_tokens": "loadgen adds the template and BOS itself",
    "n": "one choice per request is what is measured",
    "best_of": "one choice per request is what is measured",
}


def parse_extra_body(text: str) -> dict[str, Any]:
    """`{"min_p": 0.1}`: a JSON object of extra request-body fields."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise SpecError(
            f'--extra-body {text!r}: not JSON; expected an object like {{"min_p": 0.1}}'
        ) from None
    if not isinstance(value, dict):
        raise SpecError(f'--extra-body {text!r}: expected a JSON object like {{"min_p": 0.1}}')
    return extra_body(value)


def extra_body(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Extra request-body fields (--extra-body's JSON, a document's mapping): JSON values
    (orjson refuses anything else with its own words), none loadgen sets itself."""
    body = dict(fields)
    orjson.dumps(body)  # TypeError naming what a request body cannot hold
    check_extra_body(body)
    return body


def check_extra_body(body: Mapping[str, Any]) -> None:
    for key in body:
        if key in EXTRA_BODY_RESERVED:
            raise SpecError(f"--extra-body: {key!r} is set by loadgen ({EXTRA_BODY_RESERVED[key]})")


# RFC 9110: a field name is a token; a field value has no control characters but HTAB.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def parse_header(text: str) -> tuple[str, str]:
    """`NAME:VALUE` (loadgen) or `NAME=VALUE` (vLLM): a header name has neither character,
    so the first of them ends the name."""
    match = _HEADER_SEP.search(text)
    if not match:
        return header_pair(("", text), shown=text)
    return header_pair((text[: match.start()], text[match.end() :]), shown=text)


def header_pair(header: tuple[str, object], shown: str | None = None) -> tuple[str, str]:
    """One header as (NAME, VALUE): --header's text split at its first `:` or `=`, or a
    document's `NAME: VALUE` (`shown`: how it reads in a message)."""
    name, value = header[0].strip(" \t"), str(header[1])
    shown = f"{header[0]}:{value}" if shown is None else shown
    if not _HEADER_NAME.match(name):
        raise SpecError(
            f"--header {shown!r}: expected NAME:VALUE or NAME=VALUE with NAME made "
            "of letters, digits and !#$%&'*+-.^_`|~, e.g. X-Session-Affinity:abc"
        )
    value = value.strip(" \t")  # not CR/LF: those are refused
    if CONTROL_CHARS.search(value):
        raise SpecError(
            f"--header {shown!r}: the value contains a control character (CR, LF, "
            "...), which would break or inject HTTP headers; remove it"
        )
    return name, value


def check_api_key(key: str) -> str:
    """The bearer token without surrounding whitespace (a secret file's trailing newline)."""
    key = key.strip()
    if CONTROL_CHARS.search(key):
        raise SpecError(
            "--api-key / OPENAI_API_KEY contains a control character (CR, LF, "
            "...); it cannot be sent in an HTTP header"
        )
    return key


def parse_workers(text: str) -> int | None:
    """`N` worker processes, or `auto` (None: chosen from the cores and the concurrency)."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise SpecError(f"--workers {text!r}: expected a number of processes or auto") from None
    if not 1 <= value <= MAX_WORKERS:
        raise SpecError(f"--workers {value}: must be in 1..{MAX_WORKERS} (or auto)")
    return value


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Linux cpu-list syntax, as taskset -c: `0-3`, `2,4,6`, `0-1,8-9`."""
    cpus: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            low, sep, high = part.partition("-")
            first, last = int(low), int(high) if sep else int(low)
            if first < 0 or last < first:
                raise ValueError
            cpus += range(first, last + 1)
    except ValueError:
        raise SpecError(
            f"--cpu-affinity {text!r}: expected CPU numbers like 0-3 or 2,4,6"
        ) from None
    if not cpus or len(set(cpus)) != len(cpus):
        raise SpecError(f"--cpu-affinity {text!r}: list each CPU once")
    return tuple(cpus)


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N`: shard I (0-based, like a Kubernetes completion index) of N."""
    index, sep, count = text.strip().partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = -1, 0
    if not sep or not 0 <= i < n:
        raise SpecError(
            f"--shard {text!r}: expected I/N with 0 <= I < N, e.g. 0/4 "
            "(I counts from 0, like a Kubernetes Job completion index)"
        )
    return i, n
