"""The simulator's prefix cache: vLLM's counters and cached_tokens, cheaper prefill on
hits, LRU eviction, on by default
as vLLM >= 0.8, and nothing of it with --no-enable-prefix-caching."""

from __future__ import annotations

from time import perf_counter

import aiohttp
import pytest

from loadgen.sim.prefix_cache import PrefixCache, block_hashes
from tests.support.sim_helpers import SimFactory, final_usage, metric, parse_metrics, post_stream

# Prefill dominates: 4096 uncached tokens cost ~82 ms, a cached prefix almost nothing.
SLOW_PREFILL = {
    "prefill_token_us": 20.0,
    "step_fixed_ms": 1.0,
    "spec_tokens": 0,
    "max_num_batched_tokens": 16384,
    "enable_prefix_caching": True,
    "enable_prompt_tokens_details": True,
    "block_size": 16,
}


def test_pool_hits_leading_blocks_only_and_evicts_least_recently_used() -> None:
    cache = PrefixCache(block_size=4, num_blocks=3)
    a = block_hashes(list(range(12)), 4)  # 3 full blocks
    assert cache.lookup(a, 12) == 0
    cache.insert(a, 0, 3)
    assert cache.lookup(a, 12) == 8  # capped: one token is always computed
    assert cache.lookup(a, 13) == 12
    b = block_hashes([99, *range(1, 12)], 4)  # differs in block 0: nothing matches
    assert cache.lookup(b, 13) == 0
    cache.insert(b, 0, 1)  # evicts the least recently used block: a's first
    assert len(cache) == 3
    assert cache.lookup(a, 13) == 0  # a prefix without its first block hits nothing
    assert cache.lookup(b, 13) == 4


PROMPT = [1000 + i % 5000 for i in range(4096)]
BODY = {
    "prompt": PROMPT,
    "max_tokens": 2,
    "ignore_eos": True,
    "stream_options": {"include_usage": True},
}


async def test_hits_are_counted_and_reported(sim_factory: SimFactory) -> None:
    async with sim_factory(**SLOW_PREFILL) as sim, aiohttp.ClientSession() as session:
        url = sim.base_url + "/v1/completions"
        first = await post_stream(session, url, BODY)
        second = await post_stream(session, url, BODY)
        async with session.get(sim.base_url + "/metrics") as response:
            samples = parse_metrics(await response.text())
    assert final_usage(first)["prompt_tokens_details"] == {"cached_tokens": 0}
    assert final_usage(second)["prompt_tokens_details"] == {"cached_tokens": 4080}
    assert metric(samples, "vllm:prefix_cache_queries_total") == 2 * 4096
    assert metric(samples, "vllm:prefix_cache_hits_total") == 4080


@pytest.mark.exclusive
async def test_a_hit_cuts_ttft(sim_factory: SimFactory) -> None:
    """Subject: the simulator's paced prefill. 4096 prompt tokens at 20 us each take
    > 80 ms cold; the same prompt again, 4080 of them cached, takes under half that.
    Both times are printed; run alone, as another test's load would be what they measure."""
    async with sim_factory(**SLOW_PREFILL) as sim, aiohttp.ClientSession() as session:
        url = sim.base_url + "/v1/completions"
        start = perf_counter()
        await post_stream(session, url, BODY)
        cold = perf_counter() - start
        start = perf_counter()
        second = await post_stream(session, url, BODY)
        warm = perf_counter() - start
    print(f"prefix cache: 4096-token prompt {cold * 1e3:.1f} ms cold, {warm * 1e3:.1f} ms warm")
    assert final_usage(second)["prompt_tokens_details"] == {"cached_tokens": 4080}
    assert cold > 0.08 and warm < cold / 2, (cold, warm)


async def test_on_by_default_as_vllm_details_stay_opt_in(sim_factory: SimFactory) -> None:
    """vLLM >= 0.8 caches prefixes unless told not to; prompt_tokens_details stays opt-in."""
    prompt = list(range(1000, 1300))  # 300 tokens: 18 full 16-token blocks
    body = {"prompt": prompt, "max_tokens": 2, "stream_options": {"include_usage": True}}
    async with sim_factory() as sim, aiohttp.ClientSession() as session:
        url = sim.base_url + "/v1/completions"
        await post_stream(session, url, body)
        events = await post_stream(session, url, body)
        async with session.get(sim.base_url + "/metrics") as response:
            samples = parse_metrics(await response.text())
    assert "prompt_tokens_details" not in final_usage(events)
    assert metric(samples, "vllm:prefix_cache_hits_total") == 18 * 16  # default block 16


async def test_off_with_no_enable_no_hits(sim_factory: SimFactory) -> None:
    prompt = list(range(1000, 1300))
    body = {"prompt": prompt, "max_tokens": 2, "stream_options": {"include_usage": True}}
    async with sim_factory(enable_prefix_caching=False) as sim, aiohttp.ClientSession() as session:
        url = sim.base_url + "/v1/completions"
        await post_stream(session, url, body)
        events = await post_stream(session, url, body)
        async with session.get(sim.base_url + "/metrics") as response:
            samples = parse_metrics(await response.text())
    assert "prompt_tokens_details" not in final_usage(events)
    assert metric(samples, "vllm:prefix_cache_hits_total") == 0
