"""Parsing stamped bytes off the timing path, between socket polls, when reads pause.

Arrival stamps are taken in the protocol's data callback (transport.py, native/).
Everything after that -- HTTP de-chunking (native), SSE framing, JSON decoding, token
counting -- happens here, in one loop callback that drains the streams with new bytes
and then yields so the event loop polls its sockets. How much it drains per turn
depends on what the last poll found:
- a read arrived within the last `QUIET_NS` (a burst is being delivered): up to
  `BUSY_SLICE_NS` (at least one stream), so a read waits behind at most that much
  parsing, and a burst is stamped about at the pace of the reads alone, not of reads
  plus parsing (which together are slower than a fast server's writes: the last
  sockets of a 512-chunk burst waited milliseconds behind 200 us parsing slices);
- otherwise (between bursts) up to `SLICE_NS`: the bulk of the parsing happens there.
No task is woken per chunk: a request's coroutine wakes once, when its body ends,
and parses whatever the ingest has not yet.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Protocol

from loadgen.client.events import (
    MAX_TOKEN_COUNT,
    MalformedEvent,
    MetricsEvent,
    StreamEvent,
    TokenCounter,
    show,
)
from loadgen.client.fast_events import decode_event_fast as decode_event
from loadgen.client.outputs import OutputKeeper, content_sink
from loadgen.client.request_metrics import RequestMetrics
from loadgen.client.sse import ArrivalLog, SseFramer
from loadgen.records import ArrivalStamps, ErrorKind, SpecDecodeStats, StrayBytes, TokenSource
from loadgen.workload.reply import ReplyText

SLICE_NS = 50_000  # longest parsing run between two socket polls (a read may wait this long)
BUSY_SLICE_NS = 10_000  # the same while reads keep arriving (a poll per turn costs ~1.5 us)
QUIET_NS = 200_000  # no read for this long: between bursts (a burst's reads come us apart)
# No allowance over max_tokens: vLLM trims a speculative step's accepted tokens at
# max_tokens (and SGLang stops there), so a count above it is no server's truth; the old
# +64 let a server report up to 17x the tokens of a max_tokens=4 request.


class OutOfStep(MalformedEvent):
    """A response whose chunks' ids show it is not (only) this request's answer."""


class Taint:
    """Why a request's response may not be its own, learnt after it ended: its connection
    later got bytes no request asked for (client/native/protocol.py). Small on purpose:
    the connection keeps it, not the request's Exchange, for a while after the request."""

    __slots__ = ("then", "why")

    def __init__(self) -> None:
        self.why = ""
        self.then: Callable[[str], None] | None = None  # told once the record was handed on

    def __call__(self, why: str) -> None:
        if not self.why:
            self.why = why
            if self.then is not None:
                self.then(why)


