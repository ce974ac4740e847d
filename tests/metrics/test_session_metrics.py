"""The session view of the live metrics, read back from a real Prometheus that scraped
loadgen's exporter and the simulator (prefix caching on) during an agentic trace replay:
the live figures must equal the result file's, and every query of the dashboard's
Sessions row must return data."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from loadgen.config.args import spec_from_argv
from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions
from loadgen.sinks.prometheus import live_metrics
from tests.support.real_prometheus import (
    has_data,
    load_dashboard,
    prom_get,
    prometheus,
    query_panels,
    regex_literal,
    substitute,
    wait_scraped,
)

MODEL = "sim/agent-v4"
CONC = 2
BLOCK = 64
GAP_S = 1.5  # between root turns: the run lasts several scrapes (1 s apart)


def request(t: float, tokens: int, ids: list[int], out: int) -> dict[str, Any]:
    return {
        "t": t,
        "type": "s",
        "in": tokens,
        "out": out,
        "hash_ids": ids,
        "think_time": 0.0,
        "api_time": 0.3,
    }


def blocks(prefix: list[int], tokens: int, first_new: int) -> list[int]:
    """The hash ids of a `tokens`-token prompt: `prefix` (shared blocks), then new ones."""
    return [*prefix, *range(first_new, first_new + math.ceil(tokens / BLOCK) - len(prefix))]


def write_traces(path: Path) -> None:
    """Two trees, contexts in the first two TTFT bins (below and above 8192 tokens); the
    first tree's opening turn spawns a subagent of two turns. Each turn extends the
    previous one's blocks, so the prefix cache hits."""
    r0 = blocks([], 4000, 1000)
    r1 = blocks(r0, 8600, 1100)
    s0 = blocks(r0[:20], 2000, 5000)
    subagent = {
        "type": "subagent",
        "t": 0.35,
        "requests": [request(0.35, 2000, s0, 6), request(0.7, 2100, blocks(s0, 2100, 5100), 5)],
    }
    first = {
        "id": "live-1",
        "block_size": BLOCK,
        "requests": [
            request(0.0, 4000, r0, 8),
            subagent,
            request(0.3 + GAP_S, 8600, r1, 8),
            request(2 * (0.3 + GAP_S), 9000, blocks(r1, 9000, 1300), 6),
        ],
    }
    q0 = blocks([], 3000, 2000)
    second = {
        "id": "live-2",
        "block_size": BLOCK,
        "requests": [
            request(0.0, 3000, q0, 7),
            request(0.3 + GAP_S, 8300, blocks(q0, 8300, 2100), 9),
        ],
    }
    path.write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in (first, second)))


def sim_config() -> Any:
    from loadgen.sim.server import SimConfig

    return SimConfig(
        model=MODEL,
        enable_prefix_caching=True,
        block_size=BLOCK,
        enable_prompt_tokens_details=True,
        max_num_batched_tokens=65536,
        spec_tokens=0,
        step_fixed_ms=1.0,
        prefill_token_us=2.0,
        decode_token_us=20.0,
    )


class Prom:
    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url

    async def query(self, expr: str) -> list[dict[str, Any]]:
        data = await prom_get(self.session, f"{self.url}/api/v1/query", {"query": expr})
        result: list[dict[str, Any]] = data["result"]
        return result

    async def value(self, expr: str) -> float:
        [series] = await self.query(expr)
        return float(series["value"][1])

    async def by(self, label: str, expr: str) -> dict[str, float]:
        return {s["metric"][label]: float(s["value"][1]) for s in await self.query(expr)}


@pytest.mark.prometheus
async def test_live_session_metrics_equal_the_result_file(tmp_path: Path) -> None:
    from loadgen.run.sweep import sweep_points
    from loadgen.sim.server import running_simulator
    from loadgen.tokenizer import load_tokenizer

    tokenizer = await asyncio.to_thread(load_tokenizer)
    traces = tmp_path / "traces.jsonl"
    write_traces(traces)
    results = tmp_path / "results"
    async with running_simulator(sim_config(), tokenizer=tokenizer) as sim:
        spec = spec_from_argv(
            [
                "--base-url",
                sim.base_url,
                "--dataset",
                str(traces),
                "--conc",
                str(CONC),
                "--start-ratio",
                "0,0",
                "--results",
                str(results),
                "--no-progress",
                "--seed",
                "5",
            ]
        )
        async with (
            live_metrics(
                model=MODEL, endpoint=spec.target.endpoint, points=1, spec_tokens=None, port=0
            ) as (exporter, observer),
            prometheus(tmp_path, {"loadgen": exporter.port, "vllm": sim.port}) as url,
            aiohttp.ClientSession() as session,
        ):
            await wait_scraped(session, url, jobs=2)
            outcome = await sweep_points(spec, SweepOptions(observer=observer, tokenizer=tokenizer))
            assert outcome.exit_code == 0
            await asyncio.sleep(2.5)  # two more scrapes: the final counts are in
            prom = Prom(session, url)
            result = orjson.loads((results / f"conc_{CONC}.json").read_bytes())
            records = read_jsonl(results / f"requests_conc_{CONC}.jsonl")
            await check_figures(prom, result, records)
            await check_live_gauges(prom)
            await check_session_panels(prom)


