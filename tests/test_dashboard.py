"""The Grafana dashboard: structure, and every panel query answered by a real Prometheus
that scraped loadgen and the simulator during a short sweep (Grafana itself cannot run
here, so its queries are run the way Grafana would send them)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_PATH = ROOT / "dashboards" / "loadgen.json"


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text())
    return data


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_committed_json_is_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("generate", ROOT / "dashboards" / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    assert DASHBOARD_PATH.read_text() == generate.render(), \
        "dashboards/loadgen.json is stale: run python dashboards/generate.py"


def test_panel_ids_unique_and_grid_inside_24_columns_without_overlap() -> None:
    panels = load_dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for p in panels:
        grid = p["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0
        assert grid["x"] + grid["w"] <= 24, f"panel {p['id']} {p['title']} beyond column 24"
        cells = {(grid["x"] + dx, grid["y"] + dy)
                 for dx in range(grid["w"]) for dy in range(grid["h"])}
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
    for name in ("model", "conc"):
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert "label_values(" in variables[name]["definition"]
    exprs = [t["expr"] for p in query_panels(dashboard) for t in p["targets"]]
    assert all("$model" in e or "loadgen_event_loop_lag" in e for e in exprs), \
        "every query except the client-health one filters by model"
    assert any("$conc" in e for e in exprs)


def test_the_issue_panels_are_there() -> None:
    exprs = " ".join(t["expr"] for p in query_panels(load_dashboard()) for t in p["targets"])
    for metric in (
        "loadgen_time_to_first_token_seconds", "loadgen_inter_chunk_latency_seconds",
        "loadgen_inter_token_latency_seconds", "loadgen_time_per_output_token_seconds",
        "loadgen_e2e_request_latency_seconds", "loadgen_output_tokens_total",
        "loadgen_prompt_tokens_total", "loadgen_requests_in_flight",
        "loadgen_target_concurrency", "loadgen_request_errors_total",
        "loadgen_decode_tokens_total", "loadgen_decode_chunks_total",
        "loadgen_decode_accepted_tokens_per_position_total",
        "loadgen_server_spec_decode_acceptance_length", "loadgen_event_loop_lag_seconds",
        "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total", "vllm:num_requests_running",
        "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    ):
        assert metric in exprs, f"no panel shows {metric}"


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Grafana's variable interpolation for the variables this dashboard uses."""
    out = expr
    for name in sorted(variables, key=len, reverse=True):
        out = out.replace(f"${name}", variables[name])
    assert "$" not in out, f"unsubstituted variable in {out}"
    return out


def has_data(result: list[dict[str, Any]]) -> bool:
    """At least one series with a finite value (NaN is what an empty histogram rate gives)."""
    return any(math.isfinite(float(r["value"][1])) for r in result)


def regex_literal(text: str) -> str:
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)
