"""The pieces of a point's result read off the run's settings and the point's readings:
what summarize needs of the run, why a point stopped, the KV-cache samples, the raw
counters as run.json keeps them, and the warning about prompts of inexact length.
"""

from __future__ import annotations

import sys

from loadgen.config.spec import RunSpec
from loadgen.config.workload import asks_thinking
from loadgen.metrics.server import KV_USAGE, ServerSnapshot
from loadgen.metrics.summary import PointContext
from loadgen.results.outcome import Stop
from loadgen.results.point import PointResult, PointStatus
from loadgen.results.run_record import CounterFacts
from loadgen.run.embedded_sim import sim_stream_interval
from loadgen.wording import counted


def point_context(spec: RunSpec, slots: int) -> PointContext:
    """What summarize needs of the run for a point sent from `slots` slots."""
    return PointContext(
        conc=slots,
        input_len=spec.workload.isl,
        output_len=spec.workload.osl,
        spec_tokens=spec.scoring.spec_tokens,
        slos=spec.scoring.slos_ms,
        percentiles=spec.scoring.percentiles,
        num_gpus=spec.scoring.num_gpus,
        stream_interval=sim_stream_interval(spec.sim_args) if spec.sim else None,
        golden=spec.scoring.golden_al,
        thinking=asks_thinking(spec.workload, spec.target.endpoint),
    )


def point_status(complete: bool, stop: Stop | None) -> PointStatus:
    """Why a point stopped early: a code, and the line loadgen printed about it
    (`incomplete_reason` is that same line, the name `loadgen merge` reads)."""
    if complete or stop is None:
        return PointStatus(
            complete=complete, stop_reason=None, stop_detail=None, incomplete_reason=None
        )
    return PointStatus(
        complete=False,
        stop_reason=stop.reason,
        stop_detail=stop.detail,
        incomplete_reason=stop.detail,
    )


def kv_samples(
    gauges: dict[str, dict[str, list[float]]], times: dict[str, dict[str, list[int]]]
) -> list[tuple[int, float]]:
    """Every URL's KV-cache usage samples with their times, for the time slices."""
    return [
        (t, v)
        for url, series in gauges.items()
        for t, v in zip(
            times.get(url, {}).get(KV_USAGE, ()), series.get(KV_USAGE, ()), strict=False
        )
    ]


def warn_inexact(result: PointResult) -> None:
    prompts = result.prompts
    n = prompts.input_len_mismatches
    which = (
        "some prompts are" if n is None else f"{counted(n, 'prompt')} {'is' if n == 1 else 'are'}"
    )
    if prompts.input_len_approximate:
        print(
            f"loadgen: WARNING: conc {result.conc}: "
            f"{which} not of the requested length (up "
            f"to {prompts.input_len_max_abs_diff} tokens off): this tokenizer cannot give "
            f"them exactly ({prompts.prompt_synthesis_note}); input_lens hold their true "
            "lengths",
            file=sys.stderr,
        )


def snapshot_json(snapshot: ServerSnapshot | None) -> CounterFacts | None:
    """The raw counters as run.json keeps them (None: no scrape)."""
    if snapshot is None:
        return None
    return CounterFacts(
        samples=dict(snapshot.samples),
        keyed={name: dict(values) for name, values in snapshot.keyed.items()},
        engines=snapshot.engines,
    )
