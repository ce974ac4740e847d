"""`--find-max rate` through the whole runner (orchestrate/capacity.py, the sweep, the pure search)
on the virtual-clock fake backend: a server of 4 slots (FIFO, each request holds one for
its whole stream) in front of which TTFT grows once the open-loop arrivals outpace it.
The search must find, within its resolution, what a sweep of every rate on a grid of
that resolution finds, with fewer points. (The real-socket check of the search is
tests/orchestrate/test_find_max_sim.py, `--find-max conc` against the simulator.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.objectives import Objective, Resolution
from loadgen.errors import UsageError
from loadgen.orchestrate.capacity import find_capacity
from loadgen.orchestrate.measure import measure
from loadgen.records import RequestRecord
from loadgen.run.backend import OnRecord
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.workload.plan import RequestSpec
from tests.support.exact_server import (
    ITL_MS,
    MS,
    TOKENS_PER_CHUNK,
    TTFT_MS,
    ExactServer,
    VirtualClock,
    exact_record,
    spec,
)

SLOTS = 4
LIMIT_MS = TTFT_MS + 30.0  # p99 TTFT: at most 30 ms waiting for a slot
STEP = 2.0  # req/s: the resolution, and the brute-force grid's step


class QueueServer(ExactServer):
    """Requests are served in arrival order by SLOTS slots; a request's stream starts
    when it has a slot (its TTFT includes the wait)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock)
        self.free_ns = [0] * SLOTS
        self.next_index = 0
        self.turn = asyncio.Condition()

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: OnRecord,
    ) -> RequestRecord:
        if request.index == 0:  # a new point: an idle server
            self.free_ns, self.next_index = [0] * SLOTS, 0
        async with self.turn:  # FIFO: request i is placed after request i-1
            await self.turn.wait_for(lambda: self.next_index == request.index)
            chunks = request.max_tokens // TOKENS_PER_CHUNK
            slot = min(range(SLOTS), key=lambda s: self.free_ns[s])
            begin = max(scheduled_ns, self.free_ns[slot])
            times = tuple(begin + (TTFT_MS + i * ITL_MS) * MS for i in range(chunks))
            self.free_ns[slot] = times[-1]
            self.next_index += 1
            self.turn.notify_all()
        record = exact_record(request, conc, scheduled_ns, times)
        on_record(record)
        return record


async def test_find_max_rate_equals_a_sweep_of_every_rate_on_its_grid(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    common = dict(conc=(64,), num_prompts=40, warmup_per_conc=0)

    async def p99_at(rate: float) -> float:
        clock = VirtualClock()
        results = tmp_path / f"grid_{rate:g}"
        await sweep_points(
            spec(results, request_rate=rate, **common),
            SweepOptions(
                tokenizer=tokenizer, backend=QueueServer(clock), clock=clock, sleep=clock.sleep
            ),
        )
        return float(orjson.loads((results / "conc_64.json").read_bytes())["p99_ttft_ms"])

    grid = [2.0 + STEP * i for i in range(20)]  # 2..40 req/s
    p99 = {rate: await p99_at(rate) for rate in grid}
    brute = max(r for r, v in p99.items() if v <= LIMIT_MS)
    assert min(grid) < brute < max(grid)  # the answer is inside the range, not at an end

    clock = VirtualClock()
    found = tmp_path / "found"
    outcome = await find_capacity(
        spec(
            found,
            find_max="rate",
            rate_range=(2.0, 40.0),
            objectives=(Objective("ttft", 99.0, LIMIT_MS),),
            find_max_resolution=Resolution(STEP, False),
            **common,
        ),
        tokenizer=tokenizer,
        backend=QueueServer(clock),
        clock=clock,
        sleep=clock.sleep,
    )
    capacity = outcome.result
    assert capacity.finished and capacity.answer is not None
    assert capacity.first_fail is not None
    assert capacity.first_fail.load - capacity.answer <= STEP
    assert abs(capacity.answer - brute) <= STEP, (capacity.answer, brute, p99)
    assert len(capacity.probes) < len(grid)
    on_disk = orjson.loads((found / "capacity.json").read_bytes())
    assert on_disk["answer"] == capacity.answer and on_disk["find_max"] == "rate"
    for probe in capacity.probes:  # each probe's own run holds the figure it was judged on
        point = orjson.loads((found / probe.results / "conc_64.json").read_bytes())
        assert point["request_rate"] == probe.load
        assert probe.checks[0].value_ms == point["p99_ttft_ms"]


async def test_with_trials_each_objective_is_held_at_its_interval_bound(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    clock = VirtualClock()
    outcome = await find_capacity(
        spec(
            tmp_path,
            find_max="rate",
            rate_range=(10.0, 30.0),
            trials=3,
            objectives=(Objective("ttft", 99.0, LIMIT_MS),),
            find_max_resolution=Resolution(0.25, True),
            conc=(64,),
            num_prompts=40,
            warmup_per_conc=0,
        ),
        tokenizer=tokenizer,
        backend=QueueServer(clock),
        clock=clock,
        sleep=clock.sleep,
    )
    capacity = outcome.result
    assert capacity.held_to_limit == "ci95_high" and capacity.trials == 3
    spread_seen = False
    for probe in capacity.probes:
        point = orjson.loads((tmp_path / probe.results / "conc_64.json").read_bytes())
        entry = point["trial_spread"]["p99_ttft_ms"]
        [check] = probe.checks
        assert check.value_ms == point["p99_ttft_ms"]  # the pooled figure, shown
        assert check.bound_ms == entry["ci_high"]  # the one held to the limit
        assert probe.passed is (entry["ci_high"] <= LIMIT_MS)
        spread_seen |= entry["ci_high"] > entry["mean"]
    assert spread_seen  # the trials differed somewhere: the bound was not the value


async def test_a_search_is_refused_where_only_a_sweep_would_run(tmp_path: Path) -> None:
    """orchestrate/measure.py (the sidecar's runs) must never run a sweep of --conc in the
    search's place; lanes run the search themselves (orchestrate/lanes.py)."""
    search = spec(
        tmp_path,
        conc=(1, 2, 4),
        find_max="conc",
        objectives=(Objective("ttft", 99.0, LIMIT_MS),),
        find_max_resolution=Resolution(1, False),
    )
    with pytest.raises(UsageError, match="a capacity search runs through orchestrate/capacity"):
        await measure(search)
