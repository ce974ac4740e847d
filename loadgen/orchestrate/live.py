"""A run with live Prometheus metrics (`--metrics-port`): the exporter bound before the
sweep starts, so a taken port fails fast and alone, and labelled with the served model."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

from loadgen.config.spec import RunSpec
from loadgen.config.workload import asks_thinking
from loadgen.errors import UsageError
from loadgen.run.backend import served_model
from loadgen.run.embedded_sim import sim_model
from loadgen.sinks.prometheus import live_metrics
from loadgen.sinks.prometheus.observer import MetricsObserver


async def model_label(spec: RunSpec) -> str:
    """The `model` label of live metrics: the served name, so the dashboard can put
    the server's own `vllm:` series (labelled model_name) beside loadgen's."""
    if spec.target.model:
        return spec.target.model
    if spec.sim:
        return sim_model(spec.sim_args)
    if spec.target.serve_cmd:  # not up yet: the label is the name asked for, if any
        return "launched-server"
    assert spec.target.base_url is not None
    return await served_model(spec, spec.target.base_url)


@contextlib.asynccontextmanager
async def live_observer(spec: RunSpec, port: int, host: str) -> AsyncIterator[MetricsObserver]:
    """The observer that feeds the live metrics served on host:port while the block runs."""
    model = await model_label(spec)
    stack = contextlib.AsyncExitStack()
    try:
        server, observer = await stack.enter_async_context(
            live_metrics(
                model=model,
                endpoint=spec.target.endpoint,
                points=len(spec.load.conc),
                spec_tokens=spec.scoring.spec_tokens,
                thinking=asks_thinking(spec.workload, spec.target.endpoint),
                port=port,
                host=host,
                labels={"shard": str(spec.processes.shard_index)}
                if spec.processes.shard_count > 1
                else None,
            )
        )
    except OSError as exc:
        raise UsageError(
            f"--metrics-port {port}: {exc.strerror or exc}; pick a free port (0 = any)"
        ) from None
    async with stack:
        print(
            f"loadgen: live metrics at http://{server.host}:{server.port}/metrics", file=sys.stderr
        )
        yield observer
