"""--slice-duration and --ramp-up-strategy against the real simulator over real sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.results.store import ResultsDir
from loadgen.run.shapes import RateStages, arrivals_rng, load_shape
from loadgen.run.sweep import SweepOptions, sweep_points

SIM = (
    "--step-fixed-ms",
    "4",
    "--decode-token-us",
    "20",
    "--prefill-token-us",
    "2",
    "--spin-us",
    "0",
    "--seed",
    "7",
)


def spec(tmp_path: Path, **changes: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        conc=(4,),
        isl=64,
        osl=32,
        prompts_per_conc=8,
        warmup_per_conc=1,
        sim=True,
        sim_args=SIM,
        results_dir=tmp_path / "results",
        progress=False,
    )
    values.update(changes)
    return RunSpec.flat(**values)


async def test_slices_add_up_to_the_point_and_carry_the_servers_kv_usage(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    outcome = await sweep_points(
        spec(tmp_path, slice_duration_s=0.25), SweepOptions(tokenizer=tokenizer)
    )
    assert outcome.exit_code == 0
    store = ResultsDir(outcome.results_dir)
    result = store.read_point(4)  # read back typed: the file form round-trips
    records = store.read_records(4)
    slices = result.slices
    assert slices is not None and len(slices) >= 2
    assert [s.start_s for s in slices] == pytest.approx([0.25 * i for i in range(len(slices))])
    assert sum(s.duration_s for s in slices) == pytest.approx(result.metrics.duration, abs=0.01)
    assert sum(s.output_tokens for s in slices) == sum(sum(r.chunk_tokens) for r in records)
    assert sum(s.ttft_samples for s in slices) == result.metrics.completed == 32
    assert sum(s.requests_completed for s in slices) == 32
    # a closed loop at conc 4 keeps ~4 in flight; the last slice drains
    assert max(s.in_flight_max for s in slices) == 4
    assert 3.0 < slices[0].in_flight_mean <= 4.0
    # the gauge watch ran at half the slice length against the simulator's /metrics
    assert any(s.kv_cache_usage_mean is not None and s.kv_cache_usage_mean > 0 for s in slices)
    throughput = sum(s.output_tokens for s in slices) / sum(s.duration_s for s in slices)
    assert throughput == pytest.approx(result.metrics.output_throughput, rel=0.05)


async def test_without_the_flag_there_are_no_slices(tmp_path: Path, tokenizer: Tokenizer) -> None:
    outcome = await sweep_points(
        spec(tmp_path, prompts_per_conc=2), SweepOptions(tokenizer=tokenizer)
    )
    assert ResultsDir(outcome.results_dir).read_point(4).slices is None


async def test_a_ramp_sends_slowly_then_quickly(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """vLLM's linear ramp 2 -> 40 req/s over the point's 40 requests: the first requests'
    gaps are ~20x the last ones' (seeded: the same schedule every run)."""
    outcome = await sweep_points(
        spec(
            tmp_path,
            conc=(64,),
            prompts_per_conc=1,
            warmup_per_conc=0,
            osl=8,
            ramp_up_strategy="linear",
            ramp_up_start_rps=2.0,
            ramp_up_end_rps=40.0,
            seed=3,
        ),
        SweepOptions(tokenizer=tokenizer),
    )
    store = ResultsDir(outcome.results_dir)
    result = store.read_point(64)
    assert result.status.complete and result.identity.request_rate == "ramp"
    assert (
        result.identity.ramp_up_strategy,
        result.identity.ramp_up_start_rps,
        result.identity.ramp_up_end_rps,
    ) == ("linear", 2.0, 40.0)
    due = np.array(sorted(r.scheduled_ns for r in store.read_records(64)))
    gaps = np.diff(due) / 1e9
    assert len(due) == 64
    assert gaps[:16].mean() > 4 * gaps[-16:].mean()


async def test_rate_stages_step_the_load_and_the_slices_show_it(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """4 req/s for 1.5 s, then 40 req/s for 1.5 s (seeded): the requests sent by each
    stage, and the slices' sends, follow the steps; nothing is sent after 3 s."""
    outcome_spec = spec(
        tmp_path,
        conc=(64,),
        warmup_per_conc=0,
        osl=8,
        rate_stages=((4.0, 1.5), (40.0, 1.5)),
        seed=2,
        slice_duration_s=0.5,
    )
    outcome = await sweep_points(outcome_spec, SweepOptions(tokenizer=tokenizer))
    store = ResultsDir(outcome.results_dir)
    result = store.read_point(64)
    assert result.status.complete and result.identity.request_rate == "stages"
    assert result.identity.rate_stages == [[4.0, 1.5], [40.0, 1.5]]
    records = store.read_records(64)
    due = np.sort(np.array([r.scheduled_ns for r in records]))
    # the run sent exactly the schedule's arrivals inside the stages, at its times
    shape = load_shape(outcome_spec)
    assert isinstance(shape, RateStages)
    planned = np.array(
        shape.offsets_ns(outcome_spec.load.measured_requests(64), arrivals_rng(outcome_spec, 64))
    )
    inside = planned[planned < 3e9]
    assert len(records) == len(inside) < result.planned_requests
    assert np.all(np.abs((due - due[0]) - (inside - inside[0])) <= 1)
    first, second = int((inside < 1.5e9).sum()), int((inside >= 1.5e9).sum())
    assert first <= 15 and second >= 30  # Poisson(6) and Poisson(60), far apart
    slices = result.slices
    assert slices is not None
    early = sum(s.requests_started for s in slices if s.start_s < 1.0)
    late = sum(s.requests_started for s in slices if 1.5 <= s.start_s < 2.5)
    assert late > 3 * early
