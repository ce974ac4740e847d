"""vLLM's ramp-up schedule (`vllm bench serve --ramp-up-strategy`): pure and seeded.

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


def ramp_offsets_ns(rates: list[float], burstiness: float,
                    rng: np.random.Generator) -> list[int]:
    """Intended send times after the point start: request i after a gamma gap of mean
    1 / rates[i] (shape `burstiness`, 1 = Poisson) from request i - 1 (or the start)."""
    if not rates:
        return []
    scale = 1.0 / (np.asarray(rates, dtype=np.float64) * burstiness)
    gaps = rng.gamma(shape=burstiness, scale=scale)
    return [int(v * 1e9) for v in np.cumsum(gaps)]
