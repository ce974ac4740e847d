"""The `loadgen` command against a hostile or frozen server: what the user sees.

Rows of the hardening issue where the user-visible outcome is the point: one line on
stderr (no traceback), the exit status, the result files, and a bounded wall time.
The server is tests/support/hostile_server.py (or a real `loadgen sim`, frozen with SIGSTOP).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.args import build_parser, spec_from_argv
from loadgen.config.parsers import parse_header
from loadgen.config.spec import RunSpec, SpecError
from loadgen.orchestrate.measure import measure
from loadgen.records import ErrorKind
from loadgen.results.jsonl import read_jsonl
from loadgen.run.embedded_sim import free_port, simulator_argv
from loadgen.run.observers import QuietObserver
from loadgen.tokenizer import load_tokenizer
from tests.support.hostile_cli import RUN, loadgen, one_line
from tests.support.hostile_server import (
    HostileServer,
    alternate,
    answer_bytes,
    answer_json,
    completion,
    hang,
)

pytestmark = pytest.mark.timeout(180)


def _empty(directory: Path) -> bool:
    return not any(directory.iterdir())


# --- row 3: a server that never answers -----------------------------------------------------


@pytest.mark.parametrize("extra", [(), ("--metrics-port", "0")], ids=["run", "live-metrics"])
async def test_row3_hanging_models_one_line_exit_1(tmp_path: Path, extra: tuple[str, ...]) -> None:
    async with HostileServer({"/v1/models": hang}) as server:
        status, lines = await loadgen(
            "--base-url",
            server.base_url,
            *RUN,
            "--results",
            str(tmp_path),
            "--http-timeout",
            "1",
            *extra,
            limit_s=30,  # a hang guard: which deadline ended it is the line below
        )
    assert status == 1
    line = one_line(lines)
    assert f"GET {server.base_url}/v1/models did not answer within 1 s (--http-timeout)" in line
    assert _empty(tmp_path)  # nothing was measured, nothing is pretended


async def test_row3_hanging_metrics_at_preflight_one_line_exit_1(tmp_path: Path) -> None:
    async with HostileServer({"/metrics": hang}) as server:
        status, lines = await loadgen(
            "--base-url", server.base_url, *RUN, "--results", str(tmp_path), "--http-timeout", "1"
        )
    assert status == 1
    assert f"{server.base_url}/metrics did not answer within 1 s" in one_line(lines)


def test_row3_every_deadline_has_a_finite_default() -> None:
    spec = spec_from_argv(
        ["--base-url", "http://127.0.0.1:9", "--conc", "1", "--isl", "8", "--osl", "8"], env={}
    )
    assert spec.deadlines.http_timeout_s == 30.0 and spec.deadlines.stream_idle_timeout_s == 300.0
    assert spec.deadlines.request_timeout_s is None  # the overall cap stays opt-in
    text = " ".join(build_parser().format_help().split())
    assert "--stream-idle-timeout SECONDS a streamed request that receives no byte" in text
    assert "(default: 300.0)" in text and "(default: 30.0)" in text
    for flag, value in (("--http-timeout", "0"), ("--stream-idle-timeout", "-1")):
        with pytest.raises(SpecError, match=flag):
            spec_from_argv(
                ["--sim", "--conc", "1", "--isl", "8", "--osl", "8", flag, value], env={}
            )


@contextlib.asynccontextmanager
async def simulator(*extra: str) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """A real `loadgen sim` child whose pid the test can SIGSTOP."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *simulator_argv(port, ("--step-fixed-ms", "5", *extra)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            for _ in range(300):
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(url + "/health") as response:
                        if response.status == 200:
                            break
                await asyncio.sleep(0.1)
        yield url, process
    finally:
        process.send_signal(signal.SIGCONT)
        process.kill()
        await process.wait()


async def test_row3_frozen_server_one_line_exit_1(tmp_path: Path) -> None:
    async with simulator() as (url, process):
        process.send_signal(signal.SIGSTOP)  # the kernel still accepts its connections
        status, lines = await loadgen(
            "--base-url", url, *RUN, "--results", str(tmp_path), "--http-timeout", "1", limit_s=30
        )
    assert status == 1 and "did not answer within 1 s" in one_line(lines)


