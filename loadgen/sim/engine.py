"""The engine model: continuous batching, chunked prefill, a step-time model and MTP.

Each step: schedule (running requests first -- decodes take 1+K tokens, unfinished
prefills take what budget is left -- then admit waiting requests while there are free
sequence slots and token budget), compute the step's duration from the tokens it
computes, build every chunk's bytes, sleep until the step's absolute deadline, then write
all chunks back to back. Deadlines chain (next start = this deadline), so the schedule
never drifts; lateness = actual send - intended send is recorded per chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loadgen.sim.accounting import Accounting
from loadgen.sim.config import SimConfig
from loadgen.sim.power import PowerModel
from loadgen.sim.prefix_cache import PrefixCache
from loadgen.sim.profiler import SimProfiler
from loadgen.sim.request import EngineRequest
from loadgen.sim.request_metrics import metrics_json, sglext_json
from loadgen.sim.steplog import StepLog
from loadgen.sim.thinking import split_texts
from loadgen.sim.wire import http_chunk, malformed_event

log = logging.getLogger("loadgen.sim")
BEHIND_WARN_NS = 50_000_000  # the simulator itself is now the bottleneck
WARN_EVERY_NS = 5_000_000_000

DECODE = -1  # a batch entry is (request, prefill chunk size) or (request, DECODE)


@dataclass(slots=True)
class Batch:
    entries: list[tuple[EngineRequest, int]] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    # filled by _advance: requests whose prompt finished this step, tokens produced
    prefill_done: list[str | None] = field(default_factory=list)
    produced: int = 0


@dataclass(slots=True)
class Send:
    request: EngineRequest
    data: bytes
    tokens: int
    then: str | None = None  # "abort" | "stall" | "finish"


def step_ns(config: SimConfig, prefill_tokens: int, decode_tokens: int, seqs: int) -> int:
    """The step-time model (see SimConfig): fixed + per-token + per-sequence costs."""
    micros = (
        config.step_fixed_ms * 1000.0
        + prefill_tokens * config.prefill_token_us
        + decode_tokens * config.decode_token_us
        + seqs * config.seq_us
    )
    return int(micros * 1000.0)


class Engine:
    def __init__(
        self,
        config: SimConfig,
        accounting: Accounting,
        clock: Callable[[], int] = time.perf_counter_ns,
        *,
        index: int = 0,
        step_log: StepLog | None = None,
    ) -> None:
        self.config = config
        self.accounting = accounting
        self.clock = clock
        self.index = index  # its data-parallel rank (sim/dp.py)
        self.step_log = step_log
        self._steps = 0
        # the engines whose queues the running/waiting gauges sum (all DP ranks)
        self.group: Sequence[Engine] = (self,)
        self.power = PowerModel(config.power, clock)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._decode_width = config.spec_tokens + 1
        self._spin_ns = int(config.spin_us * 1000)
        self._last_warning_ns = 0
        self.prefix_cache = (
            PrefixCache(config.block_size, config.cache_blocks)
            if config.enable_prefix_caching
            else None
        )
        # --profiler-dir: the open profiling session sees every step (sim/profiler.py)
        self.profiler = SimProfiler(config.profiler_dir) if config.profiler_dir else None

    def submit(self, request: EngineRequest) -> None:
        if self._stopping:  # stopped, or crashed: never leave a handler waiting forever
            request.finish_reason = "abort"
            request.done.set_result("abort")
            return
        level = self.config.per_request_spec_decode_metrics
        wanted = level != "none" or request.spec_details
        if wanted and self.config.mtp:  # vLLM tracks it from the request's arrival
            request.spec_histogram = [0] * self._decode_width
            request.spec_steps = [] if level == "detailed" else None
        self.waiting.append(request)
        self._wake.set()

    def reset_prefix_cache(self) -> bool:
        """vLLM's BlockPool.reset_prefix_cache: refused (False) while any request holds
        blocks (scheduled, not yet finished), else every cached block forgotten. Waiting
        requests hold none yet; they look the emptied pool up when scheduled."""
        if self.running:
            return False
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        return True

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        start = self.clock()
        try:
            while not self._stopping:
                batch = self._schedule(start)
                if not batch.entries:
                    await self._idle()
                    start = self.clock()
                    continue
                deadline = start + step_ns(
                    self.config, batch.prefill_tokens, batch.decode_tokens, len(batch.entries)
                )
                self.power.step(start, deadline, batch.prefill_tokens, batch.decode_tokens)
                if self.profiler is not None and self.profiler.active:
                    self.profiler.step(start, deadline, [r.x_request_id for r, _ in batch.entries])
                sends = self._advance(batch, deadline)
                await self._sleep_until(deadline)
                self._warn_if_behind(deadline)
                sending = self.clock()
                self._send(sends, deadline)
                if self.step_log is not None:
                    self._log_step(batch, start, deadline, sending, len(sends))
                self._retire(deadline)
                start = self._next_start(deadline)
        finally:
            self._stopping = True
            self._abort_all()

    def _next_start(self, deadline: int) -> int:
        """The next step starts where this one was due to end: the schedule never drifts
        (a late send is the simulator's lateness, recorded per chunk)."""
        return deadline

    def _log_step(self, batch: Batch, start: int, end: int, sending: int, chunks: int) -> None:
        assert self.step_log is not None
        decode_requests = sum(1 for _, prefill in batch.entries if prefill == DECODE)
        self.step_log.write(
            {
                "engine": self.index,
                "step": self._steps,
                "start_ns": start,
                "end_ns": end,
                "sent_ns": sending,
                "sent_end_ns": self.clock(),
                "requests": len(batch.entries),
                "decode_requests": decode_requests,
                "decode_tokens": batch.decode_tokens,
                "output_tokens": batch.produced,
                "prefill_tokens": batch.prefill_tokens,
                "chunks": chunks,
                "prefill_done": batch.prefill_done,
            }
        )
        self._steps += 1

    def _gauges(self) -> None:
        group = self.group
        if len(group) == 1:
            self.accounting.gauges(self.running, self.waiting)
        else:
            running = [r for engine in group for r in engine.running]
            self.accounting.gauges(running, [r for engine in group for r in engine.waiting])

    async def _idle(self) -> None:
        """Nothing schedulable: wait for a submission or for the earliest stall to end."""
        self._gauges()
        self._wake.clear()
        stalls = [r.stall_until_ns for r in self.running if r.stall_until_ns]
        timeout = None
        if stalls:
            timeout = max(0.0, (min(stalls) - self.clock()) / 1e9)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _warn_if_behind(self, deadline: int) -> None:
        now = self.clock()
        if now - deadline > BEHIND_WARN_NS and now - self._last_warning_ns > WARN_EVERY_NS:
            self._last_warning_ns = now
            log.warning(
                "loadgen sim: %.0f ms behind its step schedule (CPU-starved?): "
                "sends are late; the trace records by how much",
                (now - deadline) / 1e6,
            )

    async def _sleep_until(self, deadline: int) -> None:
        # Timers fire up to ~1 ms late (ms-grained epoll/libuv), so sleep short and spin.
        delay = deadline - self.clock() - self._spin_ns
        await asyncio.sleep(delay / 1e9 if delay > 0 else 0)
        clock = self.clock
        if len(self.group) > 1:
            # data parallel: the engines share one loop, so a spin yields to the others
            # (a busy wait to a deadline no event marks: timers are ms-grained)
            while clock() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0)
            return
        while clock() < deadline:
            pass

    def _schedule(self, now: int) -> Batch:
        batch = Batch()
        budget = self.config.max_num_batched_tokens
        width = self._decode_width
        for request in self.running:
            if request.stall_until_ns:
                if request.stall_until_ns > now:
                    continue
                request.stall_until_ns = 0
            remaining = request.prefill_remaining
            if remaining > 0:
                take = min(remaining, budget)
                if take > 0:
                    batch.entries.append((request, take))
                    batch.prefill_tokens += take
                    budget -= take
                    self._cache_blocks(request, request.prefilled + take)
            elif budget >= width:
                batch.entries.append((request, DECODE))
                batch.decode_tokens += width
                budget -= width
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting.popleft()
            request.first_sched_ns = now
            self._lookup_prefix(request)
            self.running.append(request)
            take = min(request.prefill_remaining, budget)
            batch.entries.append((request, take))
            batch.prefill_tokens += take
            budget -= take
            self._cache_blocks(request, request.prefilled + take)
        return batch

    def _lookup_prefix(self, request: EngineRequest) -> None:
        """First scheduling: the cached prefix is not prefilled (vLLM's num_cached_tokens)."""
        cache, hashes = self.prefix_cache, request.block_hashes
        if cache is None or hashes is None:
            # No cache: vLLM's counters still see the lookup, and every token misses.
            self.accounting.prefix_cache(request.prompt_len, 0)
            return
        cached = cache.lookup(hashes, request.prompt_len)
        request.cached_tokens = request.prefilled = cached
        request.blocks_cached = cached // cache.block_size
        self.accounting.prefix_cache(request.prompt_len, cached)

    def _cache_blocks(self, request: EngineRequest, computed: int) -> None:
        """Blocks full once this step's prefill chunk is computed enter the pool now."""
        cache, hashes = self.prefix_cache, request.block_hashes
        if cache is None or hashes is None:
            return
        full = min(computed // cache.block_size, len(hashes))
        if full > request.blocks_cached:
            cache.insert(hashes, request.blocks_cached, full)
            request.blocks_cached = full

    def _advance(self, batch: Batch, deadline: int) -> list[Send]:
        """Apply the step to every scheduled request; return the chunks to send at deadline."""
        sends: list[Send] = []
        produced_total = drafts = 0
        accepted_histogram = [0] * self._decode_width
        interval = self.config.stream_interval
        merge_prob = self.config.merge_steps_prob
        for request, prefill in batch.entries:
            if prefill != DECODE:
                request.prefilled += prefill
                if request.prefilled < request.prompt_len:
                    continue
                produced = 1
                request.first_token_ns = deadline
                batch.prefill_done.append(request.x_request_id)
                self.accounting.prompt_done(request)
            else:
                plan = request.plan
                accepted = plan.accepted_for(request.decode_steps, request.emitted)
                request.decode_steps += 1
                drafts += 1
                accepted_histogram[accepted] += 1
                if request.spec_histogram is not None:  # only when reported per request
                    request.spec_histogram[accepted] += 1
                    if request.spec_steps is not None:
                        request.spec_steps.append(accepted)
                produced = min(1 + accepted, plan.num_tokens - request.emitted)
                plan.corrupt_step(request.emitted, min(accepted, produced))
                request.steps_since_send += 1
            request.emitted += produced
            request.last_token_ns = deadline
            produced_total += produced
            finished = request.emitted == request.plan.num_tokens
            if prefill == DECODE and not finished and request.steps_since_send < interval:
                continue
            merge = request.merge_draw
            if merge is not None and not finished and merge() < merge_prob:
                request.merged_steps.append(deadline)  # sent with the next step's event
                continue
            request.steps_since_send = 0
            sends.append(self._chunk(request, finished))
        batch.produced = produced_total
        self.accounting.step(
            self.index, batch.prefill_tokens, produced_total, drafts, accepted_histogram
        )
        return sends

    def _chunk(self, request: EngineRequest, finished: bool) -> Send:
        start, end = request.sent, request.emitted
        request.sent = end
        plan = request.plan
        if end > len(plan.token_ids):
            plan.ensure_tokens(end)
        fmt = request.fmt
        split = None
        if fmt is not None and fmt.parses_reasoning:  # a thinking chat request, parsed
            split = split_texts(plan.texts[start:end], start, end, plan.think_end)
        middle = fmt is not None and start and not finished and fmt.plain
        # all content, or all reasoning: the hot path's frame
        if middle and not request.has_faults and (split is None or split[1] is None):
            assert fmt is not None
            text = "".join(plan.texts[start:end]) if split is None else split[0]
            return Send(
                request,
                fmt.middle_frame(plan.token_ids[start:end], text, end, split is not None),
                end - start,
            )
        send = Send(request, b"", end - start, "finish" if finished else None)
        if fmt is None:
            return send
        # vLLM writes every SSE event as its own HTTP chunk (role, content, usage, [DONE]).
        events = [fmt.role_event()] if start == 0 and fmt.chat else []
        faults = request.faults
        if faults.malformed_at_token is not None and start < faults.malformed_at_token <= end:
            events.append(malformed_event("cmpl-malformed"))
        else:
            events.append(
                fmt.content_event(
                    plan.token_ids[start:end],
                    plan.texts[start:end],
                    end,
                    plan.finish_reason if finished else None,
                    start == 0,
                    split,
                )
            )
        if finished:
            cached = request.cached_tokens if self.config.enable_prompt_tokens_details else None
            config = self.config
            metrics = metrics_json(
                request,
                end,
                timings=config.enable_per_request_metrics,
                spec_tokens=config.spec_tokens,
            )
            sglext = sglext_json(request, end) if request.spec_details else None
            events.extend(fmt.final_events(end, cached, metrics, sglext))
        elif faults.abort_at_token is not None and start < faults.abort_at_token <= end:
            send.then = "abort"
        elif faults.stall_at_token is not None and start < faults.stall_at_token <= end:
            send.then = "stall"
        send.data = b"".join([http_chunk(event) for event in events])
        return send

    def _send(self, sends: list[Send], intended: int) -> None:
        clock = self.clock
        for send in sends:
            request = send.request
            sink = request.sink
            if sink is None:
                request.chunks.append((intended, intended, send.tokens))
            elif request.finish_reason is None:
                try:
                    sink.write(send.data)
                except (RuntimeError, ConnectionError):  # uvloop: the transport is closed
                    request.finish_reason = "abort"
                    continue
                request.chunks.append((intended, clock(), send.tokens))
            then = send.then
            if then is None:
                continue
            if then == "finish":
                request.finish_reason = request.finish_reason or request.plan.finish_reason
            elif then == "abort" and sink is not None:
                sink.close()
                request.finish_reason = "abort"
            elif then == "stall":
                request.stall_until_ns = intended + int(self.config.faults.stall_seconds * 1e9)

    def _retire(self, now: int) -> None:
        """Drop finished requests (and streams whose client left) from the batch."""
        keep: list[EngineRequest] = []
        for request in self.running:
            sink = request.sink
            if request.finish_reason is None and sink is not None and not sink.is_open():
                request.finish_reason = "abort"
            if request.finish_reason is None:
                keep.append(request)
            else:
                self._finish(request, now)
        self.running = keep
        self._gauges()

    def _finish(self, request: EngineRequest, now: int) -> None:
        self.accounting.finished(request, now)
        if not request.done.done():
            request.done.set_result(request.finish_reason or "abort")

    def cancel(self, request: EngineRequest) -> None:
        """The handler went away before its request finished (e.g. server shutdown)."""
        if request.finish_reason is None:
            request.finish_reason = "abort"
            if request in self.waiting:
                self.waiting.remove(request)
                self._finish(request, self.clock())

    def _abort_all(self) -> None:
        now = self.clock()
        for request in [*self.running, *self.waiting]:
            if request.finish_reason is None:
                request.finish_reason = "abort"
                if request.sink is not None:
                    request.sink.close()
            self._finish(request, now)
        self.running = []
        self.waiting.clear()
