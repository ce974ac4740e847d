"""--conc-stages against the real simulator over real sockets: the requests in flight
follow the stages, and each stage's figures are cut at its boundaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.records import RequestRecord
from loadgen.results.store import ResultsDir
from loadgen.run.sweep import SweepOptions, sweep_points

# ~130 ms a request (32 tokens at a 4 ms step): several per slot in each 0.8 s stage
SIM = ("--step-fixed-ms", "4", "--decode-token-us", "20", "--spin-us", "0", "--seed", "7")
# A margin, not a bound asserted: the requests' own spans set when a step down has
# settled; this covers the send path after a slot's stage check (when each request is
# due is the scheduler's to keep, asserted on a virtual clock in tests/run/test_scheduler.py).
SEND_PATH_NS = 50_000_000


def in_flight_max(records: list[RequestRecord], lo: int, hi: int) -> int:
    """The most requests in flight at one instant in [lo, hi), from [start, end)."""
    starts = np.array([r.start_ns for r in records])
    ends = np.array([r.end_ns for r in records])
    # the count is highest just after a start; check every start inside and at lo
    instants = np.concatenate(([lo], starts[(starts >= lo) & (starts < hi)]))
    return max(int(((starts <= t) & (ends > t)).sum()) for t in instants)


@pytest.mark.parametrize(
    "stages",
    [
        ((2, 0.8), (8, 0.8), (3, 0.8)),  # up, then down
        ((4, 0.6), (1, 0.6), (4, 0.6)),  # down to one slot, then the idle slots wake again
    ],
)
async def test_the_requests_in_flight_follow_the_stages(
    tmp_path: Path, tokenizer: Tokenizer, stages: tuple[tuple[int, float], ...]
) -> None:
    top = max(conc for conc, _ in stages)
    spec = RunSpec.flat(
        conc=(top,),
        conc_stages=stages,
        isl=64,
        osl=32,
        num_prompts=400,  # more than 2.4 s can send: the stages, not the prompts, end it
        warmup_per_conc=1,
        sim=True,
        sim_args=SIM,
        results_dir=tmp_path / "results",
        progress=False,
    )
    outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    assert outcome.exit_code == 0
    store = ResultsDir(outcome.results_dir)
    result = store.read_point(top)  # the largest stage labels the point
    assert result.status.complete and result.metrics.max_concurrency == top
    assert result.identity.request_rate == "inf"
    assert result.identity.conc_stages == list(stages)
    records = store.read_records(top)
    assert all(r.error is None for r in records) and len(records) < 400
    t0 = min(r.scheduled_ns for r in records)
    bounds = [t0 + int(s * 1e9) for s in np.cumsum([0.0, *(s for _, s in stages)])]
    assert max(r.scheduled_ns for r in records) < bounds[-1]  # none due after the stages
    # Going down, the slots past the new count finish their request first: once the
    # longest request has had time to end, the count is the stage's exactly.
    settle = max(r.end_ns - r.start_ns for r in records) + SEND_PATH_NS
    previous, peaks = 0, []
    for (conc, _), lo, hi in zip(stages, bounds, bounds[1:], strict=False):
        assert in_flight_max(records, lo + settle, hi) == conc
        peaks.append(max(conc, previous))  # at a step down, the old requests still run
        assert in_flight_max(records, lo, hi) == peaks[-1]
        # going up, the new slots are due at the stage's start and sent at once
        woken = [r for r in records if r.scheduled_ns == lo]
        assert len(woken) == max(conc - previous, 0)
        assert all(r.start_ns >= lo for r in woken)
        previous = conc

    cut = result.stage_slices
    assert cut is not None and len(cut) == len(stages)
    assert [s.start_s for s in cut] == pytest.approx(
        [b / 1e9 for b in np.subtract(bounds, t0)][:-1]
    )
    assert [s.duration_s for s in cut[:-1]] == pytest.approx([s for _, s in stages[:-1]])
    assert cut[-1].duration_s >= stages[-1][1]  # the last runs on through the drain
    assert sum(s.requests_started for s in cut) == len(records)
    assert sum(s.requests_completed for s in cut) == result.metrics.completed
    assert sum(s.output_tokens for s in cut) == sum(sum(r.chunk_tokens) for r in records)
    assert [s.in_flight_max for s in cut] == peaks


async def test_running_out_of_requests_is_said_and_leaves_the_stages_unreached(
    tmp_path: Path, tokenizer: Tokenizer, capsys: pytest.CaptureFixture[str]
) -> None:
    """6 requests at 2 in flight (~130 ms each) last ~0.4 s of a 1 s first stage."""
    spec = RunSpec.flat(
        conc=(4,),
        conc_stages=((2, 1.0), (4, 1.0)),
        isl=64,
        osl=32,
        num_prompts=6,
        warmup_per_conc=0,
        sim=True,
        sim_args=SIM,
        results_dir=tmp_path / "results",
        progress=False,
    )
    outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    err = capsys.readouterr().err
    assert "conc 4: the point's 6 requests ran out" in err and "raise --num-prompts" in err
    result = ResultsDir(outcome.results_dir).read_point(4)
    assert result.metrics.completed == 6
    cut = result.stage_slices
    assert cut is not None and len(cut) == 1 and cut[0].duration_s < 1.0