class _FreezeOnFirstRecord(QuietObserver):
    """Observer that SIGSTOPs the server when the first measured request finishes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.frozen = False

    def point_started(self, conc: int, num_requests: int) -> None: ...
    def request_started(self, conc: int) -> None: ...
    def point_finished(self, conc: int, result: Any) -> None: ...

    def request_finished(self, record: Any) -> None:
        if not self.frozen:
            self.frozen = True
            self.process.send_signal(signal.SIGSTOP)


async def test_row3_server_frozen_mid_point_ends_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokenizer: Tokenizer = await asyncio.to_thread(load_tokenizer)
    async with simulator("--decode-token-us", "200") as (url, process):
        spec = RunSpec.flat(
            conc=(2,),
            isl=48,
            osl=64,
            base_url=url,
            prompts_per_conc=3,
            warmup_per_conc=0,
            results_dir=tmp_path,
            progress=False,
            http_timeout_s=1.0,
            stream_idle_timeout_s=1.0,
        )
        freezer = _FreezeOnFirstRecord(process)
        async with asyncio.timeout(60):
            outcome = await measure(spec, observer=freezer, tokenizer=tokenizer)
    records = read_jsonl(tmp_path / "requests_conc_2.jsonl")
    result = orjson.loads((tmp_path / "conc_2.json").read_bytes())
    assert freezer.frozen and len(records) == 6  # every request has its record
    timed_out = [r for r in records if r.error is ErrorKind.TIMEOUT]
    # The four sent after the freeze time out; the one in flight with the first may
    # have had all its bytes in the socket already.
    assert len(timed_out) >= 4 and result["completed"] == 6 - len(timed_out)
    assert all("--stream-idle-timeout" in r.error_detail for r in timed_out)
    assert result["server_requests"] is None  # the after-scrape could not answer
    assert outcome.failed_points == (2,)
    assert any(
        "/metrics did not answer within 1 s" in line
        for line in capsys.readouterr().err.splitlines()
    )


# --- row 2 through the CLI: a 2^70 usage ends as an error rate, not a traceback ------------


async def test_row2_usage_2_70_exit_1_with_results_on_disk(tmp_path: Path) -> None:
    routes = {"/v1/completions": alternate(completion(), completion(usage=2**70))}
    async with HostileServer(routes) as server:
        status, lines = await loadgen(
            "--base-url", server.base_url, *RUN, "--results", str(tmp_path)
        )
    assert status == 1, lines
    assert not any("Traceback" in line for line in lines)
    assert any("conc 2: error rate 50.0% exceeds --max-error-rate" in line for line in lines)
    result = orjson.loads((tmp_path / "conc_2.json").read_bytes())
    assert result["errors_by_kind"]["malformed"] == 2 and result["completed"] == 2
    assert (tmp_path / "run.json").is_file() and (tmp_path / "sweep.csv").is_file()


# --- row 10: non-JSON /v1/models, bad --header ---------------------------------------------


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        (
            answer_bytes(b"<!doctype html><html><body>Login</body></html>", "text/html"),
            "answered text/html, not JSON ('<!doctype html><html><body>Login</body></html>')",
        ),
        (answer_json([1, 2]), "not an OpenAI model list"),
        (answer_json({"data": "m"}), "not an OpenAI model list"),
    ],
    ids=["html", "json-list", "data-not-a-list"],
)
async def test_row10_models_not_a_model_list_one_line_exit_1(
    tmp_path: Path, handler: Any, message: str
) -> None:
    async with HostileServer({"/v1/models": handler}) as server:
        status, lines = await loadgen(
            "--base-url", server.base_url, *RUN, "--results", str(tmp_path)
        )
    assert status == 1 and message in one_line(lines)


@pytest.mark.parametrize(
    "header", ["X-A:b\r\nX-Injected: 1", "X-A:b\n", "X-A:\x1bb", "X A:b", "X-A\r:b", "(X):b"]
)
async def test_row10_invalid_header_one_line_exit_2(tmp_path: Path, header: str) -> None:
    status, lines = await loadgen(
        "--base-url", "http://127.0.0.1:1", *RUN, "--results", str(tmp_path), "--header", header
    )
    assert status == 2 and "--header" in one_line(lines)


def test_parse_header_accepts_what_http_allows() -> None:
    assert parse_header("X-Session-Affinity: abc:1") == ("X-Session-Affinity", "abc:1")
    assert parse_header("x_b~!:v\twith tab é") == ("x_b~!", "v\twith tab é")
    for bad in ("novalue", ":v", "X-A:b\rc", "X-A:\x7f", "X-A:\x00"):
        with pytest.raises(SpecError, match="--header"):
            parse_header(bad)
    with pytest.raises(SpecError, match="--header"):  # RunSpec built directly is checked too
        RunSpec.flat(conc=(1,), isl=8, osl=8, sim=True, headers=(("X-A", "b\r\nc"),))


async def test_api_key_with_a_trailing_newline_is_stripped(tmp_path: Path) -> None:
    """A secret mounted from a file often ends in a newline: sent without it, not a crash."""
    async with HostileServer() as server:
        status, lines = await loadgen(
            "--base-url",
            server.base_url,
            *RUN,
            "--results",
            str(tmp_path),
            env={"OPENAI_API_KEY": "sk-test\n"},
        )
        sent = {
            r.headers.get("authorization") for r in server.requests if r.path == "/v1/completions"
        }
    assert status == 0, lines
    assert sent == {"Bearer sk-test"}
    status, lines = await loadgen(
        "--base-url",
        server.base_url,
        *RUN,
        "--results",
        str(tmp_path),
        env={"OPENAI_API_KEY": "sk\r\nX: y"},
    )
    assert status == 2 and "OPENAI_API_KEY" in one_line(lines)
