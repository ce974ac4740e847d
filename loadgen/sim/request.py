"""One generation request as the engine sees it, and where its bytes go (a Sink)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from loadgen.sim.faults import NO_FAULTS, RequestFaults
from loadgen.sim.plan import RequestPlan
from loadgen.sim.wire import StreamFormat


class Sink(Protocol):
    """The client connection of a streamed request."""

    @property
    def write(self) -> Callable[[bytes], None]:
        """The transport's own write: the hot path calls it with no Python frame between."""
        ...

    def close(self) -> None:
        """Drop the connection (the abort fault)."""
        ...

    def is_open(self) -> bool: ...


class TransportSink:
    """Writes straight to the asyncio transport: no coroutine or task per chunk.

    The handler has already sent the headers of a chunked response (aiohttp's
    StreamResponse.prepare); data given here is already framed as HTTP chunks, exactly
    as aiohttp would frame it, so aiohttp's own write_eof() can end the body afterwards.
    Writing to a transport that is closing drops the data (asyncio) or raises
    (uvloop, once closed); the engine treats both as the client having left.
    """

    __slots__ = ("_transport", "write")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.write = transport.write

    def close(self) -> None:
        self._transport.close()

    def is_open(self) -> bool:
        return not self._transport.is_closing()


@dataclass(slots=True, eq=False)
class EngineRequest:
    index: int
    x_request_id: str | None
    prompt_len: int
    max_tokens: int
    plan: RequestPlan
    arrival_ns: int
    done: asyncio.Future[str]
    # Streamed requests have both; non-streamed requests have neither.
    fmt: StreamFormat | None = None
    sink: Sink | None = None
    faults: RequestFaults = NO_FAULTS
    has_faults: bool = False
    prefilled: int = 0
    emitted: int = 0  # tokens the engine has produced
    sent: int = 0  # tokens already put into chunks
    decode_steps: int = 0
    steps_since_send: int = 0
    first_sched_ns: int = 0
    first_token_ns: int = 0
    last_token_ns: int = 0
    stall_until_ns: int = 0
    finish_reason: str | None = None
    # --merge-steps-prob: the request's own uniform draws (None when off).
    merge_draw: Callable[[], float] | None = None
    # Prefix caching: the prompt's chained block hashes (None when caching is off), the
    # prompt tokens found cached when first scheduled, and how many blocks are in the pool.
    block_hashes: list[int] | None = None
    cached_tokens: int = 0
    blocks_cached: int = 0
    # --per-request-spec-decode-metrics: verify steps per accepted-draft count, and with
    # `detailed` each step's accepted drafts in order (None: not reported)
    spec_histogram: list[int] | None = None
    spec_steps: list[int] | None = None
    # SGLang's "return_spec_tokens_details": true (with --engine sglang): sglext at the end
    spec_details: bool = False
    # (intended_ns, sent_ns, tokens) per token-bearing chunk.
    chunks: list[tuple[int, int, int]] = field(default_factory=list)
    # Step ends whose output was merged into a later chunk (still one ITL each, as vLLM).
    merged_steps: list[int] = field(default_factory=list)

    @property
    def prefill_remaining(self) -> int:
        return self.prompt_len - self.prefilled

    @property
    def context_tokens(self) -> int:
        return self.prefilled + self.emitted
