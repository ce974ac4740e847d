"""One session turn -> a RequestSpec, rendered when it is sent (pure but for tokenizing).

Trace turns go through the block renderer (blocks.py); message turns through the encoder
(/v1/completions) or as messages (/v1/chat/completions). A play of a tree (one lane's run
of it) gets a cache-bust marker of its own before its first user turn, so a recycled
trace never finds the previous play's prefix in the server's cache.

With --live-history a message turn's request carries a `ReplyText` the client fills,
and the session's later turns render the replies collected so far (`live`: history
index -> reply) in place of the recorded assistant messages (reply.py).

Not thread-safe (block texts and the theoretical cache are shared
state): run/sessions.py renders on one worker thread, in the order turns become due.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from encoders import get_encoder
from loadgen.tokenizer import count_tokens
from loadgen.workload.blocks import MARKER_WORDS, BlockRenderer, BlockText, TheoreticalCache
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import SEED_BITS, RequestSpec
from loadgen.workload.prompts import user_template, word_pool
from loadgen.workload.reply import ReplyText, assistant_message
from loadgen.workload.sessions import Session, SessionTree, Turn

# Dynamo reads a subagent's parent from its own header beside its session id (the 1.4.2
# frontend's header names: x-dynamo-session-id, x-dynamo-parent-session-id): sent with
# X-Dynamo-Session-ID only, to the router that reads both.
DYNAMO_SESSION_HEADER = "x-dynamo-session-id"
DYNAMO_PARENT_HEADER = "X-Dynamo-Parent-Session-ID"


def session_key(tree_id: str, name: str) -> str:
    """A session's id: its tree's, then `::` and its name for a subagent (sa0, sa0.sa1)."""
    return tree_id + (f"::{name}" if name else "")


def session_headers(names: tuple[str, ...], tree_id: str, name: str) -> tuple[tuple[str, str], ...]:
    """The session id under each of `names`; a subagent's parent's id too where Dynamo's
    session header is among them (sa0.sa1's parent is sa0, sa0's the tree's root)."""
    headers = [(header, session_key(tree_id, name)) for header in names]
    if name and any(header.lower() == DYNAMO_SESSION_HEADER for header in names):
        headers.append((DYNAMO_PARENT_HEADER, session_key(tree_id, name.rpartition(".")[0])))
    return tuple(headers)


@dataclass(frozen=True, slots=True)
class RenderSettings:
    encoder: str
    thinking: str
    reasoning_effort: str | None
    session_headers: tuple[str, ...]  # header names that carry the session id
    cache_bust: bool
    live_history: bool = False  # message turns: history assistant turns are the replies


@dataclass(frozen=True, slots=True)
class Play:
    """One lane's run of one tree: its identity, marker and hash namespace."""

    tree: SessionTree
    tree_id: str  # unique per play: the tree's id, lane and play number
    marker: str  # cache-bust words ("" when off)
    namespace: int
    seed_key: tuple[int, ...] = ()  # (point, lane, play number): the same in every run


class SessionRenderer:
    def __init__(
        self,
        settings: RenderSettings,
        tokenizer: Tokenizer,
        options: BodyOptions,
        block_size: int,
        seed: int,
    ) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        self.options = options
        self.seed = seed
        template = user_template(
            encoder=settings.encoder,
            thinking_mode=settings.thinking,
            reasoning_effort=settings.reasoning_effort,
            tokenizer=tokenizer,
        )
        self.blocks = BlockText(word_pool(tokenizer), block_size)
        self.traces = BlockRenderer(self.blocks, template)
        self.theory = TheoreticalCache(block_size, template.suffix_tokens)
        self._encoder = get_encoder(settings.encoder)

    def play(self, tree: SessionTree, key: tuple[int, ...], label: str) -> Play:
        """A play of `tree`; `key` (run, point, lane, play number) seeds its marker."""
        marker = self.blocks.marker(key) if self.settings.cache_bust else ""
        namespace = tree.namespace
        if marker:  # a marked play shares no block with any other play
            namespace = zlib.crc32(marker.encode(), tree.namespace & 0xFFFFFFFF)
        return Play(tree, f"{label}:{tree.tree_id}", marker, namespace, key[1:])

    def _request_seed(self, play: Play, session: Session, turn_index: int, primer: bool) -> int:
        """A turn's sampling seed, from its identity: turns become due in an order that
        depends on the server's timing, so a shared stream would give a turn a different
        seed in each run of the same --seed."""
        identity = [
            self.seed,
            0x5E55,
            *play.seed_key,
            zlib.crc32(session.name.encode()),
            turn_index,
            int(primer),
        ]
        return int(np.random.default_rng(identity).integers(0, 1 << SEED_BITS))

    def render(
        self,
        play: Play,
        session: Session,
        turn_index: int,
        index: int,
        *,
        primer: bool = False,
        live: Mapping[int, ReplyText] | None = None,
    ) -> RequestSpec:
        turn = session.turns[turn_index]
        session_id = session_key(play.tree_id, session.name)
        headers = session_headers(self.settings.session_headers, play.tree_id, session.name)
        seed = self._request_seed(play, session, turn_index, primer)
        max_tokens = 1 if primer else turn.max_tokens
        reply = None
        if play.tree.kind == "trace":
            body, input_len, theoretical = self._trace_body(play, turn, max_tokens, seed)
        else:
            body, input_len = self._message_body(play, session, turn, max_tokens, seed, live or {})
            theoretical = None
            if self.settings.live_history and not primer:
                reply = ReplyText()
        return RequestSpec(
            index,
            input_len,
            max_tokens,
            body,
            session_id=session_id,
            turn_index=turn_index,
            tree_id=play.tree_id,
            headers=headers,
            theoretical_cached_tokens=theoretical,
            reply=reply,
        )

    def _trace_body(
        self, play: Play, turn: Turn, max_tokens: int, seed: int
    ) -> tuple[bytes, int, int]:
        prompt = self.traces.render(play.namespace, turn.hash_ids, turn.input_len, play.marker)
        theoretical = self.theory.observe(play.namespace, turn.hash_ids, turn.input_len)
        body = self.options.builder.body(
            self.options,
            text=prompt.text,
            messages=[{"role": "user", "content": prompt.content}],
            max_tokens=max_tokens,
            seed=seed,
        )
        return body, prompt.num_tokens, theoretical

    def _message_body(
        self,
        play: Play,
        session: Session,
        turn: Turn,
        max_tokens: int,
        seed: int,
        live: Mapping[int, ReplyText],
    ) -> tuple[bytes, int]:
        settings = self.settings
        history = session.messages[: turn.history_end]
        if live:
            history = tuple(
                assistant_message(
                    live[i],
                    builder=self.options.builder,
                    encoder=settings.encoder,
                    thinking=settings.thinking,
                )
                if i in live
                else message
                for i, message in enumerate(history)
            )
        messages = _with_marker(history, play.marker, replace=play.tree.synthetic)
        text = self._encoder.encode_messages(
            messages, settings.thinking, reasoning_effort=settings.reasoning_effort
        )
        input_len = count_tokens(self.tokenizer, text)
        body = self.options.builder.body(
            self.options, text=text, messages=messages, max_tokens=max_tokens, seed=seed
        )
        return body, input_len


def _with_marker(
    messages: tuple[Mapping[str, Any], ...], marker: str, *, replace: bool
) -> list[Mapping[str, Any]]:
    """The conversation with the play's marker before its first user message's content.

    Synthetic contents are pool words (" word" each, one token): there the marker takes
    the place of as many words, so the first turn keeps its exact --isl.
    """
    result = list(messages)
    if not marker:
        return result
    for position, message in enumerate(result):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            if replace and content.count(" ") > MARKER_WORDS:
                words = content.split(" ")[1 + MARKER_WORDS :]
                content = marker + "".join(" " + word for word in words)
            else:
                content = marker.lstrip() + " " + content
            result[position] = {**message, "content": content}
            break
    return result
