"""Latency distributions of one point for plotting: TTFT and ITL as quantile curves (pure).

The same samples as the result file's percentiles (completed requests, `PointArrays`),
summarised as the value at QUANTILES evenly spaced probabilities: a CDF with a fixed
number of points whatever the number of samples (1.7 M chunk gaps at conc 512).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.metrics.arrays import FloatArray, PointArrays, is_completed
from loadgen.records import RequestRecord

QUANTILES = 201


@dataclass(frozen=True, slots=True)
class Distribution:
    probabilities: FloatArray  # 0..1
    values: FloatArray  # the sample value at each probability (numpy's linear method)
    samples: int


@dataclass(frozen=True, slots=True)
class PointDistributions:
    ttft_ms: Distribution
    itl_ms: Distribution  # per chunk gap (vLLM's ITL)
    itl_per_token_ms: Distribution  # each gap over the tokens of its later chunk


def quantile_curve(samples: FloatArray, points: int = QUANTILES) -> Distribution:
    probabilities = np.linspace(0.0, 1.0, points)
    values = np.quantile(samples, probabilities) if samples.size else np.zeros(0, dtype=np.float64)
    return Distribution(probabilities if samples.size else values, values, int(samples.size))


def point_distributions(records: Sequence[RequestRecord]) -> PointDistributions:
    completed = [r for r in records if is_completed(r)]
    arrays = PointArrays.build(completed)
    gaps, tokens = arrays.itl_per_chunk_ms()
    has_tokens = tokens > 0
    per_token = np.repeat(gaps[has_tokens] / tokens[has_tokens], tokens[has_tokens])
    return PointDistributions(
        quantile_curve(arrays.ttft_ms()), quantile_curve(gaps), quantile_curve(per_token)
    )
