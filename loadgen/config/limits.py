"""The bounds on every option that sizes a run's work, checked before anything is built.

A point's requests (their bodies) and its records are held in memory while it runs, and
its arrival times are computed up front: a count, rate or duration that fits no real run
would otherwise surface as a MemoryError minutes in, an OverflowError from the
scheduler, or (through the sidecar) a process the OOM killer ends. Each limit here is
far above real use and is named in the one line that refuses a value over it
(docs/failure-behaviour.md lists them); RunSpec's checks call `check_limits` last, after
the signs and finiteness of the same values are checked.

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
- MEMORY_SHARE: the estimate of one point's bodies and records (`point_memory_bytes`)
  may take at most half the memory of the machine (or of its container, when that is
  limited): a conc-512 x 12 point of isl 8192 / osl 1024 is ~0.8 GiB, a conc-4096 one
  ~6.2 GiB. The other half is the interpreter, the tokenizer, the workers and the rest
  of the machine.
"""

from __future__ import annotations

import math

from loadgen.config.local_checks import memory_bytes
from loadgen.config.parsers import SpecError
from loadgen.config.subspecs import LoadSpec, SpecParts

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
# up: a planned request holds ~8 KB at isl 1024 and ~69 KB at isl 8192 (its JSON body,
# ~5.2 bytes a token, and the request around it: ~8.5 bytes a token in all); a record ~1
# KiB and ~48 bytes per output chunk (a stamp and a count, every token a chunk at
# worst). A dataset prompt's length is not known before the dataset is read:
# DATASET_TOKENS.
REQUEST_BYTES = 4096
BODY_BYTES_PER_TOKEN = 10
RECORD_BYTES_PER_TOKEN = 48
DATASET_TOKENS = 4096


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


def _rate(value: float | None, flag: str) -> None:
    if value is None:
        return
    _check(
        MIN_REQUEST_RATE <= value <= MAX_REQUEST_RATE,
        f"{flag} {value:g}: must be in {MIN_REQUEST_RATE:g}..{MAX_REQUEST_RATE:g} requests/s",
    )


def _seconds(value: float | None, flag: str, low: float = 0.0) -> None:
    if value is None:
        return
    _check(
        low <= value <= MAX_POINT_SECONDS,
        f"{flag} {value:g}: must be at most {MAX_POINT_SECONDS:g} seconds (7 days)"
        if value > MAX_POINT_SECONDS
        else f"{flag} {value:g}: must be at least {low:g} seconds",
    )


def _count(value: int | None, flag: str) -> None:
    _check(
        value is None or value <= MAX_REQUESTS_PER_POINT,
        f"{flag} {value}: at most {MAX_REQUESTS_PER_POINT:,} requests per point; "
        "split a longer soak into several points or runs",
    )


def check_limits(spec: SpecParts) -> None:
    """Raise SpecError for the first value over its limit (RunSpec's checks, last)."""
    load, workload = spec.load, spec.workload
    for value, flag in ((workload.isl, "--isl"), (workload.osl, "--osl")):
        _check(
            value is None or value <= MAX_TOKENS,
            f"{flag} {value}: at most {MAX_TOKENS:,} tokens",
        )
    _check_rates(load)
    _check_durations(spec)
    _count(spec.session.sessions_per_conc, "--sessions-per-conc")
    if spec.session.turns is not None:
        _check_turns(spec)
    _count(load.num_prompts, "--num-prompts")
    _count(load.num_warmups, "--num-warmups")
    _count(load.prompts_per_conc, "--prompts-per-conc")
    _count(load.warmup_per_conc, "--warmup-per-conc")
    top = max(load.conc)
    for name, flag, requests in (
        ("measured", "--prompts-per-conc", load.measured_requests(top)),
        ("warmup", "--warmup-per-conc", load.warmup_requests(top)),
    ):
        why = (
            "--rate-stages" if name == "measured" and load.rate_stages else f"--conc {top} x {flag}"
        )
        _check(
            requests <= MAX_REQUESTS_PER_POINT,
            f"{why}: {requests:,} {name} requests per point, over the limit of "
            f"{MAX_REQUESTS_PER_POINT:,}; split a longer soak into several points or runs",
        )
    estimate, budget = point_memory_bytes(load, top, workload.isl, workload.osl), memory_budget()
    _check(
        estimate <= budget,
        f"conc {top}: its {load.measured_requests(top) + load.warmup_requests(top):,} "
        f"requests of isl {workload.isl or DATASET_TOKENS} / osl {workload.osl or DATASET_TOKENS} "
        f"would hold ~{estimate / 2**30:,.1f} GiB in memory, over the limit of one point "
        f"(half this machine's memory: {budget / 2**30:,.1f} GiB); plan fewer requests per "
        "point (--prompts-per-conc, --num-prompts) or shorter prompts",
    )


