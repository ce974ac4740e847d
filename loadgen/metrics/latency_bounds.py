"""The server's (and a Dynamo frontend's) latency means held to what the client measured.

A server times each request inside the client's span of it: its TTFT and E2E latency
start after the client sent and end before the client read, its inter-token gaps sum to
less than the client's first-to-last chunk, and its queue time lies inside its TTFT. A
mean of such values cannot exceed the largest value the client measured of the same
quantity, so a server mean above the client's maximum is not these requests' (a server
or frontend whose histograms count other traffic, or lie): it is null, with the reason in
`<group>_latency_invalid_reason`, never published beside figures it contradicts. Over
TIMING_SLACK_MS, as for the per-request timings (request_stats.py). Without a client
sample of the quantity (no completed request) nothing is checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from loadgen.metrics.arrays import FloatArray
from loadgen.metrics.request_stats import TIMING_SLACK_MS

# the server or frontend mean -> the client's sample (summary.latency_samples) it lies within
CLIENT_QUANTITY: Mapping[str, str] = MappingProxyType(
    {
        "server_mean_ttft_ms": "ttft",
        "server_mean_e2el_ms": "e2el",
        "server_mean_itl_ms": "itl",  # one per step and request; the client's per chunk
        "server_mean_queue_time_ms": "ttft",  # the queue lies inside the TTFT
        "frontend_mean_ttft_ms": "ttft",
        "frontend_mean_itl_per_token_ms": "itl_per_token",
        "frontend_mean_e2el_ms": "e2el",
    }
)
WORDS = MappingProxyType(
    {"ttft": "TTFT", "e2el": "E2E latency", "itl": "ITL", "itl_per_token": "ITL per token"}
)


@dataclass(frozen=True, slots=True)
class ClientMaxima:
    """The largest value the client measured of each quantity (ms); absent: no sample."""

    largest: Mapping[str, float]

    @classmethod
    def of(cls, samples: Mapping[str, FloatArray]) -> ClientMaxima:
        quantities = set(CLIENT_QUANTITY.values())
        return cls(
            {q: float(samples[q].max()) for q in quantities if q in samples and samples[q].size}
        )


def bounded_means(fields: Mapping[str, Any], maxima: ClientMaxima, group: str) -> dict[str, Any]:
    """`fields` with each mean of CLIENT_QUANTITY above the client's maximum set to None,
    and `<group>_latency_invalid_reason` saying which and why (None when none was)."""
    bounded = dict(fields)
    reasons = []
    for key, quantity in CLIENT_QUANTITY.items():
        mean, largest = fields.get(key), maxima.largest.get(quantity)
        if mean is None or largest is None or mean <= largest + TIMING_SLACK_MS:
            continue
        bounded[key] = None
        reasons.append(
            f"{key} {mean:.1f} ms above the client's largest {WORDS[quantity]} {largest:.1f} ms"
        )
    bounded[f"{group}_latency_invalid_reason"] = (
        f"{'; '.join(reasons)}: not these requests' (the {group} counted other traffic, "
        "or its histograms are wrong), so null"
        if reasons
        else None
    )
    return bounded
