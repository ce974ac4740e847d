"""--merge-steps-prob: vLLM's frontend merging step outputs when it falls behind.

Real vLLM was seen streaming first chunks of 2 tokens and decode chunks of several steps
(notes/vllm_vs_sim.md item 3); the simulator reproduces that on demand, deterministically
under the seed, and its trace records the events actually sent.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import aiohttp

from loadgen.sim.trace import read_trace
from tests.support.sim_helpers import (
    SimFactory,
    chunk_token_ids,
    metric,
    parse_metrics,
    post_stream,
)

BODY = {
    "model": "tiny",
    "prompt": "Count to one hundred.",
    "ignore_eos": True,
    "return_token_ids": True,
    "max_tokens": 24,
    "stream_options": {"include_usage": True},
}
SEEDS = range(40, 48)


async def chunk_sizes(
    sim_factory: SimFactory, trace: Path | None = None, **config: Any
) -> tuple[list[list[int]], dict[str, float]]:
    fields = {"model": "tiny", "spec_tokens": 0, "trace_path": str(trace) if trace else None}
    async with sim_factory(**{**fields, **config}) as sim, aiohttp.ClientSession() as session:
        sizes = []
        for seed in SEEDS:
            events = await post_stream(
                session,
                sim.base_url + "/v1/completions",
                {**BODY, "seed": seed},
                headers={"X-Request-Id": f"r{seed}"},
            )
            sizes.append([len(ids) for ids in chunk_token_ids(events)])
        async with session.get(sim.base_url + "/metrics") as response:
            samples = parse_metrics(await response.text())
    return sizes, samples


async def test_off_by_default_every_step_is_one_event(sim_factory: SimFactory) -> None:
    sizes, _ = await chunk_sizes(sim_factory)
    assert all(s == [1] * 24 for s in sizes)


async def test_merged_steps_are_deterministic_and_truthfully_traced(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    sizes, samples = await chunk_sizes(sim_factory, trace, merge_steps_prob=0.4, seed=3)
    again, _ = await chunk_sizes(sim_factory, merge_steps_prob=0.4, seed=3)
    assert sizes == again
    assert all(sum(s) == 24 for s in sizes)
    assert any(s[0] > 1 for s in sizes)  # a first chunk carrying more than one token
    assert any(max(s[1:]) > 1 for s in sizes)  # a decode chunk carrying several steps
    merged = sum(24 - len(s) for s in sizes)
    assert 0.2 * 24 * len(SEEDS) < merged < 0.6 * 24 * len(SEEDS)
    by_id = {t["x_request_id"]: t for t in read_trace(trace)}
    for seed, streamed in zip(SEEDS, sizes, strict=True):
        chunks = by_id[f"r{seed}"]["chunks"]
        assert [c[2] for c in chunks] == streamed  # one entry per event actually sent
        assert all(b[0] > a[0] for a, b in itertools.pairwise(chunks))
    # The engine still observes one inter-token latency per decode step, as vLLM's does.
    itl = metric(samples, "vllm:inter_token_latency_seconds_count")
    assert itl == 23 * len(SEEDS)


async def test_with_mtp_a_merged_chunk_carries_several_steps(sim_factory: SimFactory) -> None:
    sizes, _ = await chunk_sizes(
        sim_factory, merge_steps_prob=0.5, spec_tokens=3, acceptance=(1.0, 1.0, 1.0)
    )
    assert all(sum(s) == 24 for s in sizes)
    assert any(size in (5, 8) for s in sizes for size in s)  # 1+4 or 4+4, as vLLM showed
    # Steps emit 1, 4, 4, 4, 4, 4, 3 tokens: every chunk ends on a step boundary.
    step_ends = set(itertools.accumulate([1, 4, 4, 4, 4, 4, 3]))
    for s in sizes:
        assert set(itertools.accumulate(s)) <= step_ends