class Exchange:
    """Mutable state of one request in flight; becomes a frozen RequestRecord at the end."""

    __slots__ = (
        "arrival_stamps",
        "cached_tokens",
        "chunk_ns",
        "chunk_tokens",
        "completion_tokens",
        "detail",
        "done",
        "end_ns",
        "error",
        "finish_reason",
        "in_reasoning",
        "max_tokens",
        "phase_marks",
        "previous_id",
        "prompt_tokens",
        "response_id",
        "server_metrics",
        "sink",
        "status",
        "stray_bytes",
        "taint",
        "textless_phase_chunks",
        "token_cap",
    )

    def __init__(
        self,
        max_tokens: int | None = None,
        reply: ReplyText | None = None,
        keeper: OutputKeeper | None = None,
    ) -> None:
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.finish_reason: str | None = None
        self.status: int | None = None
        self.error: ErrorKind | None = None
        self.detail = ""
        self.done = False  # [DONE] or an error event arrived: later events are ignored
        self.end_ns = 0
        self.max_tokens = max_tokens  # the request's cap (None: unknown)
        # The most completion tokens the server can truthfully report for this request.
        self.token_cap = MAX_TOKEN_COUNT if max_tokens is None else max_tokens
        # Where every event goes besides the counts: --live-history's reply text,
        # --record-outputs' keeper; None (the default) keeps nothing and costs one check
        self.sink = content_sink(reply, keeper)
        if keeper is not None:
            keeper.watch(self.chunk_ns)
        self.arrival_stamps = ArrivalStamps.READ  # the client says KERNEL when they were
        self.stray_bytes: StrayBytes | None = None  # the native client saw bytes of no request
        self.server_metrics: RequestMetrics = (None, None)  # vLLM's per-request `metrics`
        # The native client's mark, kept by the connection after the exchange (protocol.py)
        self.taint = Taint()
        # The id of this response's first chunk that had one, and (native client) of the
        # previous response on its connection: a response is its request's own only if
        # every chunk carries the one id, and not the previous response's
        self.response_id: str | None = None
        self.previous_id: str | None = None
        # Which field the last text came in (chat's content or reasoning), and the chunk
        # indices where that changed (RequestRecord.phase_marks): one comparison per
        # token-bearing chunk, the work only where the field changes (metrics/phases.py)
        self.in_reasoning: bool | None = None  # None: no text yet
        self.phase_marks: list[int] = []
        self.textless_phase_chunks = 0

    def body_ended(self, last_stamp: int | None, cut: bool) -> None:
        """The body is over (either client): without [DONE] or an error event the stream
        was cut short; `cut` says an unterminated last event was discarded."""
        if not self.done:
            self.end_ns = last_stamp or perf_counter_ns()
            self.fail(
                ErrorKind.DISCONNECT,
                "the stream ended without data: [DONE]"
                + (
                    " (inside an event no blank line ended: discarded, as the SSE standard says)"
                    if cut
                    else ""
                ),
            )

    def fail(self, kind: ErrorKind, detail: str) -> None:
        if self.error is None:  # the first failure is the cause; later ones are echoes
            self.error, self.detail = kind, detail[:500]

    def on_event(self, event: StreamEvent, stamp: int, counter: TokenCounter) -> None:
        # One unpacking instead of a NamedTuple attribute lookup per field (per event).
        (
            done,
            _,
            _,
            _,
            text,
            completion,
            prompt,
            finish_reason,
            error,
            cached,
            reasoning,
            _,
            chunk_id,
        ) = event
        if done:
            self.done, self.end_ns = True, stamp
            return
        if error is not None:
            self.fail(ErrorKind.SERVER_ERROR, error)
            self.done, self.end_ns = True, stamp
            return
        # the one check per event: unequal at the first id, or out of step
        if chunk_id != self.response_id:
            self._other_id(chunk_id)
        if prompt is not None:
            self.prompt_tokens = prompt
        if completion is not None:
            if completion > self.token_cap:  # never stored: it is not a count
                self.impossible("usage.completion_tokens", completion, stamp)
                return
            self.completion_tokens = completion
        if cached is not None:
            self.cached_tokens = cached
        if finish_reason is not None:
            self.finish_reason = finish_reason
        sink = self.sink
        if sink is not None:
            sink.take(event)
        tokens = counter.count(event)
        if tokens > 0:
            if reasoning is not self.in_reasoning:
                self._field_changed(text, reasoning)
            self.chunk_ns.append(stamp)
            self.chunk_tokens.append(tokens)
        elif type(event) is MetricsEvent:  # once per request, on its final usage chunk
            self.server_metrics = event.metrics

    def _field_changed(self, text: str, reasoning: bool) -> None:
        """A token-bearing delta in the other field than the last text's (or the first):
        the phase changes here, unless it carried no text (then it keeps the phase it
        came in, counted once there is one). Chunks before the first text take its phase."""
        if not text:
            if self.in_reasoning is not None:
                self.textless_phase_chunks += 1
            return
        if self.in_reasoning is None:
            if reasoning:
                self.phase_marks.append(0)
        else:
            self.phase_marks.append(len(self.chunk_ns))
        self.in_reasoning = reasoning

    def _other_id(self, chunk_id: str | None) -> None:
        """A chunk whose id is not the response's so far: the first id (the response's,
        which must not be the previous response's on the connection), an event without
        one (nothing said), or another id. Raises OutOfStep: the body stops there and its
        connection closes (body.py), so nothing later on it is taken as an answer either."""
        first = self.response_id
        if not first:
            self.response_id = chunk_id
            if chunk_id and chunk_id == self.previous_id:
                raise OutOfStep(
                    f"the response's chunks carry the id {show(chunk_id)} of the previous "
                    "response on its connection: a copy of that answer, out of step (a stale "
                    "response taken as this request's)"
                )
        elif chunk_id:
            raise OutOfStep(
                f"the response's chunk id changed from {show(first)} to {show(chunk_id)}: "
                "parts of two answers, out of step"
            )

    def impossible(self, what: str, tokens: int, stamp: int) -> None:
        """More completion tokens than the request allowed: malformed, and nothing after
        it counts (a count like this must never reach a published throughput)."""
        self.fail(
            ErrorKind.MALFORMED,
            f"{what} is {tokens}, more than max_tokens {self.max_tokens} allows",
        )
        self.done, self.end_ns = True, self.end_ns or stamp

    def check_counts(
        self,
        counter: TokenCounter,
        spec_tokens: int | None = None,
        server_spec_tokens: int | None = None,
    ) -> None:
        """Once per request, at its end (nothing here costs per chunk): the counts the
        server reported must agree with each other, or none of them is published.
        `spec_tokens`: the run's K (--spec-tokens); `server_spec_tokens`: the K the
        server's /metrics report; the server's per-request stats must have each."""
        if self.error is not None:
            return
        total = sum(self.chunk_tokens)
        if total > self.token_cap:
            self.impossible("the sum of chunk token counts", total, self.end_ns)
            return
        problem = _count_lie(self.completion_tokens, total, counter) or _spec_lie(
            self.server_metrics[0],
            total if self.completion_tokens is None else self.completion_tokens,
            spec_tokens,
            server_spec_tokens,
        )
        if problem:
            self.fail(ErrorKind.MALFORMED, problem)


