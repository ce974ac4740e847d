"""Bookkeeping off the send path: Prometheus instruments and the trace, per step and request.

Engine-side times are the intended (model) times, as vLLM's engine stamps its own
outputs: TTFT = first token's step end - arrival, ITL = gaps between a request's chunks
(and steps whose output the frontend lag model merged into a later chunk: vLLM's engine
observes ITL per step, before its frontend merges).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from loadgen.sim.metrics import SimMetrics
from loadgen.sim.request import EngineRequest
from loadgen.sim.trace import TraceWriter

NS = 1e-9


class Accounting:
    def __init__(
        self, metrics: SimMetrics, trace: TraceWriter | None, kv_cache_tokens: int
    ) -> None:
        self.metrics = metrics
        self.trace = trace
        self._kv_tokens = kv_cache_tokens
        self._mtp = metrics.spec_tokens > 0

    def admitted(self, max_tokens: int) -> None:
        m = self.metrics
        m.params_n.observe(1)
        m.params_max_tokens.observe(max_tokens)
        m.max_generation_tokens.observe(max_tokens)

    def prefix_cache(self, queried: int, hits: int) -> None:
        m = self.metrics
        m.prefix_cache_queries.inc(queried)
        if hits:
            m.prefix_cache_hits.inc(hits)

    def prompt_done(self, request: EngineRequest) -> None:
        self.metrics.prompt_tokens.inc(request.prompt_len)

    def step(
        self,
        engine: int,
        prefill_tokens: int,
        produced: int,
        drafts: int,
        accepted_histogram: list[int],
    ) -> None:
        m = self.metrics
        m.iteration_tokens[engine].observe(prefill_tokens + produced)
        if produced:
            m.generation_tokens.inc(produced)
        if self._mtp:
            m.record_drafts(drafts, accepted_histogram)

    def gauges(
        self, running: Collection[EngineRequest], waiting: Collection[EngineRequest]
    ) -> None:
        m = self.metrics
        m.running.set(len(running))
        m.waiting.set(len(waiting))
        used = sum(r.context_tokens for r in running)
        m.kv_usage.set(min(1.0, used / self._kv_tokens))

    def finished(self, request: EngineRequest, now: int) -> None:
        m = self.metrics
        reason = request.finish_reason or "abort"
        m.success[reason].inc()
        if request.first_sched_ns:
            self._request_times(request, now)
        if self.trace is not None:
            self.trace.write(
                {
                    "x_request_id": request.x_request_id,
                    "arrival_ns": request.arrival_ns,
                    "first_sched_ns": request.first_sched_ns or None,
                    "prompt_tokens": request.prompt_len,
                    "chunks": request.chunks,
                    "completion_tokens": request.emitted,
                    "finish_reason": reason,
                    **thinking_truth(request),
                }
            )

    def _request_times(self, request: EngineRequest, now: int) -> None:
        m = self.metrics
        arrival, sched = request.arrival_ns, request.first_sched_ns
        m.queue.observe((sched - arrival) * NS)
        end = request.last_token_ns or now
        m.e2e.observe((end - arrival) * NS)
        m.inference.observe((end - sched) * NS)
        m.req_prompt_tokens.observe(request.prompt_len)
        m.req_generation_tokens.observe(request.emitted)
        first = request.first_token_ns
        if not first:
            return
        m.ttft.observe((first - arrival) * NS)
        m.prefill.observe((first - sched) * NS)
        m.decode.observe((end - first) * NS)
        if request.emitted > 1:
            m.tpot.observe((end - first) * NS / (request.emitted - 1))
        if len(request.chunks) + len(request.merged_steps) > 1:
            intended = np.fromiter(
                (c[0] for c in request.chunks), dtype=np.int64, count=len(request.chunks)
            )
            if request.merged_steps:
                intended = np.sort(np.concatenate((intended, request.merged_steps)))
            m.itl.observe_many(np.diff(intended) * NS)


def thinking_truth(request: EngineRequest) -> dict[str, Any]:
    """A thinking request's phases as generated (sim/thinking.py): its reasoning tokens
    (`</think>` included), its answer tokens, and which chunk carried the first answer
    token (null: it never answered). Null fields for a request that did not think."""
    plan = request.plan
    if not plan.thinking:
        return {"reasoning_tokens": None, "answer_tokens": None, "first_answer_chunk": None}
    end = plan.think_end
    reasoning = request.emitted if end is None else min(end + 1, request.emitted)
    first, seen = None, 0
    for index, (_, _, tokens) in enumerate(request.chunks):
        seen += tokens
        if seen > reasoning:
            first = index
            break
    return {
        "reasoning_tokens": reasoning,
        "answer_tokens": request.emitted - reasoning,
        "first_answer_chunk": first,
    }
