"""Sessions: sequences of turns, each turn sending the whole history so far (pure).

A `SessionTree` is what one concurrency lane plays: a root session and the subagent
sessions its turns spawn. Two kinds of turn exist:

- trace turns (`hash_ids`, exact `input_len`): rendered from cache blocks (blocks.py);
- message turns (`history_end`): the prompt is the session's conversation up to that
  message, rendered by the encoder (DeepSeek-V4: earlier reasoning dropped per its rules,
  tool calls and results in DSML, the effort prefix once) or sent as messages (chat).
  The assistant messages in the history are the recorded ones, so turn after turn the
  server sees the same prefix bytes and its prefix cache can hit.

Subagents spawned by turn r start when turn r ends (after their own first gap); turn
r + 1 of the parent waits until they have all finished.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from loadgen.config.dist import Dist

Kind = Literal["trace", "messages"]


@dataclass(frozen=True, slots=True)
class Turn:
    max_tokens: int
    gap_s: float  # wait after the session's previous turn ended (turn 0: after its spawn)
    input_len: int = 0  # trace turns: the exact prompt length
    hash_ids: tuple[int, ...] = ()  # trace turns: one per block
    history_end: int = 0  # message turns: the prompt is messages[:history_end]
    spawns: tuple[Session, ...] = ()  # subagents started when this turn ends


@dataclass(frozen=True, slots=True)
class Session:
    name: str  # "" for a root, "sa0", "sa0.sa1" for subagents
    turns: tuple[Turn, ...]
    messages: tuple[Mapping[str, Any], ...] = ()  # message sessions: the whole conversation

    def request_count(self) -> int:
        return len(self.turns) + sum(s.request_count() for t in self.turns for s in t.spawns)


@dataclass(frozen=True, slots=True)
class SessionTree:
    tree_id: str
    root: Session
    kind: Kind
    namespace: int = 0  # hash-id scope: equal ids in one namespace are equal blocks
    start_at_s: float | None = None  # fixed arrival (Mooncake) instead of lane order
    block_size: int = 64
    synthetic: bool = False  # pool words only: the marker replaces words, keeping lengths

    def request_count(self) -> int:
        return self.root.request_count()


@dataclass(frozen=True, slots=True)
class SyntheticSessions:
    """--turns and its companions: the shape of synthetic multi-turn sessions."""

    turns: Dist
    first_tokens: int  # content tokens of the first user message
    turn_tokens: Dist  # new user tokens per later turn
    output_tokens: Dist  # max_tokens per turn (and the recorded reply's length)
    think_time_s: Dist = field(default_factory=lambda: Dist("const", 0.0, integer=False))


def synthetic_trees(
    shape: SyntheticSessions, count: int, rng: np.random.Generator, words: Any
) -> list[SessionTree]:
    """`count` message sessions of pool words (one token each: exact content lengths).

    `words(n, rng)` returns n words as one string. Each later turn adds the recorded
    reply to the previous turn (output-length words) and a new user message.
    """
    trees = []
    for number in range(count):
        turns = max(1, int(shape.turns.draw(rng, 1)[0]))
        outputs = [max(1, int(v)) for v in shape.output_tokens.draw(rng, turns)]
        news = [max(1, int(v)) for v in shape.turn_tokens.draw(rng, turns)]
        gaps = shape.think_time_s.draw(rng, turns)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": words(max(1, shape.first_tokens), rng)}
        ]
        session_turns = []
        for index in range(turns):
            if index:
                messages.append({"role": "user", "content": words(news[index], rng)})
            session_turns.append(
                Turn(
                    max_tokens=outputs[index],
                    gap_s=gaps[index] if index else 0.0,
                    history_end=len(messages),
                )
            )
            messages.append({"role": "assistant", "content": words(outputs[index], rng)})
        root = Session("", tuple(session_turns), tuple(messages))
        trees.append(SessionTree(f"s{number:05d}", root, "messages", synthetic=True))
    return trees


def conversation_tree(
    tree_id: str, messages: Sequence[Mapping[str, Any]], max_tokens: Sequence[int]
) -> SessionTree | None:
    """A multi-turn dataset conversation: one turn per user (or tool-result) run that an
    assistant message answers or that ends the conversation; None if it has no user turn."""
    turns = []
    for index, message in enumerate(messages):
        role = message.get("role")
        following = messages[index + 1].get("role") if index + 1 < len(messages) else None
        if role in ("user", "tool", "developer") and following in (None, "assistant"):
            turns.append(index + 1)
    if not turns:
        return None
    session_turns = tuple(
        Turn(max_tokens=max_tokens[i % len(max_tokens)], gap_s=0.0, history_end=end)
        for i, end in enumerate(turns)
    )
    return SessionTree(tree_id, Session("", session_turns, tuple(messages)), "messages")
