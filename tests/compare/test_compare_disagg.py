"""`loadgen compare` and `loadgen report` over two disaggregated lanes: real `loadgen sim
--pd 1:1` processes over real sockets, one with a slow KV link, read per role. The TTFT
parts and role figures appear per lane and concurrency as the point files hold them,
and the winners are said: the fast link wins on TTFT at every concurrency."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.procs import free_port, point, run_loadgen, start_sim, stop

LANES = {"slow-link": "0.5", "fast-link": "20"}  # GB/s; 1024 tokens x 64 KiB: 134 vs 3.4 ms
CONCS = (1, 4)


@pytest.fixture
def lanes(tmp_path: Path) -> Iterator[dict[str, Path]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        results = {}
        for name, gbps in LANES.items():
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            started.append(
                start_sim(
                    port, tmp_path / f"{name}.log", "--pd", "1:1", "--kv-bandwidth-gbps", gbps
                )
            )
            roles = [
                f"frontend={base}/metrics",
                f"prefill={base}/workers/prefill-0/metrics",
                f"decode={base}/workers/decode-0/metrics",
            ]
            results[name] = tmp_path / name
            done = run_loadgen(
                [
                    *("--base-url", base, "--results", str(results[name]), "--encoder", "raw"),
                    *("--conc", ",".join(map(str, CONCS)), "--prompts-per-conc", "3"),
                    *("--isl", "1024", "--osl", "4", "--warmup-per-conc", "1", "--no-progress"),
                    *(arg for role in roles for arg in ("--server-metrics", role)),
                ],
                timeout=180,
            )
            assert done.returncode == 0, done.stderr[-3000:]
        yield results
    finally:
        for process in started:
            stop(process)


def test_compare_and_report_show_the_parts_roles_and_winners(
    lanes: dict[str, Path], tmp_path: Path
) -> None:
    slow, fast = lanes["slow-link"], lanes["fast-link"]
    out = tmp_path / "compare.json"
    done = run_loadgen(["compare", str(slow), str(fast), "--json", str(out)])
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = orjson.loads(out.read_bytes())["disaggregated"]
    assert data["runs"] == ["slow-link", "fast-link"]
    for lane in data["lanes"]:
        file = point(lanes[lane["run"]], lane["conc"])
        means = {
            k.removesuffix("_ms"): v["mean_ms"]
            for k, v in file["ttft_parts"].items()
            if isinstance(v, dict)
        }
        assert lane["parts"] == means
        assert lane["client_mean_ttft_ms"] == file["ttft_parts"]["client_mean_ttft_ms"]
        assert set(lane["roles"]) == {"frontend", "prefill", "decode"}
        by_role = {r["role"]: r for r in file["server_metrics_by_role"]}
        assert lane["roles"]["decode"]["ttft_ms"] == by_role["decode"]["server_mean_ttft_ms"]
    kv = {(x["run"], x["conc"]): x["parts"]["kv_transfer"] for x in data["lanes"]}
    for conc in CONCS:
        assert kv[("slow-link", conc)] > 10 * kv[("fast-link", conc)]
        ttft, throughput = (
            next(w for w in data["winners"] if w["conc"] == conc and w["quantity"] == q)
            for q in ("mean TTFT", "throughput")
        )
        assert ttft["run"] == "fast-link", ttft["sentence"]
        assert f"conc {conc}: mean TTFT: fast-link wins" in done.stdout
        if throughput["run"] is not None:  # the named lane has the higher figure
            figures = {n: point(p, conc)["output_throughput"] for n, p in lanes.items()}
            assert figures[throughput["run"]] == max(figures.values())
        assert throughput["sentence"] in done.stdout

    report = tmp_path / "report.html"
    done = run_loadgen(["report", str(slow), str(fast), "-o", str(report)])
    assert done.returncode == 0, done.stderr
    page = report.read_text()
    assert '<h2 id="disagg">' in page
    assert 'alt="TTFT parts per lane and concurrency" src="data:image/svg+xml;base64,' in page
    for conc in CONCS:
        table = re.search(rf'<table class="ttft-parts" data-conc="{conc}">(.*?)</table>', page)
        assert table is not None
        cell = re.search(
            r'<tr data-run="slow-link">.*?data-field="kv_transfer_ms" data-value="([^"]+)"',
            table[1],
        )
        assert cell is not None and float(cell[1]) == kv[("slow-link", conc)]
        assert f"<li>conc {conc}: mean TTFT: fast-link wins" in page
        roles = re.search(rf'<table class="roles" data-conc="{conc}">(.*?)</table>', page)
        assert roles is not None and roles[1].count("<tr data-run=") == 6  # 2 lanes x 3 roles
