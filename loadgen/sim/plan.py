"""A request's whole output, drawn up front from its seed: tokens, EOS, MTP acceptance.

Drawing everything at admission makes the output a function of (seed, request
parameters) only -- independent of batching, timing and other requests -- and keeps
per-step work on the engine loop to list slicing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.sim.detok import TokenTable


@dataclass(frozen=True, slots=True)
class PlanParams:
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    eos_prob: float
    spec_tokens: int
    acceptance: tuple[float, ...]
    fragment_fraction: float


@dataclass(frozen=True, slots=True)
class RequestPlan:
    token_ids: list[int]
    texts: list[str]
    # Accepted draft tokens drawn for decode step i (0..K); the engine uses them in order.
    accepted: list[int]
    finish_reason: str  # "length" or "stop"

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def eos_index(rng: np.random.Generator, params: PlanParams) -> int | None:
    """Index of the EOS token, or None when the request runs to max_tokens."""
    if params.ignore_eos or params.eos_prob <= 0:
        return None
    # Geometric: the first success among tokens min_tokens, min_tokens+1, ...
    index = params.min_tokens + int(rng.geometric(params.eos_prob)) - 1
    return index if index < params.max_tokens else None


def draw_acceptance(rng: np.random.Generator, steps: int,
                    acceptance: Sequence[float]) -> list[int]:
    """Per step, how many of K drafts are accepted: position i needs all before it."""
    if not acceptance or steps <= 0:
        return [0] * max(steps, 0)
    draws = rng.random((steps, len(acceptance))) < np.asarray(acceptance)
    return np.cumprod(draws, axis=1).sum(axis=1).tolist()  # type: ignore[no-any-return]


def make_plan(table: TokenTable, seed: int, params: PlanParams) -> RequestPlan:
    rng = np.random.default_rng(seed)
    eos_at = eos_index(rng, params)
    count = params.max_tokens if eos_at is None else eos_at + 1
    finish = "length"
    if eos_at is None:
        ids, texts = table.generate(rng, count, params.fragment_fraction)
    else:
        # EOS is generated and counted (as in vLLM) but, being special, streams no text.
        ids, texts = table.generate(rng, count - 1, params.fragment_fraction)
        ids.append(table.eos_id)
        texts.append("")
        finish = "stop"
    # At most one decode step per token after the first (all drafts rejected).
    accepted = draw_acceptance(rng, count - 1, params.acceptance[: params.spec_tokens])
    return RequestPlan(token_ids=ids, texts=texts, accepted=accepted, finish_reason=finish)
