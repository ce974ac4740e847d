"""The engine model seen from a client: determinism, batching, prefill, MTP, metrics, trace."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path

import aiohttp
from tokenizers import Tokenizer

from loadgen.metrics.server import parse_metrics as server_snapshot
from loadgen.sim.config import SimConfig
from loadgen.sim.detok import EOS_ID, build_token_table
from loadgen.sim.engine import step_ns
from loadgen.sim.plan import PlanParams, make_plan
from loadgen.sim.trace import read_trace
from loadgen.tokenizer import encode
from tests.support.sim_helpers import (
    SimFactory,
    chunk_token_ids,
    final_usage,
    metric,
    parse_metrics,
    post_stream,
)

MODEL = SimConfig().model
BODY = {
    "model": MODEL,
    "prompt": "Count to one hundred.",
    "ignore_eos": True,
    "return_token_ids": True,
    "stream_options": {"include_usage": True},
}


async def run_requests(sim_factory: SimFactory, count: int, **config: object) -> list[list[int]]:
    async with sim_factory(**config) as sim, aiohttp.ClientSession() as session:
        chunks = []
        for _ in range(count):
            events = await post_stream(
                session, sim.base_url + "/v1/completions", {**BODY, "max_tokens": 30}
            )
            chunks.append([len(c) for c in chunk_token_ids(events)])
            chunks.append([t for c in chunk_token_ids(events) for t in c])
        return chunks


async def test_same_seed_same_tokens_and_chunk_sizes(sim_factory: SimFactory) -> None:
    first = await run_requests(sim_factory, 3, seed=11)
    again = await run_requests(sim_factory, 3, seed=11)
    other = await run_requests(sim_factory, 3, seed=12)
    assert first == again
    assert first != other


async def test_request_seed_overrides_server_seed(sim_factory: SimFactory) -> None:
    outputs = []
    for server_seed in (1, 2):
        async with sim_factory(seed=server_seed) as sim, aiohttp.ClientSession() as session:
            for request_seed in (99, -5):
                events = await post_stream(
                    session,
                    sim.base_url + "/v1/completions",
                    {**BODY, "max_tokens": 20, "seed": request_seed},
                )
                outputs.append(chunk_token_ids(events))
    assert outputs[0] == outputs[2] and outputs[1] == outputs[3]
    assert outputs[0] != outputs[1]


async def test_spec_decode_metrics_match_what_was_streamed(
    sim_factory: SimFactory, tokenizer: Tokenizer
) -> None:
    acceptance = (0.7, 0.5)
    table = build_token_table(tokenizer)
    seeds = list(range(100, 112))
    async with (
        sim_factory(spec_tokens=2, acceptance=acceptance) as sim,
        aiohttp.ClientSession() as session,
    ):
        url = sim.base_url + "/v1/completions"
        runs = await asyncio.gather(
            *(post_stream(session, url, {**BODY, "max_tokens": 50, "seed": s}) for s in seeds)
        )
        async with session.get(sim.base_url + "/metrics") as response:
            samples = parse_metrics(await response.text())
    drafts = accepted = 0
    per_position = [0, 0]
    for seed, events in zip(seeds, runs, strict=True):
        sizes = [len(c) for c in chunk_token_ids(events)]
        assert sum(sizes) == 50 == final_usage(events)["completion_tokens"]
        assert sizes[0] == 1 and all(1 <= s <= 3 for s in sizes[1:])
        steps = len(sizes) - 1  # one decode step per chunk after the first
        plan = make_plan(table, seed, PlanParams(50, 0, True, 0.0, 2, acceptance, 0.02))
        drawn = [plan.accepted_at(step) for step in range(steps)]
        # Every decode chunk but a cut-short last one carries 1 + the accepted drafts.
        assert [1 + a for a in drawn[:-1]] == sizes[1:-1]
        drafts += steps
        accepted += sum(drawn)
        for a in drawn:
            for position in range(a):
                per_position[position] += 1
    assert metric(samples, "vllm:spec_decode_num_drafts_total") == drafts
    assert metric(samples, "vllm:spec_decode_num_draft_tokens_total") == 2 * drafts
    assert metric(samples, "vllm:spec_decode_num_accepted_tokens_total") == accepted
    for position, count in enumerate(per_position):
        assert (
            metric(
                samples,
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                position=str(position),
            )
            == count
        )
    assert metric(samples, "vllm:generation_tokens_total") == 50 * len(seeds)
    assert metric(samples, "vllm:request_success_total", finished_reason="length") == len(seeds)
    assert metric(samples, "vllm:inter_token_latency_seconds_count") == drafts
    assert metric(samples, "vllm:time_to_first_token_seconds_count") == len(seeds)
    assert metric(samples, "vllm:num_requests_running") == 0


async def test_without_mtp_every_chunk_is_one_token(sim_factory: SimFactory) -> None:
    async with sim_factory(spec_tokens=0) as sim, aiohttp.ClientSession() as session:
        events = await post_stream(
            session, sim.base_url + "/v1/completions", {**BODY, "max_tokens": 12}
        )
        async with session.get(sim.base_url + "/metrics") as response:
            text = await response.text()
    assert [len(c) for c in chunk_token_ids(events)] == [1] * 12
    assert "spec_decode" not in text


async def test_stream_interval_merges_steps(sim_factory: SimFactory) -> None:
    async with (
        sim_factory(spec_tokens=2, acceptance=(1.0, 1.0), stream_interval=3) as sim,
        aiohttp.ClientSession() as session,
    ):
        events = await post_stream(
            session, sim.base_url + "/v1/completions", {**BODY, "max_tokens": 25}
        )
    assert [len(c) for c in chunk_token_ids(events)] == [1, 9, 9, 6]


async def test_trace_records_ground_truth_and_never_drifts(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    config = {"trace_path": str(trace), "step_fixed_ms": 2.0, "spec_tokens": 2}
    async with sim_factory(**config) as sim, aiohttp.ClientSession() as session:
        events = await post_stream(
            session,
            sim.base_url + "/v1/completions",
            {**BODY, "max_tokens": 40},
            headers={"X-Request-Id": "r-1"},
        )
        (line,) = read_trace(trace)  # readable while the simulator still serves
    decode_step = step_ns(sim.config, 0, 3, 1)
    assert line["x_request_id"] == "r-1"
    assert line["prompt_tokens"] == final_usage(events)["prompt_tokens"]
    assert line["arrival_ns"] <= line["first_sched_ns"] <= line["chunks"][0][0]
    assert [c[2] for c in line["chunks"]] == [len(c) for c in chunk_token_ids(events)]
    assert all(sent >= intended for intended, sent, _ in line["chunks"])
    intended = [c[0] for c in line["chunks"]]
    # Absolute deadlines: every decode step lands exactly one step after the previous one.
    assert {b - a for a, b in itertools.pairwise(intended[1:])} == {decode_step}


async def test_max_num_seqs_queues_the_rest(sim_factory: SimFactory, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    async with (
        sim_factory(max_num_seqs=2, trace_path=str(trace)) as sim,
        aiohttp.ClientSession() as session,
    ):
        url = sim.base_url + "/v1/completions"
        await asyncio.gather(
            *(post_stream(session, url, {**BODY, "max_tokens": 30}) for _ in range(4))
        )
    lines = sorted(read_trace(trace), key=lambda r: r["first_sched_ns"])
    earliest_finish = min(r["chunks"][-1][0] for r in lines[:2])
    assert lines[2]["first_sched_ns"] >= earliest_finish


async def test_chunked_prefill_spreads_a_long_prompt_over_steps(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    async with (
        sim_factory(max_num_batched_tokens=64, step_fixed_ms=2.0, trace_path=str(trace)) as sim,
        aiohttp.ClientSession() as session,
    ):
        await post_stream(
            session,
            sim.base_url + "/v1/completions",
            {**BODY, "prompt": list(range(1000, 1300)), "max_tokens": 2},
        )
    (line,) = read_trace(trace)
    assert line["prompt_tokens"] == 300
    # ceil(300 / 64) = 5 prefill steps of at least 2 ms before the first token.
    assert line["chunks"][0][0] - line["first_sched_ns"] >= 5 * 2_000_000


async def test_eos_after_min_tokens_without_ignore_eos(sim_factory: SimFactory) -> None:
    async with sim_factory(eos_prob=1.0) as sim, aiohttp.ClientSession() as session:
        body = {**BODY, "ignore_eos": False, "min_tokens": 3, "max_tokens": 50}
        events = await post_stream(session, sim.base_url + "/v1/completions", body)
    ids = [t for c in chunk_token_ids(events) for t in c]
    assert ids[-1] == EOS_ID and len(ids) == 4
    assert final_usage(events)["completion_tokens"] == 4
    assert events[-3]["choices"][0]["finish_reason"] == "stop"


async def test_prompt_forms_and_add_special_tokens(
    sim_factory: SimFactory, tokenizer: Tokenizer
) -> None:
    text = "A prompt to count."
    expected = len(encode(tokenizer, text))
    async with sim_factory(add_bos=True) as sim, aiohttp.ClientSession() as session:
        url = sim.base_url + "/v1/completions"
        with_bos = await post_stream(session, url, {**BODY, "prompt": text, "max_tokens": 2})
        without = await post_stream(
            session, url, {**BODY, "prompt": text, "max_tokens": 2, "add_special_tokens": False}
        )
        as_ids = await post_stream(session, url, {**BODY, "prompt": [5, 6, 7], "max_tokens": 2})
    assert final_usage(with_bos)["prompt_tokens"] == expected + 1
    assert final_usage(without)["prompt_tokens"] == expected
    assert final_usage(as_ids)["prompt_tokens"] == 3


async def test_leaving_the_context_with_open_streams_stops_promptly(
    sim_factory: SimFactory,
) -> None:
    async with aiohttp.ClientSession() as session:
        started = asyncio.get_running_loop().time()
        async with sim_factory() as sim:
            response = await session.post(
                sim.base_url + "/v1/completions",
                json={**BODY, "max_tokens": 100_000, "stream": True},
            )
            await response.content.readuntil(b"\n\n")
        assert asyncio.get_running_loop().time() - started < 5
        rest = b""
        with contextlib.suppress(aiohttp.ClientPayloadError):
            rest = await response.content.read()
        response.close()  # its connection is dead: not for the pool (else a ResourceWarning)
        assert b"[DONE]" not in rest


async def test_each_data_parallel_engine_labels_its_own_steps(sim_factory: SimFactory) -> None:
    """As vLLM's frontend does, every engine's step histogram carries engine="<i>": the
    count loadgen's step reconstruction must find, and each engine's steps on its own."""
    async with (
        sim_factory(data_parallel_size=3) as sim,
        aiohttp.ClientSession() as session,
    ):
        url = sim.base_url + "/v1/completions"
        await asyncio.gather(
            *(post_stream(session, url, {**BODY, "max_tokens": 8, "seed": s}) for s in range(6))
        )
        async with session.get(sim.base_url + "/metrics") as response:
            text = await response.text()
    assert server_snapshot(text).engines == 3
    steps = {
        line.split('engine="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:iteration_tokens_total_count{")
    }
    # six requests balanced over three engines: each engine stepped
    assert sorted(steps) == ["0", "1", "2"] and all(n > 0 for n in steps.values()), steps
