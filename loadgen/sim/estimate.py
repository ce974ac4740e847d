"""How long the simulator's step model says a closed-loop point takes (pure).

A point of `requests` requests at concurrency `conc` runs in waves of `batch` requests:
as many as run at once (`--max-num-seqs`, and as many prompt+output lengths as the KV
cache holds). Each wave prefills its prompts (prefill tokens x prefill-token-us, plus the
fixed cost of every `--max-num-batched-tokens` chunk) and decodes osl / AL steps of
batch x (K+1) tokens. Chunked prefill overlaps waves in the engine, so this is an upper
estimate of the shape; against the simulator on this machine it is within a few
percent (the headline conc 4 ~25 s, conc 128 ~314 s; measured 26 s and 310 s).
"""

from __future__ import annotations

import math

from loadgen.sim.config import SimConfig


def acceptance_length(config: SimConfig) -> float:
    """Tokens per decode step: 1 + the expected accepted drafts."""
    length, kept = 1.0, 1.0
    for rate in config.acceptance if config.mtp else ():
        kept *= rate
        length += kept
    return length


def running_batch(config: SimConfig, conc: int, isl: int, osl: int) -> int:
    """Requests running at once: the concurrency, capped by the engine and the KV cache."""
    fits = config.kv_cache_tokens // max(1, isl + osl)
    return max(1, min(conc, config.max_num_seqs, fits))


def point_seconds(config: SimConfig, conc: int, requests: int, isl: int, osl: int) -> float:
    """Wall time of `requests` closed-loop requests at `conc` under the step model."""
    batch = running_batch(config, conc, isl, osl)
    tokens_per_step = (config.spec_tokens + 1) if config.mtp else 1
    fixed_us = config.step_fixed_ms * 1000.0
    decode_step_us = fixed_us + batch * (tokens_per_step * config.decode_token_us + config.seq_us)
    decode_us = math.ceil(osl / acceptance_length(config)) * decode_step_us
    prefill = batch * isl
    prefill_us = (
        prefill * config.prefill_token_us
        + math.ceil(prefill / config.max_num_batched_tokens) * fixed_us
    )
    return requests / batch * (decode_us + prefill_us) / 1e6
