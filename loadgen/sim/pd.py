"""--pd P:D: a disaggregated deployment in one process, as Dynamo runs one.

A request's life (each phase's time goes to --trace as the ground truth, under "pd"):
- frontend: the HTTP handler reads and tokenizes it, then waits --frontend-ms more
  (Dynamo's preprocess), then picks the prefill engine with the fewest requests (route);
- prefill queue and prefill: a request of max_tokens 1 waits in that prefill engine's
  queue and is prefilled by its step model, as Dynamo's prefill worker does;
- KV transfer: the prompt's KV crosses the link, --kv-latency-ms plus prompt tokens x
  --kv-bytes-per-token / --kv-bandwidth-gbps (each transfer has the whole bandwidth:
  contention between transfers is not modelled);
- decode admission + first step: the request enters the least-loaded decode engine's
  queue once its KV has arrived (its prompt counted as computed) and its first token is
  that engine's first step with it; the rest of its tokens follow as on any engine.
Times are the model's where it has one (engine steps, the KV link's arrival) and the
clock's elsewhere (the frontend, a handover between engines); an engine or the loop
running late shows in the next phase that waits for it, never as a negative phase.

/metrics speaks Dynamo 1.4.2's names (tests/fixtures/dynamo_1.4.2/): the frontend's
`dynamo_frontend_*` on the HTTP port's /metrics, each worker's `dynamo_component_*` and
its engine's `vllm:*` on /workers/prefill-<i>/metrics and /workers/decode-<i>/metrics
(paths, not ports: one process serves them; a Dynamo worker has a system port each).
A decode worker's KV transfer is `vllm:nixl_xfer_time_seconds`, vLLM's NIXL connector's
histogram (Dynamo 1.4.2's mocker exports no series for it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from loadgen.histogram import BulkHistogram
from loadgen.sim.accounting import Accounting
from loadgen.sim.config import SimConfig
from loadgen.sim.detok import TokenTable
from loadgen.sim.engine import Engine
from loadgen.sim.metrics import TTFT_BUCKETS, SimMetrics
from loadgen.sim.plan import PlanParams, make_plan
from loadgen.sim.power import PowerModel
from loadgen.sim.request import EngineRequest
from loadgen.sim.trace import TraceWriter

NS = 1e-9
# Dynamo 1.4.2's frontend stage buckets (fixture), vLLM's NIXL transfer-time buckets
STAGE_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0)
NIXL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)


class PdEngine(Engine):
    """An engine of a P/D deployment: its steps start no earlier than now.

    A request crosses engines at the moments the asyncio loop hands it over (prefill
    done, KV arrived), which are real times; an engine running behind its chained
    schedule (CPU-starved) would stamp a request's scheduling and first token before it
    arrived. Here a late engine starts its next step now: its stamps stay real times.
    """

    def _next_start(self, deadline: int) -> int:
        return max(deadline, self.clock())


class Worker:
    """One Dynamo worker: its engine, its own registry (its /metrics) and role."""

    def __init__(self, role: str, index: int, config: SimConfig, clock: Callable[[], int]) -> None:
        self.role, self.index = role, index
        self.registry = CollectorRegistry()
        metrics = SimMetrics(
            self.registry,
            model_name=config.model,
            max_model_len=config.max_model_len,
            spec_tokens=config.spec_tokens,
        )
        self.engine = PdEngine(config, Accounting(metrics, None, config.kv_cache_tokens), clock)
        self.requests = Counter(
            "dynamo_component_requests",
            "Total number of requests processed by work handler",
            ("dynamo_component", "dynamo_endpoint", "dynamo_namespace", "worker_id"),
            registry=self.registry,
        ).labels(role, "generate", "dynamo", f"{role}-{index}")
        self.kv_transfer = (
            BulkHistogram(
                "vllm:nixl_xfer_time_seconds",
                "Histogram of transfer duration for NIXL KV Cache transfers.",
                ("engine", "model_name"),
                NIXL_BUCKETS,
                self.registry,
            ).labels("0", config.model)
            if role == "decode"
            else None
        )

    @property
    def path(self) -> str:
        return f"/workers/{self.role}-{self.index}/metrics"

    @property
    def load(self) -> int:
        return len(self.engine.waiting) + len(self.engine.running)


class Frontend:
    """The Dynamo frontend's own series, on the simulator's registry."""

    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self.stages = BulkHistogram(
            "dynamo_frontend_stage_duration_seconds",
            "Pipeline stage duration (seconds)",
            ("stage",),
            STAGE_BUCKETS,
            registry,
        )
        self.preprocess = self.stages.labels("preprocess")
        self.route = self.stages.labels("route")
        self.ttft = BulkHistogram(
            "dynamo_frontend_time_to_first_token_seconds",
            "Time to first token in seconds",
            ("model",),
            TTFT_BUCKETS,
            registry,
        ).labels(model)
        self.inflight = Gauge(
            "dynamo_frontend_inflight_requests",
            "Number of inflight requests",
            ("model",),
            registry=registry,
        ).labels(model)


class PdEngines:
    """The simulator's engines under --pd, as the handlers and server see any engines."""

    def __init__(
        self,
        config: SimConfig,
        registry: CollectorRegistry,
        table: TokenTable,
        trace: TraceWriter | None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        assert config.pd is not None
        prefills, decodes = config.pd
        # one loop runs every engine: none may spin past another's deadline
        engine_config = dataclasses.replace(config, spin_us=0.0)
        # a decode engine gets the prompt's KV: it neither looks it up nor computes it
        decode_config = dataclasses.replace(engine_config, enable_prefix_caching=False)
        self.config, self.clock, self.table, self.trace = config, clock, table, trace
        self.prefill = [Worker("prefill", i, engine_config, clock) for i in range(prefills)]
        self.decode = [Worker("decode", i, decode_config, clock) for i in range(decodes)]
        self.workers = [*self.prefill, *self.decode]
        self.engines: Sequence[Engine] = [w.engine for w in self.workers]
        self.accounting = self.decode[0].engine.accounting  # request parameters
        self.profiler = None
        self.frontend = Frontend(registry, config.model)
        self._flows: dict[int, asyncio.Task[None]] = {}
        self._on_decode: dict[int, Engine] = {}

    @property
    def power(self) -> PowerModel:
        return self.prefill[0].engine.power

    @property
    def waiting(self) -> list[EngineRequest]:
        return [r for w in self.prefill for r in w.engine.waiting]

    def submit(self, request: EngineRequest) -> None:
        self.frontend.inflight.inc()
        flow = asyncio.get_running_loop().create_task(self._flow(request, self.clock()))
        self._flows[id(request)] = flow
        flow.add_done_callback(lambda _: self._flows.pop(id(request), None))

    async def _flow(self, request: EngineRequest, tokenized: int) -> None:
        try:
            phases = await self._to_decode(request, tokenized)
        except asyncio.CancelledError:
            if not request.done.done():
                request.finish_reason = "abort"
                request.done.set_result("abort")
            self.frontend.inflight.dec()
            raise
        try:
            await asyncio.shield(request.done)
        finally:
            self.frontend.inflight.dec()
            self._on_decode.pop(id(request), None)
        self._finished(request, phases)

    async def _to_decode(self, request: EngineRequest, tokenized: int) -> dict[str, int]:
        """Frontend, prefill and KV transfer: the phases' ends (ns) once on a decode engine."""
        arrival = request.arrival_ns
        await _sleep_until(tokenized + int(self.config.frontend_ms * 1e6), self.clock)
        preprocessed = self.clock()
        worker = min(self.prefill, key=lambda w: w.load)
        routed = self.clock()
        self.frontend.preprocess.observe((preprocessed - arrival) * NS)
        self.frontend.route.observe((routed - preprocessed) * NS)
        shadow = self._prefill_request(request, routed)
        worker.requests.inc()
        worker.engine.submit(shadow)
        try:
            await shield_done(shadow)
        except asyncio.CancelledError:
            worker.engine.cancel(shadow)
            raise
        prefilled = shadow.first_token_ns  # the step that finished its prompt ended then
        if not prefilled:
            raise asyncio.CancelledError  # the prefill engine stopped: an abort
        c = self.config
        bytes_per_s = c.kv_bandwidth_gbps * 1e9
        transfer_s = (
            c.kv_latency_ms * 1e-3 + request.prompt_len * c.kv_bytes_per_token / bytes_per_s
        )
        transfer_ns = int(transfer_s * 1e9)
        # The link's model is the arrival time: a loop too busy to wake this flow then
        # delays the decode engine's admission (its part), not the transfer, as engine
        # steps keep their model times however late their sends are.
        arrived = prefilled + transfer_ns
        await _sleep_until(arrived, self.clock)
        decode = min(self.decode, key=lambda w: w.load)
        assert decode.kv_transfer is not None
        decode.kv_transfer.observe((arrived - prefilled) * NS)
        decode.requests.inc()
        # the decode worker got the request when the prefill ended, then read its KV
        request.arrival_ns = prefilled
        request.prefilled = request.prompt_len
        self._on_decode[id(request)] = decode.engine
        decode.engine.submit(request)
        return {
            "arrival_ns": arrival,
            "routed_ns": routed,
            "prefill_sched_ns": shadow.first_sched_ns,
            "prefilled_ns": prefilled,
            "kv_arrived_ns": arrived,
            "prefill_engine": worker.index,
            "decode_engine": decode.index,
        }

    def _prefill_request(self, request: EngineRequest, routed: int) -> EngineRequest:
        """What the prefill worker runs: the prompt, and one token (Dynamo's max_tokens 1)."""
        params = PlanParams(
            max_tokens=1,
            min_tokens=0,
            ignore_eos=True,
            eos_prob=0.0,
            spec_tokens=0,
            acceptance=(),
            fragment_fraction=0.0,
        )
        return EngineRequest(
            index=request.index,
            x_request_id=request.x_request_id,
            prompt_len=request.prompt_len,
            max_tokens=1,
            plan=make_plan(self.table, request.index, params),
            arrival_ns=routed,
            done=asyncio.get_running_loop().create_future(),
            block_hashes=request.block_hashes,
        )

    def _finished(self, request: EngineRequest, phases: dict[str, int]) -> None:
        first = request.first_token_ns
        if first:
            self.frontend.ttft.observe((first - phases["arrival_ns"]) * NS)
        if self.trace is None:
            return
        self.trace.write(
            {
                "x_request_id": request.x_request_id,
                "arrival_ns": phases["arrival_ns"],
                "first_sched_ns": request.first_sched_ns or None,
                "prompt_tokens": request.prompt_len,
                "chunks": request.chunks,
                "completion_tokens": request.emitted,
                "finish_reason": request.finish_reason or "abort",
                "pd": {
                    **phases,
                    "first_token_ns": first or None,
                    "frontend_ns": phases["routed_ns"] - phases["arrival_ns"],
                    "prefill_queue_ns": phases["prefill_sched_ns"] - phases["routed_ns"],
                    "prefill_ns": phases["prefilled_ns"] - phases["prefill_sched_ns"],
                    "kv_transfer_ns": phases["kv_arrived_ns"] - phases["prefilled_ns"],
                    "decode_first_ns": first - phases["kv_arrived_ns"] if first else None,
                },
            }
        )

    def cancel(self, request: EngineRequest) -> None:
        engine = self._on_decode.get(id(request))
        if engine is not None:
            engine.cancel(request)
            return
        flow = self._flows.get(id(request))
        if flow is not None:
            flow.cancel()

    def reset_prefix_cache(self) -> bool:
        return all([w.engine.reset_prefix_cache() for w in self.workers])

    def stop(self) -> None:
        for flow in list(self._flows.values()):
            flow.cancel()
        for engine in self.engines:
            engine.stop()


async def shield_done(request: EngineRequest) -> None:
    await asyncio.shield(request.done)


async def _sleep_until(deadline_ns: int, clock: Callable[[], int]) -> None:
    """To the deadline, never before it (timers fire ms-grained, late rather than early)."""
    delay = deadline_ns - clock()
    if delay > 0:
        await asyncio.sleep(delay * NS)
    while clock() < deadline_ns:  # noqa: ASYNC110 - the last fraction of a ms: yield, not spin
        await asyncio.sleep(0)
