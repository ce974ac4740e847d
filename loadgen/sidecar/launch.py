"""What a posted run executes: its options checked against the workload it would build,
then one sweep or a sweep document's lanes, in a process of their own
(sidecar/run_child.py), each point feeding the live metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.sidecar.run_child import RunJob, RunKind
from loadgen.sidecar.run_process import run_in_child
from loadgen.sidecar.runs import ProgressObserver, RunRecord
from loadgen.sidecar.settings import ServiceConfig
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver
from loadgen.tokenizer import load_tokenizer


class RunLauncher:
    """The sweeps behind POST /v1/runs: the sidecar's tokenizer checks their prompts, the
    service's metrics show them live."""

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

    def _metrics_for(self, endpoint: str, points: int, spec_tokens: int | None) -> MetricsObserver:
        return MetricsObserver(
            self.metrics,
            model=self.config.model,
            endpoint=endpoint,
            points=points,
            spec_tokens=spec_tokens,
        )

    async def _run(
        self,
        kind: RunKind,
        options: Mapping[str, Any],
        results_dir: Path,
        progress: ProgressObserver,
    ) -> None:
        """In a process of its own (sidecar/run_child.py): the plan and the records grow
        that process, never the sidecar's."""
        job = RunJob(self.config, dict(options), results_dir, kind)
        await run_in_child(job, progress, self._metrics_for)

    async def sweep(
        self,
        options: Mapping[str, Any],
        record: RunRecord,
        results_dir: Path,
        progress: ProgressObserver,
    ) -> None:
        await self._run("sweep", options, results_dir, progress)

    async def lanes(
        self,
        options: Mapping[str, Any],
        record: RunRecord,
        results_dir: Path,
        progress: ProgressObserver,
    ) -> None:
        """A sweep document's lanes, each with its own live-metrics observer."""
        await self._run("lanes", options, results_dir, progress)
