"""E2E normalized interactivity: InferenceX AgentX's metric of record (pure numpy).

Per completed request, r_i = E2EL_i / OSL_i in seconds per output token; the figure at
percentile q is 1 / percentile_q(r), in output tokens per second per user. The percentile
is taken of r before inverting, so p90 is the slow tail (a higher-is-better rate that
keeps the slow-tail reading), not the ratio of separate E2EL and OSL percentiles.

Read from SemiAnalysisAI/InferenceX utils/agentic/aggregation/request_metrics.py
(`_e2e_normalized_interactivity_stats`, `_interactivity_stats`) and
aggregation_common.py (`percentile`, `stats_for`) at commit 843c6254ff69, for behaviour
only (their code is not here):
- a request is left out unless its E2EL and OSL are both finite and > 0 (failed
  requests never reach it: they are not completed);
- percentiles are linear between order statistics (numpy's default method);
- `mean_e2e_norm_intvty` is 1 / mean(r), the inverse of the mean seconds per token, not
  the mean of the per-request rates;
- `std_e2e_norm_intvty` is the population std of the per-request rates 1 / r_i.
InferenceX publishes p50, p75, p90, p95; p99 is loadgen's, by the same rule. No request
left: every figure is None.
"""

from __future__ import annotations

import numpy as np

from loadgen.metrics.arrays import FloatArray, IntArray

PERCENTILES = (50, 75, 90, 95, 99)
NAME = "e2e_norm_intvty"
FIELDS = (f"mean_{NAME}", *(f"p{p}_{NAME}" for p in PERCENTILES), f"std_{NAME}")


def seconds_per_token(e2el_ms: FloatArray, output_tokens: IntArray) -> FloatArray:
    """r_i of every request with a finite, positive E2EL and output length."""
    osl = output_tokens.astype(np.float64)
    keep = np.isfinite(e2el_ms) & np.isfinite(osl) & (e2el_ms > 0) & (osl > 0)
    ratio: FloatArray = e2el_ms[keep] / 1000.0 / osl[keep]
    return ratio


def e2e_norm_intvty_fields(e2el_ms: FloatArray, output_tokens: IntArray) -> dict[str, float | None]:
    """The point's `mean_/p50_/p75_/p90_/p95_/p99_/std_e2e_norm_intvty` (tok/s/user)."""
    ratio = seconds_per_token(e2el_ms, output_tokens)
    if ratio.size == 0:
        return dict.fromkeys(FIELDS)
    quantiles = np.percentile(ratio, PERCENTILES)
    found: dict[str, float | None] = {f"mean_{NAME}": 1.0 / float(ratio.mean())}
    for p, q in zip(PERCENTILES, quantiles, strict=True):
        found[f"p{p}_{NAME}"] = 1.0 / float(q)
    found[f"std_{NAME}"] = float((1.0 / ratio).std())
    return found