def memory_budget() -> int:
    """What one point's estimate may reach on this machine."""
    return int(memory_bytes() * MEMORY_SHARE)


def point_memory_bytes(load: LoadSpec, conc: int, isl: int | None, osl: int | None) -> int:
    """An upper estimate of what one point of `conc` holds: every request's body (built
    before the point starts) and every record (kept until the point is written)."""
    requests = load.measured_requests(conc) + load.warmup_requests(conc)
    per_request = (
        REQUEST_BYTES
        + BODY_BYTES_PER_TOKEN * (isl or DATASET_TOKENS)
        + RECORD_BYTES_PER_TOKEN * (osl or DATASET_TOKENS)
    )
    return requests * per_request


def _check_rates(load: LoadSpec) -> None:
    _rate(load.request_rate, "--request-rate")
    _rate(load.ramp_up_start_rps, "--ramp-up-start-rps")
    _rate(load.ramp_up_end_rps, "--ramp-up-end-rps")
    if load.rate_range is not None:
        _rate(load.rate_range[0], "--rate-range")
        _rate(load.rate_range[1], "--rate-range")
    for rate, seconds in load.rate_stages:
        _rate(rate, f"--rate-stages {rate:g}@{seconds:g}s: the rate")
        _seconds(seconds, f"--rate-stages {rate:g}@{seconds:g}s: the duration")
    for conc, seconds in load.conc_stages:
        _seconds(seconds, f"--conc-stages {conc}@{seconds:g}s: the duration")
    _check(
        MIN_BURSTINESS <= load.burstiness <= MAX_BURSTINESS,
        f"--burstiness {load.burstiness:g}: must be in {MIN_BURSTINESS:g}..{MAX_BURSTINESS:g} "
        "(the gamma shape; 1 = Poisson)",
    )


def _check_durations(spec: SpecParts) -> None:
    load, deadlines = spec.load, spec.deadlines
    _seconds(load.duration_s, "--duration")
    stages = load.rate_stages or load.conc_stages
    if stages:
        _seconds(math.fsum(seconds for _, seconds in stages), "the stages' sum")
    _seconds(load.saturation_window_s, "--saturation-window")
    _seconds(load.slice_duration_s, "--slice-duration", MIN_SLICE_SECONDS)
    duration = load.point_duration_s
    if load.slice_duration_s is not None and duration is not None:
        _check(
            duration / load.slice_duration_s <= MAX_SLICES_PER_POINT,
            f"--slice-duration {load.slice_duration_s:g}: {duration:g} s points would have "
            f"{duration / load.slice_duration_s:,.0f} slices, over the limit of "
            f"{MAX_SLICES_PER_POINT:,}; give longer slices",
        )
    _seconds(spec.telemetry.series_interval_s, "--slice-duration", MIN_SERIES_SECONDS)
    _seconds(deadlines.request_timeout_s, "--request-timeout")
    _seconds(deadlines.http_timeout_s, "--http-timeout")
    _seconds(deadlines.stream_idle_timeout_s, "--stream-idle-timeout")


def _largest(text: str, what: str) -> float:
    """The largest value a `N`, `A..B` or `exp:MEAN` flag draws: an exponential's 10 x
    its mean (e^-10 of the draws go beyond)."""
    from loadgen.config.dist import parse_dist  # dist.py needs spec.py, which needs this

    dist = parse_dist(text, what=what)
    return {"const": dist.low, "uniform": dist.high, "exp": 10 * dist.low}[dist.kind]


def _check_turns(spec: SpecParts) -> None:
    """Synthetic sessions: the turns, each turn's new tokens and the pauses bounded, so
    the sessions' requests and the last turn's history are."""
    session, load = spec.session, spec.load
    assert session.turns is not None
    turns = _largest(session.turns, "--turns")
    _check(turns <= MAX_TURNS, f"--turns {session.turns}: at most {MAX_TURNS:,} turns a session")
    think = _largest(session.think_time, "--think-time")
    _check(
        think <= MAX_POINT_SECONDS,
        f"--think-time {session.think_time}: at most {MAX_POINT_SECONDS:g} seconds (7 days)",
    )
    added = _largest(session.turn_tokens, "--turn-tokens") + (spec.workload.osl or 0)
    history = (spec.workload.isl or 0) + turns * added
    _check(
        history <= MAX_TOKENS,
        f"--turns {session.turns} x --turn-tokens {session.turn_tokens}: a last turn of "
        f"~{history:,.0f} tokens of history, over {MAX_TOKENS:,}",
    )
    requests = max(load.conc) * session.sessions_per_conc * turns
    _check(
        requests <= MAX_REQUESTS_PER_POINT,
        f"--conc {max(load.conc)} x --sessions-per-conc {session.sessions_per_conc} x "
        f"--turns {session.turns}: up to {requests:,.0f} requests per point, over the "
        f"limit of {MAX_REQUESTS_PER_POINT:,}",
    )
