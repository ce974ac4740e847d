"""A request's output, drawn from its seed: tokens, EOS, MTP acceptance.

Tokens, acceptance and EOS come from three independent streams of the request's seed, each
consumed strictly in order, so the output is a function of (seed, request parameters) only:
independent of batching, timing and other requests. Tokens and acceptance are drawn lazily
in blocks as the engine reaches them, so admitting a request with max_tokens=100000 costs
no more than one with 100 (the engine loop must never stall on a big draw).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.sim.detok import TokenTable
from loadgen.sim.thinking import THINK_END_ID, THINK_END_TEXT, draw_reasoning_length

TOKEN_BLOCK = 256
ACCEPT_BLOCK = 256


@dataclass(frozen=True, slots=True)
class PlanParams:
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    eos_prob: float
    spec_tokens: int
    acceptance: tuple[float, ...]
    fragment_fraction: float
    lossy_spec: float = 0.0  # --fault-lossy-spec (a test aid)
    # A thinking request (sim/thinking.py): the mean of its reasoning length (None: it
    # does not think), and the reasoning phase's own acceptance (None: the answer's)
    reasoning_mean: int | None = None
    reasoning_acceptance: tuple[float, ...] | None = None


def eos_index(rng: np.random.Generator, params: PlanParams) -> int | None:
    """Index of the EOS token, or None when the request runs to max_tokens."""
    if params.ignore_eos or params.eos_prob <= 0:
        return None
    # Geometric: the first success among tokens min_tokens, min_tokens+1, ...
    index = params.min_tokens + int(rng.geometric(params.eos_prob)) - 1
    return index if index < params.max_tokens else None


def draw_acceptance(rng: np.random.Generator, steps: int, acceptance: Sequence[float]) -> list[int]:
    """Per step, how many of K drafts are accepted: position i needs all before it."""
    if not acceptance or steps <= 0:
        return [0] * max(steps, 0)
    draws = rng.random((steps, len(acceptance))) < np.asarray(acceptance)
    return np.cumprod(draws, axis=1).sum(axis=1).tolist()  # type: ignore[no-any-return]


class RequestPlan:
    """The request's tokens and per-step acceptance, materialized on demand."""

    __slots__ = (
        "_accept_rng",
        "_acceptance",
        "_answer_steps",
        "_fragments",
        "_lossy",
        "_lossy_rng",
        "_reasoning_acceptance",
        "_reasoning_accepted",
        "_reasoning_rng",
        "_reasoning_steps",
        "_table",
        "_token_rng",
        "accepted",
        "finish_reason",
        "num_tokens",
        "texts",
        "think_end",
        "thinking",
        "token_ids",
    )

    def __init__(self, table: TokenTable, seed: int, params: PlanParams) -> None:
        # A fourth child for --fault-lossy-spec: spawn(4)'s first three are spawn(3)'s,
        # so the tokens, acceptance and EOS are the same with the fault as without.
        # Two more for thinking (its length, the reasoning phase's acceptance): spawn(6)'s
        # first four are spawn(4)'s, so a thinking request draws the same tokens.
        children = np.random.SeedSequence(seed).spawn(6)
        token_seed, accept_seed, eos_seed, lossy_seed, think_seed, reasoning_seed = children
        self._lossy = params.lossy_spec if params.spec_tokens else 0.0
        self._lossy_rng = np.random.default_rng(lossy_seed) if self._lossy > 0 else None
        self._table = table
        self._token_rng = np.random.default_rng(token_seed)
        self._accept_rng = np.random.default_rng(accept_seed)
        self._acceptance = params.acceptance[: params.spec_tokens]
        self._fragments = params.fragment_fraction
        eos_at = eos_index(np.random.default_rng(eos_seed), params)
        self.num_tokens = params.max_tokens if eos_at is None else eos_at + 1
        self.finish_reason = "length" if eos_at is None else "stop"
        # Materialized prefixes; read them only after ensure_tokens/ensure_steps.
        self.token_ids: list[int] = []
        self.texts: list[str] = []
        self.accepted: list[int] = []
        # Thinking: the index of `</think>` in the output (None: it does not think, or its
        # reasoning runs past the output's end, cut by max_tokens or EOS)
        self.thinking = params.reasoning_mean is not None
        self.think_end: int | None = None
        if params.reasoning_mean is not None:
            length = draw_reasoning_length(think_seed, params.reasoning_mean)
            last = self.num_tokens - (self.finish_reason == "stop")  # EOS stays last
            self.think_end = length if length < last else None
        self._reasoning_acceptance = (
            None
            if params.reasoning_acceptance is None or not self.thinking
            else params.reasoning_acceptance[: params.spec_tokens]
        )
        self._reasoning_rng = np.random.default_rng(reasoning_seed)
        self._reasoning_accepted: list[int] = []
        self._reasoning_steps = self._answer_steps = 0

    def ensure_tokens(self, end: int) -> None:
        """Materialize tokens [0, end) (end <= num_tokens)."""
        while len(self.token_ids) < end:
            remaining = self.num_tokens - len(self.token_ids)
            block = min(TOKEN_BLOCK, remaining)
            last_block = block == remaining
            eos = last_block and self.finish_reason == "stop"
            ids, texts = self._table.generate(self._token_rng, block - eos, self._fragments)
            if eos:
                # EOS is generated and counted (as in vLLM) but, being special, streams no text.
                ids.append(self._table.eos_id)
                texts.append("")
            start = len(self.token_ids)
            self.token_ids.extend(ids)
            self.texts.extend(texts)
            boundary = self.think_end
            if boundary is not None and start <= boundary < len(self.token_ids):
                self.token_ids[boundary], self.texts[boundary] = THINK_END_ID, THINK_END_TEXT

    def accepted_at(self, step: int) -> int:
        """Accepted drafts at decode step `step` (0-based)."""
        while len(self.accepted) <= step:
            self.accepted.extend(draw_acceptance(self._accept_rng, ACCEPT_BLOCK, self._acceptance))
        return self.accepted[step]

    def accepted_for(self, step: int, emitted: int) -> int:
        """Accepted drafts of the decode step that starts at output token `emitted`: the
        reasoning phase's draws while it is in the reasoning (up to `</think>`), with
        their own acceptance when the phases differ; else `accepted_at`."""
        rates = self._reasoning_acceptance
        if rates is None:
            return self.accepted_at(step)
        end = self.think_end
        if end is None or emitted <= end:
            accepted = self._reasoning_accepted
            while len(accepted) <= self._reasoning_steps:
                accepted.extend(draw_acceptance(self._reasoning_rng, ACCEPT_BLOCK, rates))
            self._reasoning_steps += 1
            return accepted[self._reasoning_steps - 1]
        self._answer_steps += 1
        return self.accepted_at(self._answer_steps - 1)

    def corrupt_step(self, first: int, accepted: int) -> None:
        """--fault-lossy-spec: the decode step emitting tokens from `first` accepted
        `accepted` drafts; with the fault's probability its last accepted draft becomes
        another token (never the EOS: the length stays the target's). One draw per
        step that accepted any, so the corruption is a function of the seed alone."""
        rng = self._lossy_rng
        if rng is None or accepted <= 0:
            return
        if rng.random() >= self._lossy:
            return
        position = first + accepted - 1
        if position >= self.num_tokens - (self.finish_reason == "stop"):
            return
        self.ensure_tokens(position + 1)
        old = self.token_ids[position]
        for _ in range(8):  # a clean unit other than the one it replaces
            ids, texts = self._table.generate(rng, 1, 0.0)
            if ids[0] != old and texts[0] != self.texts[position]:
                self.token_ids[position], self.texts[position] = ids[0], texts[0]
                return

    def all_token_ids(self) -> list[int]:
        self.ensure_tokens(self.num_tokens)
        return self.token_ids


def make_plan(table: TokenTable, seed: int, params: PlanParams) -> RequestPlan:
    return RequestPlan(table, seed, params)


def script(
    plan: RequestPlan, ids: list[int], texts: list[str], eos_id: int, max_tokens: int
) -> None:
    """--answers: `plan` streams these tokens, then EOS (within its max_tokens), instead of
    drawn ones; its acceptance draws are kept."""
    ids, texts = [*ids, eos_id], [*texts, ""]
    plan.think_end, plan.thinking = None, False  # the script's own text says it all
    count = min(max_tokens, len(ids))
    plan.num_tokens = count
    plan.finish_reason = "stop" if count == len(ids) else "length"
    plan.token_ids, plan.texts = ids[:count], texts[:count]
