"""What a posted run executes: its options checked against the workload it would build,
then one sweep or a sweep document's lanes, each point feeding the live metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.config.sweepfile import Lane
from loadgen.run.observers import FanoutObserver
from loadgen.sidecar.options import plan_for, spec_for
from loadgen.sidecar.runs import ProgressObserver, RunRecord
from loadgen.sidecar.settings import ServiceConfig
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver
from loadgen.tokenizer import load_tokenizer


class RunLauncher:
    """The sweeps behind POST /v1/runs, sharing one tokenizer and the service's metrics."""

    def __init__(self, config: ServiceConfig, metrics: LoadgenMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self._loaded_tokenizer: Tokenizer | None = None

    async def tokenizer(self) -> Tokenizer:
        # Loaded once (~0.4 s), on first use: the sidecar's runs cannot pick a tokenizer.
        if self._loaded_tokenizer is None:
            self._loaded_tokenizer = await asyncio.to_thread(load_tokenizer)
        return self._loaded_tokenizer

    async def check_workload(self, spec: RunSpec) -> None:
        """Options that parse but describe prompts that cannot be built are a 400 too."""
        from loadgen.run.probe import probe_prompt

        await asyncio.to_thread(probe_prompt, spec, await self.tokenizer())

    def _metrics_for(self, spec: RunSpec) -> MetricsObserver:
        return MetricsObserver(
            self.metrics,
            model=self.config.model,
            endpoint=spec.target.endpoint,
            points=len(spec.load.conc),
            spec_tokens=spec.scoring.spec_tokens,
        )

    async def sweep(
        self,
        options: Mapping[str, Any],
        record: RunRecord,
        results_dir: Path,
        progress: ProgressObserver,
    ) -> None:
        from loadgen.orchestrate.measure import measure

        spec = spec_for(self.config, options, results_dir)
        metrics = self._metrics_for(spec)
        try:
            await measure(
                spec, observer=FanoutObserver(progress, metrics), tokenizer=await self.tokenizer()
            )
        finally:
            metrics.finished()

    async def lanes(
        self,
        options: Mapping[str, Any],
        record: RunRecord,
        results_dir: Path,
        progress: ProgressObserver,
    ) -> None:
        """A sweep document's lanes, each with its own live-metrics observer."""
        from loadgen.orchestrate.lanes import run_lanes

        plan = plan_for(self.config, options, results_dir)
        current: list[MetricsObserver] = []

        def observer_for(lane: Lane) -> FanoutObserver:
            for done in current:  # the previous lane's series: nothing in flight any more
                done.finished()
            current[:] = [self._metrics_for(lane.spec)]
            return FanoutObserver(progress, current[0])

        try:
            outcome = await run_lanes(
                plan, observer_for=observer_for, tokenizer=await self.tokenizer()
            )
        finally:
            for done in current:
                done.finished()
        failed = [lane.name for lane in outcome.lanes if lane.state == "failed"]
        if failed:
            raise RuntimeError(f"lanes failed: {', '.join(failed)} (see results/lanes.json)")