def _count_lie(usage: int | None, chunk_total: int, counter: TokenCounter) -> str:
    """Why the request's counts contradict each other ("" when they do not)."""
    if counter.decrease is not None:
        before, after = counter.decrease
        return (
            f"usage.completion_tokens went down from {before} to {after}: a cumulative "
            "count never decreases"
        )
    if usage is None:
        return ""
    if usage == 0 and chunk_total > 0:
        return f"usage.completion_tokens is 0 after chunks carrying {chunk_total} tokens"
    if counter.source is TokenSource.TOKEN_IDS and chunk_total and usage != chunk_total:
        return (
            f"usage.completion_tokens is {usage}, but the chunks' token_ids hold "
            f"{chunk_total} tokens"
        )
    return ""


def _spec_lie(
    spec: SpecDecodeStats | None,
    tokens: int,
    spec_tokens: int | None,
    server_spec_tokens: int | None,
) -> str:
    """Why the server's per-request spec-decode stats cannot be this request's ("" when
    they can): each verify step emits its accepted drafts and one token of its own, so
    steps + accepted drafts never exceed the tokens the request produced (100 steps
    claimed for an 8-token answer published AL 3.0) -- but for the last step's drafts,
    up to K, which vLLM counts before max_tokens or a stop cuts them; and every step
    drafts K: the server's, as its /metrics report it, and the run's (--spec-tokens)."""
    if spec is None:
        return ""
    where = "metrics.speculative_decoding"
    emitted = spec.num_spec_steps + spec.num_accepted_draft_tokens
    if emitted > tokens + spec.num_spec_tokens:
        return (
            f"{where}: {spec.num_spec_steps} verify steps and "
            f"{spec.num_accepted_draft_tokens} accepted drafts emit {emitted} tokens, "
            f"more than the {tokens} the request produced (+ K={spec.num_spec_tokens} "
            "the last step may have cut)"
        )
    if server_spec_tokens and spec.num_spec_tokens != server_spec_tokens:
        return (
            f"{where}: num_spec_tokens {spec.num_spec_tokens}, but the server's K "
            f"(num_speculative_tokens, from its /metrics) is {server_spec_tokens}"
        )
    if spec_tokens and spec.num_spec_tokens != spec_tokens:
        return (
            f"{where}: num_spec_tokens {spec.num_spec_tokens}, but the run's K "
            f"(--spec-tokens) is {spec_tokens}"
        )
    return ""


class BodySource(Protocol):
    """Where a body's received bytes wait (aiohttp's StreamReader, the native Response)."""

    def read_nowait(self) -> bytes: ...


class Drainable(Protocol):
    """A body the ingest parses: BodyStream, or the native client's EventStream."""

    queued: bool

    def drain(self) -> None: ...


