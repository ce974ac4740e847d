"""Open-loop schedules beyond a fixed rate, pure and seeded: vLLM's ramp-up
(`vllm bench serve --ramp-up-strategy`) and rate stages (`--rate-stages`).

Request i of N has the rate r_i = start + (end - start) * p_i (linear) or
start * (end / start) ** p_i (exponential), p_i = i / max(N - 1, 1): the rate is
interpolated over the request count, not over time. Each request waits a gamma gap of
shape `burstiness` and mean 1 / r_i after the previous one (the first after the point's
start), as vLLM's get_request does; without a ramp vLLM rescales the gaps to N / rate in
total, with one it does not, and neither does this.
"""

from __future__ import annotations

import numpy as np


def ramp_rates(count: int, strategy: str, start: float, end: float) -> list[float]:
    """Each request's rate (requests/s) under the ramp."""
    progress = np.arange(count, dtype=np.float64) / max(count - 1, 1)
    if strategy == "linear":
        rates = start + (end - start) * progress
    elif strategy == "exponential":
        rates = start * (end / start) ** progress
    else:
        raise ValueError(f"unknown ramp-up strategy {strategy!r}")
    return [float(r) for r in rates]


def ramp_offsets_ns(rates: list[float], burstiness: float, rng: np.random.Generator) -> list[int]:
    """Intended send times after the point start: request i after a gamma gap of mean
    1 / rates[i] (shape `burstiness`, 1 = Poisson) from request i - 1 (or the start)."""
    if not rates:
        return []
    scale = 1.0 / (np.asarray(rates, dtype=np.float64) * burstiness)
    gaps = rng.gamma(shape=burstiness, scale=scale)
    return [int(v * 1e9) for v in np.cumsum(gaps)]


def staged_offsets_ns(
    stages: tuple[tuple[float, float], ...], burstiness: float, rng: np.random.Generator, count: int
) -> list[int]:
    """Intended send times of `count` requests under rate stages (req/s, seconds), one after
    another from the point's start: within each stage gamma gaps of mean 1 / rate (shape
    `burstiness`), the first from the stage's start, none past its end. Requests the
    stages leave no time for get times after the last stage's end (never sent: the
    stages' end is the point's deadline)."""
    offsets: list[float] = []
    begin = 0.0
    for rate, seconds in stages:
        t = begin
        while True:
            gaps = rng.gamma(
                shape=burstiness,
                scale=1.0 / (rate * burstiness),
                size=max(16, int(rate * seconds * 1.2)),
            )
            times = t + np.cumsum(gaps)
            inside = times[times < begin + seconds]
            offsets.extend(inside.tolist())
            if inside.size < times.size:
                break
            t = float(times[-1])
        begin += seconds
    offsets = offsets[:count] + [begin + 1.0] * max(0, count - len(offsets))
    return [int(v * 1e9) for v in offsets]
