"""A real Prometheus for tests, and the Grafana dashboard's queries as Grafana sends them.

Prometheus runs as its own process on 127.0.0.1 (scripts/ensure-prometheus installs
it), scraping the targets a test names every second. Grafana itself cannot run here, so
its variable interpolation and label_values() are reproduced below.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import shutil
import socket
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.paths import ROOT

DASHBOARD_PATH = ROOT / "dashboards" / "loadgen.json"


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text())
    return data


def query_panels(
    dashboard: dict[str, Any], *, rows: Collection[str] | None = None, without: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The panels with queries (not rows), those of `rows` only when given, none of `without`."""
    picked, row = [], None
    for p in dashboard["panels"]:
        if p["type"] == "row":
            row = p["title"]
        elif (rows is None or row in rows) and row not in without:
            picked.append(p)
    return picked


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
    r"""Grafana's escaping of a variable value for a PromQL regex inside a "..." string:
    the regex backslash is itself escaped (\\. in the query is \. in the regex)."""
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\\\1", text)


def free_port() -> int:
    """Prometheus cannot report a port it picked itself, so pick one and hand it over
    (retried when another process takes it first)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def prometheus(
    tmp: Path, targets: dict[str, int], paths: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """A Prometheus scraping each job's port every second (at /metrics, or `paths[job]`)."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: run scripts/ensure-prometheus"
    config = tmp / "prometheus.yml"
    jobs = "".join(
        f"  - job_name: {job}\n"
        + (f"    metrics_path: {(paths or {})[job]}\n" if job in (paths or {}) else "")
        + f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        for job, port in targets.items()
    )
    config.write_text(
        f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{jobs}"
    )
    for _attempt in range(3):
        port = free_port()
        process = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            if await wait_ready(url, process):
                yield url
                return
        finally:
            if process.returncode is None:
                process.terminate()
                await asyncio.wait_for(process.wait(), 10)
    raise AssertionError("prometheus did not start on a free port in 3 attempts")


async def wait_ready(url: str, process: asyncio.subprocess.Process) -> bool:
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            if process.returncode is not None:
                return False  # e.g. the port was taken meanwhile
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{url}/-/ready") as response:
                    if response.status == 200:
                        return True
            await asyncio.sleep(0.1)
    raise AssertionError("prometheus not ready after 30 s")


async def prom_get(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> Any:
    async with session.get(url, params=params) as response:
        body = await response.json()
        assert response.status == 200 and body["status"] == "success", (params, body)
        return body["data"]


async def wait_scraped(session: aiohttp.ClientSession, url: str, jobs: int) -> None:
    for _ in range(100):
        data = await prom_get(session, f"{url}/api/v1/targets", {})
        if sum(t["health"] == "up" for t in data["activeTargets"]) == jobs:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"targets never all up: {data}")


async def label_values(
    session: aiohttp.ClientSession, prom: str, definition: str, variables: dict[str, str]
) -> list[str]:
    """Grafana's label_values(selector, label) as the Prometheus series API answers it."""
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", definition)
    assert match, definition
    selector = substitute(match[1], variables)
    data = await prom_get(session, f"{prom}/api/v1/label/{match[2]}/values", {"match[]": selector})
    return list(data)
