"""A whole sweep in-process, through the backend seam, on a virtual clock.

The backend (tests/support/exact_server.py) stands in for a server so that every figure
has one exact expected value (no sockets, no scheduling noise); the real paths are
covered against the simulator (test_sweep_sim.py) and a real vLLM (tests/integration).
It is not a mock of loadgen's own code: the scheduler, point, summary, sinks and
observers all run for real.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.results.point import (
    EnergyMetrics,
    PointResult,
    SessionMetrics,
    Submission,
    TrialSpread,
    file_keys,
)
from loadgen.run.backend import OnRecord
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.sinks.run_files import RunFiles
from loadgen.workload.plan import RequestSpec
from tests.support.exact_server import (
    ITL_MS,
    MS,
    TOKENS_PER_CHUNK,
    TTFT_MS,
    ExactServer,
    VirtualClock,
    spec,
)


async def test_a_sweep_through_the_seam_gives_the_exact_figures(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    clock = VirtualClock()
    server = ExactServer(clock)
    run = spec(tmp_path)
    outcome = await sweep_points(
        run,
        SweepOptions(
            tokenizer=tokenizer,
            backend=server,
            clock=clock,
            sleep=clock.sleep,
            outputs=RunFiles(run),
        ),
    )
    assert outcome.exit_code == 0 and [p.conc for p in outcome.points] == [2, 4]
    chunks = 16 // TOKENS_PER_CHUNK
    e2el_ms = TTFT_MS + (chunks - 1) * ITL_MS
    for point in outcome.points:
        result = orjson.loads(point.path.read_bytes())
        conc = point.conc
        assert result["completed"] == conc * 3 and result["failed"] == 0
        assert result["median_ttft_ms"] == result["p99_ttft_ms"] == TTFT_MS
        assert result["median_itl_ms"] == ITL_MS
        assert result["mean_itl_per_token_ms"] == ITL_MS / TOKENS_PER_CHUNK
        assert result["mean_tpot_ms"] == pytest.approx((e2el_ms - TTFT_MS) / 15)
        assert result["mean_e2el_ms"] == e2el_ms
        # each slot sends its 3 requests back to back: the point lasts 3 latencies
        assert result["duration"] == pytest.approx(3 * e2el_ms / 1e3)
        assert result["output_throughput"] == pytest.approx(conc * 3 * 16 / result["duration"])
        assert result["output_throughput_per_gpu"] == pytest.approx(result["output_throughput"] / 2)
        assert result["target"] == "exact-fake" and result["model_id"] == "exact"
        assert result["complete"] is True and result["warmup_requests"] == conc
        # p50 comes from the default --percentiles, an extra percentile of the model
        # (p50_e2e_norm_intvty is a field of the model: InferenceX publishes its p50)
        extras = {key for key in result if key.startswith("p50_")} - file_keys(PointResult)
        optional = (
            file_keys(SessionMetrics)
            | file_keys(EnergyMetrics)  # sessions, --gpu-metrics
            | file_keys(TrialSpread)
            | file_keys(Submission)
        )  # --trials, scenario runs
        assert extras and set(result) - extras == file_keys(PointResult) - optional
        assert len(read_jsonl(tmp_path / f"requests_conc_{conc}.jsonl")) == conc * 3
    run = orjson.loads((tmp_path / "run.json").read_bytes())
    assert run["target"] == "exact-fake" and [p["conc"] for p in run["points"]] == [2, 4]
    assert (tmp_path / "sweep.csv").read_text().count("\n") == 3
    # warmups and measured requests each carry their own id, unique within the run
    assert len(server.sent) == len(set(server.sent)) == (2 + 4) * (1 + 3)


async def test_the_open_loop_runs_on_the_clock_it_is_given(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """At 10 req/s on a virtual clock, arrivals follow the seeded gaps exactly."""
    clock = VirtualClock()
    outcome = await sweep_points(
        spec(tmp_path, conc=(64,), prompts_per_conc=1, warmup_per_conc=0, request_rate=10.0),
        SweepOptions(
            tokenizer=tokenizer, backend=ExactServer(clock), clock=clock, sleep=clock.sleep
        ),
    )
    records = read_jsonl(tmp_path / "requests_conc_64.jsonl")
    assert len(records) == 64
    starts = sorted(r.start_ns for r in records)
    span_s = (starts[-1] - starts[0]) / 1e9
    assert 63 / 10.0 * 0.6 < span_s < 63 / 10.0 * 1.6  # 63 Poisson gaps of mean 0.1 s
    assert all(r.queue_ns == 0 for r in records)  # 64 slots: nobody waited
    assert outcome.points[0].result.identity.request_rate == 10.0


async def test_shards_send_exactly_the_unsharded_requests_at_the_same_times(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """Open loop over 3 shards: each sends its slots' requests at their own arrival
    times of the whole point, so the union is the single-process plan (same ids, bodies,
    intended send times); each shard's file holds its share, labelled as such."""

    def sent(results: Path) -> dict[int, int]:
        records = read_jsonl(results / "requests_conc_5.jsonl")
        return {r.request_id: r.scheduled_ns for r in records}

    base = spec(tmp_path, conc=(5,), prompts_per_conc=3, warmup_per_conc=0, request_rate=50.0)
    whole_clock = VirtualClock()
    await sweep_points(
        spec(tmp_path / "one", conc=(5,), prompts_per_conc=3, warmup_per_conc=0, request_rate=50.0),
        SweepOptions(
            tokenizer=tokenizer,
            backend=ExactServer(whole_clock),
            clock=whole_clock,
            sleep=whole_clock.sleep,
        ),
    )
    union: dict[int, int] = {}
    for index in range(3):
        clock = VirtualClock()  # every shard starts at the same (virtual) instant
        results = tmp_path / f"shard{index}"
        shard = base.with_(shard_index=index, shard_count=3, results_dir=results)
        await sweep_points(
            shard,
            SweepOptions(
                tokenizer=tokenizer, backend=ExactServer(clock), clock=clock, sleep=clock.sleep
            ),
        )
        mine = sent(results)
        assert not set(mine) & set(union)
        assert all(request_id % 5 % 3 == index for request_id in mine)  # slot i mod 5
        union.update(mine)
        result = orjson.loads((results / "conc_5.json").read_bytes())
        assert result["shard"] == f"{index}/3" and result["max_concurrency"] == 5
        assert result["planned_requests"] == len(mine)
    assert union == sent(tmp_path / "one")


