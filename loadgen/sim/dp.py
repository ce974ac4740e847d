"""--data-parallel-size N: N engines behind one frontend, each request on one of them.

The choice is vLLM's internal DP load balancer (vllm/v1/engine/core_client.py,
DPLBAsyncMPClient.get_core_engine_for_request, vllm-project/vllm at
364631ab07d283c4f08db0544a2653c5b415a427): the engine with the lowest
waiting * 4 + running wins (ties to the lowest index from this frontend's start index,
0 for one frontend), from counts the DP coordinator publishes every 100 ms; between
publications the frontend adds each request it routes to its local waiting count.
Not modelled: the coordinator's wave start/pause handshake and more than one frontend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from loadgen.sim.accounting import Accounting
from loadgen.sim.config import SimConfig
from loadgen.sim.engine import Engine
from loadgen.sim.power import PowerModel
from loadgen.sim.request import EngineRequest
from loadgen.sim.steplog import StepLog

WAITING_WEIGHT = 4  # vLLM: score = waiting * 4 + running
PUBLISH_NS = 100_000_000  # the coordinator's stats_update_interval_ms default (100)


class Engines:
    """The engines of one simulator (one, without DP) as the handlers and server see them."""

    def __init__(
        self,
        config: SimConfig,
        accounting: Accounting,
        step_log: StepLog | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.accounting = accounting
        self.clock = clock
        self.engines: Sequence[Engine] = [
            Engine(config, accounting, clock, index=i, step_log=step_log)
            for i in range(config.data_parallel_size)
        ]
        # one profiler for the server (--profiler-dir): a window sees every engine's steps
        self.profiler = self.engines[0].profiler
        for engine in self.engines:
            engine.group = self.engines
            engine.profiler = self.profiler
        self._counts = [[0, 0] for _ in self.engines]
        self._published_ns = -PUBLISH_NS
        self._placed: dict[int, Engine] = {}

    @property
    def power(self) -> PowerModel:
        """The first engine's GPUs (docs: under DP, /gpu/metrics models engine 0 only)."""
        return self.engines[0].power

    @property
    def waiting(self) -> list[EngineRequest]:
        return [r for engine in self.engines for r in engine.waiting]

    def choose(self) -> Engine:
        if len(self.engines) == 1:
            return self.engines[0]
        now = self.clock()
        if now - self._published_ns >= PUBLISH_NS:
            self._counts = [[len(e.waiting), len(e.running)] for e in self.engines]
            self._published_ns = now
        scores = [waiting * WAITING_WEIGHT + running for waiting, running in self._counts]
        best = scores.index(min(scores))
        self._counts[best][0] += 1
        return self.engines[best]

    def submit(self, request: EngineRequest) -> None:
        engine = self.choose()
        self._placed[id(request)] = engine
        request.done.add_done_callback(lambda _: self._placed.pop(id(request), None))
        engine.submit(request)

    def cancel(self, request: EngineRequest) -> None:
        engine = self._placed.get(id(request))
        if engine is not None:
            engine.cancel(request)

    def reset_prefix_cache(self) -> bool:
        # vLLM calls the utility on every engine; it succeeds where no request holds blocks.
        results = [engine.reset_prefix_cache() for engine in self.engines]
        return all(results)

    def stop(self) -> None:
        for engine in self.engines:
            engine.stop()
