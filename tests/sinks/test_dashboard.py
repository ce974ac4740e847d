"""The Grafana dashboard: structure, and every panel query answered by a real Prometheus
that scraped loadgen and the simulator during a short sweep (Grafana itself cannot run
here, so its queries are run the way Grafana would send them)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client import CollectorRegistry

from loadgen.run.sweep import SweepOptions
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver, serve_metrics
from tests.support.paths import ROOT
from tests.support.real_prometheus import (
    DASHBOARD_PATH,
    has_data,
    label_values,
    load_dashboard,
    prom_get,
    prometheus,
    query_panels,
    regex_literal,
    substitute,
    wait_scraped,
)

MODEL = "sim/model-v4.1"  # a "/" and a "." exercise the regex escaping of $model
# Checked against a session run by tests/metrics/test_session_metrics.py: a single-turn sweep
# has no session series.
SESSION_ROWS = {"Sessions"}
# Checked against simulators speaking each engine's dialect (below): the vLLM sweep has none.
ENGINE_ROW = "Server (SGLang, TensorRT-LLM, ATOM, llama.cpp)"
# Checked against a prefill/decode simulator read per role (below): a plain sweep has no roles.
ROLE_ROW = "Disaggregated serving (--server-metrics ROLE=URL)"


def test_committed_json_is_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("generate", ROOT / "dashboards" / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    assert DASHBOARD_PATH.read_text() == generate.render(), (
        "dashboards/loadgen.json is stale: run python dashboards/generate.py"
    )


def test_panel_ids_unique_and_grid_inside_24_columns_without_overlap() -> None:
    panels = load_dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for p in panels:
        grid = p["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0
        assert grid["x"] + grid["w"] <= 24, f"panel {p['id']} {p['title']} beyond column 24"
        cells = {
            (grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])
        }
        assert not cells & occupied, f"panel {p['id']} {p['title']} overlaps another"
        occupied |= cells


def test_every_panel_has_a_unit_and_uses_the_datasource_variable() -> None:
    for p in query_panels(load_dashboard()):
        assert p["fieldConfig"]["defaults"].get("unit"), f"{p['title']}: no unit"
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], f"{p['title']}: no query"
        for target in p["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", p["title"]
            assert target["expr"].strip()


def test_variables_and_schema() -> None:
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 38  # Grafana 10+
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("model", "instance", "conc"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert "label_values(" in variables[name]["definition"]
    assert variables["model"]["definition"].endswith(", model_name)")  # vLLM's label
    assert variables["instance"]["multi"] is True
    exprs = [t["expr"] for p in query_panels(dashboard) for t in p["targets"]]
    unlabelled = re.compile(r"\b(atom|llamacpp):")  # engines whose series have no model_name
    assert all(
        "$model" in e or "loadgen_event_loop_lag" in e or unlabelled.search(e) for e in exprs
    ), "every query except the client-health one and ATOM's / llama.cpp's filters by model"
    assert all('instance=~"$instance"' in e for e in exprs), "every query filters by server"
    assert not any(re.search(r"\bmodel=", e) for e in exprs), "the label is model_name"
    assert any("$conc" in e for e in exprs)


def test_no_query_sums_over_servers() -> None:
    """Every aggregation of a vLLM series keeps `instance`: two servers serving one model
    name are two lines. (loadgen's own series are summed: a sharded run is one client.)"""
    aggregation = re.compile(r"\b(sum|max|min|avg)\b(?: by \(([^)]*)\))? \((?:rate\()?vllm:")
    seen = 0
    for p in query_panels(load_dashboard()):
        for target in p["targets"]:
            for _op, grouping in aggregation.findall(target["expr"]):
                seen += 1
                assert "instance" in grouping.split(", "), f"{p['title']}: {target['expr']}"
    assert seen >= 15


def test_the_issue_panels_are_there() -> None:
    exprs = " ".join(t["expr"] for p in query_panels(load_dashboard()) for t in p["targets"])
    for metric in (
        "loadgen_time_to_first_token_seconds",
        "loadgen_inter_chunk_latency_seconds",
        "loadgen_inter_token_latency_seconds",
        "loadgen_time_per_output_token_seconds",
        "loadgen_e2e_request_latency_seconds",
        "loadgen_output_tokens_total",
        "loadgen_prompt_tokens_total",
        "loadgen_requests_in_flight",
        "loadgen_target_concurrency",
        "loadgen_request_errors_total",
        "loadgen_decode_tokens_total",
        "loadgen_decode_chunks_total",
        "loadgen_decode_accepted_tokens_per_position_total",
        "loadgen_server_spec_decode_acceptance_length",
        "loadgen_event_loop_lag_seconds",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:prompt_tokens_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:num_preemptions_total",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "loadgen_sessions_live",
        "loadgen_session_trees_live",
        "loadgen_session_turns_total",
        "loadgen_session_cached_tokens_total",
        "loadgen_session_cache_reported_prompt_tokens_total",
        "loadgen_session_time_to_first_token_seconds",
        "loadgen_gpu_power_watts",
        "loadgen_joules_per_output_token",
        "loadgen_server_role_figure",
        "loadgen_ttft_part_milliseconds",
    ):
        assert metric in exprs, f"no panel shows {metric}"


async def sweep_with_exporter(sim_url: str, metrics: LoadgenMetrics, results: Path) -> None:
    from loadgen.config.args import spec_from_options
    from loadgen.run.sweep import sweep_points

    # GPU power sampled from the simulator's dcgm-exporter-format /gpu/metrics: the energy
    # row's gauges get data too.
    spec = spec_from_options(
        {
            "base_url": sim_url,
            "conc": "2,4",
            "isl": 64,
            "osl": 96,
            "prompts_per_conc": 4,
            "warmup_per_conc": 0,
            "encoder": "raw",
            "spec_tokens": 2,
            "no_progress": True,
            "results": str(results),
            "gpu_metrics": [f"{sim_url}/gpu/metrics"],
            "gpu_metrics_interval": 0.25,
        }
    )
    observer = MetricsObserver(
        metrics,
        model=MODEL,
        endpoint=spec.target.endpoint,
        points=len(spec.load.conc),
        spec_tokens=spec.scoring.spec_tokens,
    )
    await sweep_points(spec, SweepOptions(observer=observer))


@pytest.mark.prometheus
async def test_every_panel_query_returns_data_from_a_real_prometheus(tmp_path: Path) -> None:
    """loadgen drives one simulator; a second one serving the same model name stays idle.
    Every query has data for "All" and for one chosen server, and the two servers are
    two series, not one sum."""
    from loadgen.sim.server import SimConfig, running_simulator

    dashboard = load_dashboard()
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    sim_config = SimConfig(model=MODEL, spec_tokens=2, step_fixed_ms=12.0)
    async with (
        running_simulator(sim_config) as sim,
        running_simulator(sim_config) as twin,
        serve_metrics(registry) as exporter,
        prometheus(
            tmp_path, {"loadgen": exporter.port, "vllm": sim.port, "vllm-twin": twin.port}
        ) as prom,
        aiohttp.ClientSession() as session,
    ):
        await wait_scraped(session, prom, jobs=3)
        await sweep_with_exporter(sim.base_url, metrics, tmp_path / "results")
        await asyncio.sleep(2.5)  # two more scrapes: the final counts are in

        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        models = await label_values(session, prom, variables["model"]["definition"], {})
        assert MODEL in models
        model = {"model": regex_literal(MODEL)}
        instances = await label_values(session, prom, variables["instance"]["definition"], model)
        busy, idle, client = (f"127.0.0.1:{port}" for port in (sim.port, twin.port, exporter.port))
        assert {busy, idle, client} <= set(instances)
        concs = await label_values(
            session, prom, variables["conc"]["definition"], {**model, "instance": ".*"}
        )
        assert {"2", "4"} <= set(concs)

        chosen = "(" + "|".join(regex_literal(i) for i in (busy, client)) + ")"
        empty = []
        for instance, conc in ((".*", ".*"), (".*", "4"), (chosen, ".*")):
            values = {
                **model,
                "instance": instance,
                "conc": conc,
                "__rate_interval": "1m",
                "__range": "5m",
                "__interval": "5s",
            }
            for p in query_panels(dashboard, without={*SESSION_ROWS, ENGINE_ROW, ROLE_ROW}):
                for target in p["targets"]:
                    query = substitute(target["expr"], values)
                    data = await prom_get(session, f"{prom}/api/v1/query", {"query": query})
                    if not has_data(data["result"]):
                        empty.append(
                            f"[instance={instance} conc={conc}] {p['title']} / "
                            f"{target['legendFormat']}: {query}"
                        )
        assert not empty, "panels without data:\n" + "\n".join(empty)
        await check_energy_gauges(session, prom, tmp_path / "results")

        # One model name, two servers: two series, the idle one at 0, not one sum.
        prompt_rate = next(
            t["expr"]
            for p in query_panels(dashboard)
            for t in p["targets"]
            if "rate(vllm:prompt_tokens_total" in t["expr"]
        )
        data = await prom_get(
            session,
            f"{prom}/api/v1/query",
            {
                "query": substitute(
                    prompt_rate, {**model, "instance": ".*", "__rate_interval": "1m"}
                )
            },
        )
        by_instance = {r["metric"]["instance"]: float(r["value"][1]) for r in data["result"]}
        assert set(by_instance) == {busy, idle}
        assert by_instance[busy] > 0 and by_instance[idle] == 0


async def check_energy_gauges(session: aiohttp.ClientSession, prom: str, results: Path) -> None:
    """The energy row shows the result files' figures, point by point."""
    for conc in (2, 4):
        point = orjson.loads((results / f"conc_{conc}.json").read_bytes())
        assert point["power_valid"] is True, point["power_invalid_reasons"]
        for metric, field in (
            ("loadgen_gpu_power_watts", "avg_power_w"),
            ("loadgen_joules_per_output_token", "joules_per_output_token"),
        ):
            data = await prom_get(
                session, f"{prom}/api/v1/query", {"query": f'{metric}{{conc="{conc}"}}'}
            )
            [series] = data["result"]
            assert float(series["value"][1]) == pytest.approx(point[field], rel=1e-12), metric


def test_queries_aggregate_the_shards_of_a_sharded_run() -> None:
    """A sharded run's pods label every series shard="I": each loadgen panel must combine
    them (histograms by `sum by (le...)`, never a bare per-series query or a by (shard))."""
    for p in query_panels(load_dashboard()):
        for target in p["targets"]:
            expr = target["expr"]
            assert "shard" not in expr, expr
            if "histogram_quantile(" in expr:
                assert re.search(r"histogram_quantile\([0-9.]+, sum by \(le[,)]", expr), expr
            if expr.startswith("loadgen_"):
                raise AssertionError(f"{p['title']}: one series per shard: {expr}")


@pytest.mark.prometheus
async def test_the_engine_row_has_data_for_every_engine(tmp_path: Path) -> None:
    """One simulator per engine dialect (`loadgen sim --engine`), each scraped on that
    engine's path by a real Prometheus and given a little load: every line of the engine
    row (one per engine and figure) has data. SGLang, TensorRT-LLM and ATOM need GPUs, and
    llama.cpp a GGUF build, so the simulator speaks their dialects from the fixtures
    transcribed from their source (tests/fixtures/engines/)."""
    from loadgen.sim.server import SimConfig, running_simulator

    dashboard = load_dashboard()
    configs = {
        e: SimConfig(model=MODEL, spec_tokens=2, step_fixed_ms=2.0, engine=e)
        for e in ("sglang", "trtllm", "atom", "llamacpp")
    }
    async with contextlib.AsyncExitStack() as stack:
        sims = {
            e: await stack.enter_async_context(running_simulator(c)) for e, c in configs.items()
        }
        prom = await stack.enter_async_context(
            prometheus(
                tmp_path,
                {e: sim.port for e, sim in sims.items()},
                paths={"trtllm": "/prometheus/metrics"},
            )
        )
        session = await stack.enter_async_context(aiohttp.ClientSession())
        await wait_scraped(session, prom, jobs=4)
        for _round in range(3):  # load across several scrapes: the rates have two samples
            async with asyncio.TaskGroup() as group:
                for sim in sims.values():
                    for i in range(4):
                        group.create_task(one_request(session, sim.base_url, i))
            await asyncio.sleep(1.2)
        await asyncio.sleep(2.5)
        values = {
            "model": regex_literal(MODEL),
            "instance": ".*",
            "conc": ".*",
            "__rate_interval": "1m",
            "__range": "5m",
            "__interval": "5s",
        }
        empty = []
        panels = query_panels(dashboard, rows={ENGINE_ROW})
        assert len(panels) == 5
        for p in panels:
            for target in p["targets"]:
                query = substitute(target["expr"], values)
                data = await prom_get(session, f"{prom}/api/v1/query", {"query": query})
                if not has_data(data["result"]):
                    empty.append(f"{p['title']} / {target['legendFormat']}: {query}")
        assert not empty, "engine lines without data:\n" + "\n".join(empty)


async def one_request(session: aiohttp.ClientSession, base_url: str, i: int) -> None:
    body = {"model": MODEL, "prompt": f"engine row {i}", "max_tokens": 24, "stream": True}
    async with session.post(base_url + "/v1/completions", json=body) as response:
        assert response.status == 200
        await response.read()


@pytest.mark.prometheus
async def test_the_role_row_shows_the_result_files_figures(tmp_path: Path) -> None:
    """A prefill/decode simulator (`loadgen sim --pd 1:1`, a frontend, one prefill and one
    decode engine and the KV link, each role's Dynamo series on its own path) read per
    role: every line of the role row has data from a real Prometheus, and its TTFT parts
    and role TTFTs are the result files' figures."""
    from loadgen.config.args import spec_from_options
    from loadgen.run.sweep import sweep_points
    from loadgen.sim.server import SimConfig, running_simulator

    dashboard = load_dashboard()
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    config = SimConfig(model=MODEL, pd=(1, 1), step_fixed_ms=4.0)
    async with (
        running_simulator(config) as sim,
        serve_metrics(registry) as exporter,
        prometheus(tmp_path, {"loadgen": exporter.port}) as prom,
        aiohttp.ClientSession() as session,
    ):
        await wait_scraped(session, prom, jobs=1)
        roles = [
            f"frontend={sim.base_url}/metrics",
            f"prefill={sim.base_url}/workers/prefill-0/metrics",
            f"decode={sim.base_url}/workers/decode-0/metrics",
        ]
        spec = spec_from_options(
            {
                "base_url": sim.base_url,
                "conc": "1,2",
                "isl": 256,
                "osl": 16,
                "prompts_per_conc": 4,
                "warmup_per_conc": 1,
                "encoder": "raw",
                "no_progress": True,
                "results": str(tmp_path / "results"),
                "server_metrics": roles,
            }
        )
        observer = MetricsObserver(
            metrics, model=MODEL, endpoint=spec.target.endpoint, points=len(spec.load.conc)
        )
        await sweep_points(spec, SweepOptions(observer=observer))
        await asyncio.sleep(2.5)  # two more scrapes: the last point's gauges are in
        values = {
            "model": regex_literal(MODEL),
            "instance": ".*",
            "conc": ".*",
            "__rate_interval": "1m",
            "__range": "5m",
            "__interval": "5s",
        }
        panels = query_panels(dashboard, rows={ROLE_ROW})
        assert len(panels) == 4
        answers: dict[str, list[dict[str, Any]]] = {}  # by panel title
        empty = []
        for p in panels:
            for target in p["targets"]:
                query = substitute(target["expr"], values)
                data = await prom_get(session, f"{prom}/api/v1/query", {"query": query})
                answers.setdefault(p["title"], []).extend(data["result"])
                if not has_data(data["result"]):
                    empty.append(f"{p['title']} / {target['legendFormat']}: {query}")
        assert not empty, "role lines without data:\n" + "\n".join(empty)
    for conc in (1, 2):
        point = orjson.loads((tmp_path / "results" / f"conc_{conc}.json").read_bytes())
        shown = {
            r["metric"]["part"]: float(r["value"][1])
            for r in answers["TTFT taken apart"]
            if r["metric"]["conc"] == str(conc)
        }
        parts = {
            k.removesuffix("_ms"): v
            for k, v in point["ttft_parts"].items()
            if k.endswith("_ms") and isinstance(v, dict)
        }
        expected = {
            name: part["mean_ms"] for name, part in parts.items() if part["mean_ms"] is not None
        }
        assert set(shown) == set(expected) >= {"prefill", "kv_transfer", "decode_first"}
        for name, value in expected.items():
            assert shown[name] == pytest.approx(value, rel=1e-9, abs=1e-9), name
        ttft = {
            r["metric"]["role"]: float(r["value"][1])
            for r in answers["Server TTFT per role"]
            if r["metric"]["conc"] == str(conc)
        }
        by_role = {
            row["role"]: row["server_mean_ttft_ms"] for row in point["server_metrics_by_role"]
        }
        assert set(by_role) == {"frontend", "prefill", "decode"}
        known = {role: value for role, value in by_role.items() if value is not None}
        assert "decode" in known and ttft == pytest.approx(known, rel=1e-9)