class LateServer(ExactServer):
    """Holds every send back by DELAY_MS after it was due, as a slow client would."""

    DELAY_MS = 25

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: OnRecord,
    ) -> RequestRecord:
        def shifted(record: RequestRecord) -> RequestRecord:
            return dataclasses.replace(record, scheduled_ns=record.scheduled_ns - late)

        late = self.DELAY_MS * MS
        # the same exchange, but it was due DELAY_MS before it was actually sent
        record = await super().send(
            request,
            x_request_id=x_request_id,
            conc=conc,
            scheduled_ns=scheduled_ns + late,
            on_record=lambda r: on_record(shifted(r)),
        )
        return shifted(record)


@pytest.mark.parametrize(("server_type", "late_ms"), [(ExactServer, 0), (LateServer, 25)])
async def test_latency_from_schedule_adds_exactly_the_send_delay(
    tmp_path: Path, tokenizer: Tokenizer, server_type: type[ExactServer], late_ms: int
) -> None:
    """Open loop at 10 req/s: never late, TTFT from the schedule is the client TTFT;
    sends held back by 25 ms make it exactly 25 ms more, and goodput on it sees that."""
    clock = VirtualClock()
    chunks = 16 // TOKENS_PER_CHUNK
    e2el_ms = TTFT_MS + (chunks - 1) * ITL_MS
    slos = {"ttft": TTFT_MS + 10.0}  # met from the send, missed from the schedule when late
    await sweep_points(
        spec(
            tmp_path,
            conc=(8,),
            prompts_per_conc=1,
            warmup_per_conc=0,
            request_rate=10.0,
            slos_ms=slos,
        ),
        SweepOptions(
            tokenizer=tokenizer, backend=server_type(clock), clock=clock, sleep=clock.sleep
        ),
    )
    result = orjson.loads((tmp_path / "conc_8.json").read_bytes())
    assert result["p99_ttft_ms"] == result["mean_ttft_ms"] == TTFT_MS
    assert result["mean_queue_time_ms"] == pytest.approx(late_ms)
    for stat in ("mean", "median", "p99"):
        assert result[f"{stat}_ttft_from_schedule_ms"] == pytest.approx(TTFT_MS + late_ms)
        assert result[f"{stat}_e2el_from_schedule_ms"] == pytest.approx(e2el_ms + late_ms)
    assert result["good_requests"] == 8
    assert result["good_requests_from_schedule"] == (8 if late_ms == 0 else 0)