class BodyStream:
    """One streamed response body: its stamped bytes and parse state.

    The ingest parses it progressively (`drain`, never raises); the request's coroutine
    calls `finish` once the body has ended, which parses the rest and raises the
    connection or parse error, if any, for the transport to classify.
    """

    __slots__ = (
        "_ingest",
        "_stop",
        "closed",
        "content",
        "counter",
        "error",
        "framer",
        "log",
        "queued",
        "state",
    )

    def __init__(
        self,
        content: BodySource,
        log: ArrivalLog,
        state: Exchange,
        counter: TokenCounter,
        ingest: Ingest,
        stop: Callable[[Exception], None] | None = None,
    ) -> None:
        self.content = content
        self._stop = stop  # ends the body now (and closes its connection) on a parse error
        self.log = log
        self.state = state
        self.counter = counter
        self.framer = SseFramer()
        self.error: Exception | None = None
        self.queued = False
        self.closed = False
        self._ingest = ingest

    def wake(self, lost: bool = False) -> None:
        """Called by the protocol on every read; on connection loss, salvage bytes now."""
        if lost:
            self.drain()  # before aiohttp replaces the buffered bytes with an exception
        else:
            self._ingest.notify(self)

    def drain(self) -> None:
        if self.closed or self.error is not None:
            return
        try:
            data = self.content.read_nowait()
            if data:
                self._parse(data)
        except Exception as exc:  # kept for finish(): the transport classifies it
            self.error = exc
            if self._stop is not None:  # nothing after it counts: read no further
                self._stop(exc)

    def _parse(self, data: bytes) -> None:
        events = self.framer.feed(data)  # always: the framer keeps its place in the body
        state, log, counter = self.state, self.log, self.counter
        for offset, payload in events:
            if state.done:  # nothing after [DONE] or an error event counts
                break
            state.on_event(decode_event(payload), log.stamp_of(offset), counter)

    def finish(self) -> None:
        """The body ended: parse the rest; raise its error or record a missing [DONE]."""
        self.drain()
        self.closed = True
        if self.error is not None:
            raise self.error
        cut = self.framer.close()  # an unterminated last event is discarded (WHATWG)
        self.state.body_ended(self.log.last_stamp(), cut)


class Ingest:
    """Round-robin parsing of every stream that has new bytes, paced by the reads."""

    def __init__(self, slice_ns: int = SLICE_NS, busy_slice_ns: int = BUSY_SLICE_NS) -> None:
        self.slice_ns = slice_ns
        self.busy_slice_ns = busy_slice_ns
        # When the loop last read (the protocols set it per read): not a kernel arrival
        # stamp, which says nothing of whether reads are still coming in.
        self.last_read_ns = 0
        self._ready: deque[Drainable] = deque()
        self._scheduled = False
        # The loop, kept from the first read: asyncio.get_running_loop() makes a getpid()
        # system call each time, and a busy burst reschedules the ingest every 10 us.
        self._loop: asyncio.AbstractEventLoop | None = None

    def notify(self, stream: Drainable, read_ns: int = 0) -> None:
        self.last_read_ns = read_ns or perf_counter_ns()
        if stream.queued:
            return
        stream.queued = True
        self._ready.append(stream)
        if not self._scheduled:
            self._scheduled = True
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        ready = self._ready
        now = perf_counter_ns()
        busy = now - self.last_read_ns < QUIET_NS
        deadline = now + (self.busy_slice_ns if busy else self.slice_ns)
        try:
            while ready:
                stream = ready.popleft()
                stream.queued = False
                stream.drain()
                if perf_counter_ns() > deadline:
                    break
        finally:
            # Also when a drain raised (a bug: drains keep failures as values): the
            # streams behind it are still parsed, next turn (a `try` costs nothing here).
            if ready:  # yield: the loop polls its sockets (and stamps) before the next turn
                self._scheduled = True
                assert self._loop is not None  # _run is only ever scheduled by notify
                self._loop.call_soon(self._run)


class StartPacer:
    """At most `per_turn` requests start (or are recorded) per event-loop turn.

    Starting a request costs aiohttp ~100 us of CPU; when hundreds of slots free up at
    once (a wave of requests ending in the same engine step), starting them all in one
    loop turn would stop socket polling for tens of ms and stamp every arrival in that
    window late. Paced, the loop polls (and stamps) between every `per_turn` starts.
    A request's clock starts at its write, so the wait here is queue time.
    """

    def __init__(self, per_turn: int = 2) -> None:
        self.per_turn = per_turn
        self._budget = per_turn
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._scheduled = False

    async def turn(self) -> None:
        if self._budget > 0 and not self._waiting:
            self._budget -= 1
            self._arm()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._arm()
        await waiter

    def _arm(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._refill)

    def _refill(self) -> None:
        self._scheduled = False
        self._budget = self.per_turn
        waiting = self._waiting
        while self._budget > 0 and waiting:
            waiter = waiting.popleft()
            if not waiter.done():  # a cancelled request gave its turn up
                self._budget -= 1
                waiter.set_result(None)
        if waiting or self._budget < self.per_turn:
            self._arm()