async def check_figures(prom: Prom, result: dict[str, Any], records: list[RequestRecord]) -> None:
    sel = f'model_name="{MODEL}", conc="{CONC}"'
    assert len(records) == 7 and result["failed"] == 0
    assert await prom.value(f"sum(loadgen_session_turns_total{{{sel}}})") == len(records)
    prompt = await prom.value(f"sum(loadgen_session_prompt_tokens_total{{{sel}}})")
    assert prompt == sum(r.input_len for r in records) == result["prompt_tokens_sent"]
    cached = await prom.value(f"sum(loadgen_session_cached_tokens_total{{{sel}}})")
    assert cached == sum(r.cached_tokens or 0 for r in records) == result["client_cached_tokens"]
    assert cached > 0
    reported = await prom.value(f"sum(loadgen_session_cache_reported_prompt_tokens_total{{{sel}}})")
    assert cached / reported == pytest.approx(result["client_prefix_hit_rate"], rel=1e-12)
    theoretical = await prom.value(f"sum(loadgen_session_theoretical_cached_tokens_total{{{sel}}})")
    assert theoretical == result["theoretical_cached_tokens"] > 0
    # TTFT by context: one histogram series per bin, counting what the result file counts
    expected = {
        f"{row['context_min']}-{row['context_max']}": row["requests"]
        for row in result["ttft_by_context"]
    }
    assert expected == {"0-8192": 4, "8192-16384": 3}
    counts = await prom.by(
        "context_bin",
        f"sum by (context_bin) (loadgen_session_time_to_first_token_seconds_count{{{sel}}})",
    )
    assert counts == expected
    sums = await prom.by(
        "context_bin",
        f"sum by (context_bin) (loadgen_session_time_to_first_token_seconds_sum{{{sel}}})",
    )
    for label, bounds in (("0-8192", (0, 8192)), ("8192-16384", (8192, 16384))):
        ttfts = [(r.ttft_ns or 0) / 1e9 for r in records if bounds[0] <= r.input_len < bounds[1]]
        assert sums[label] == pytest.approx(sum(ttfts), rel=1e-9)


async def check_live_gauges(prom: Prom) -> None:
    """Sessions were live while the replay ran (seen by at least one scrape), trees never
    more than the lanes, and both are back at 0 at the end (the replay's own
    session_finished hooks: the exporter's end-of-sweep reset has not run yet)."""
    sel = f'model_name="{MODEL}"'
    for name in ("loadgen_sessions_live", "loadgen_session_trees_live"):
        assert await prom.value(f"max_over_time({name}{{{sel}}}[5m])") > 0, name
        assert await prom.value(f"{name}{{{sel}}}") == 0, name
    assert await prom.value(f"max_over_time(loadgen_session_trees_live{{{sel}}}[5m])") <= CONC


async def check_session_panels(prom: Prom) -> None:
    """Every query of the Sessions row has data, for all servers and for loadgen plus the
    simulator picked by the instance variable."""
    panels = query_panels(load_dashboard(), rows={"Sessions"})
    assert len(panels) == 4
    targets = await prom.by("job", "up")
    assert targets == {"loadgen": 1, "vllm": 1}
    instances = await prom.by("instance", "up")
    chosen = "(" + "|".join(regex_literal(i) for i in instances) + ")"
    empty = []
    for instance in (".*", chosen):
        values = {
            "model": regex_literal(MODEL),
            "instance": instance,
            "conc": ".*",
            "__rate_interval": "1m",
        }
        for p in panels:
            for target in p["targets"]:
                query = substitute(target["expr"], values)
                if not has_data(await prom.query(query)):
                    empty.append(f"{p['title']} / {target['legendFormat']}: {query}")
    assert not empty, "session panels without data:\n" + "\n".join(empty)
