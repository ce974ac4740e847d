"""The sidecar against hostile network clients, over real sockets on 127.0.0.1: paths
that would lead out of its data directory, sweep documents built to exhaust memory,
credentials in every header form, idle connections held open."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client import CollectorRegistry

from loadgen.config.args import spec_from_argv
from loadgen.config.spec import SpecError
from loadgen.sidecar.options import Escapes, spec_for
from loadgen.sidecar.service import running_service
from loadgen.sidecar.settings import ServiceConfig
from loadgen.sinks.guarded_http import ServerLimits
from loadgen.sinks.prometheus.server import serve_metrics
from tests.support.hostile_documents import laughs
from tests.support.recording_proxy import recording_proxy
from tests.support.sidecar import QUICK, all_bytes_under, call, sidecar, simulator, wait_for

# Nothing listens there: every request in these tests is refused before a run starts.
NO_TARGET = "http://127.0.0.1:9"
RUN = {"conc": "1", "isl": 64, "osl": 16, "encoder": "raw", "save_result": True}


def outside_files(tmp_path: Path) -> list[Path]:
    """Everything under tmp_path but outside its data/ directory."""
    return [p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "data")]


@pytest.mark.parametrize("label", ["../../tmp/x", "/tmp/x", "../../../../outside/x"])
async def test_a_label_cannot_put_the_result_file_outside_the_data_dir(
    tmp_path: Path, label: str
) -> None:
    async with sidecar(tmp_path / "data", NO_TARGET) as client:
        status, body = await call(client, "POST", "/v1/runs", {**RUN, "label": label})
        assert status == 400, body
        assert body["error"].startswith(f"--label {label!r}: a label, not a path")
        assert "\n" not in body["error"]
        document = {**RUN, "lanes": [{"name": "a"}, {"name": "b", "label": label}]}
        status, body = await call(client, "POST", "/v1/runs", document)
        assert status == 400, body
        assert "a label, not a path" in body["error"]
    assert outside_files(tmp_path) == []
    assert not (tmp_path / "data" / "runs" / "pending").exists()


def test_the_cli_refuses_a_label_with_a_path_separator() -> None:
    argv = [
        "--base-url",
        NO_TARGET,
        "--conc",
        "1",
        "--isl",
        "8",
        "--osl",
        "8",
        "--save-result",
        "--label",
    ]
    with pytest.raises(SpecError, match=r"--label 'a/b': a label, not a path"):
        spec_from_argv([*argv, "a/b"], {})
    spec = spec_from_argv([*argv, "nightly"], {})
    assert spec.output.vllm_result is not None and spec.output.vllm_result.label == "nightly"


def test_a_link_planted_below_the_data_dir_cannot_lead_out(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (data / "planted").symlink_to(outside)
    config = ServiceConfig(target=NO_TARGET, model="m", data_dir=data)
    with pytest.raises(
        Escapes,
        match=r"^results '.*planted': leads outside the sidecar's "
        "data directory",
    ):
        spec_for(config, {**RUN, "label": "nightly"}, data / "planted")
    inside = spec_for(config, {**RUN, "label": "..", "result_filename": ".."}, data / "ok")
    assert inside.output.vllm_result is not None and inside.output.vllm_result.label == ".."
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("levels", [9, 7])
async def test_a_billion_laughs_body_is_a_400_and_the_sidecar_keeps_answering(
    tmp_path: Path, levels: int
) -> None:
    async with sidecar(tmp_path / "data", NO_TARGET) as client:
        # a hang guard: expanding the aliases would hold the sidecar's loop for minutes
        async with asyncio.timeout(HANG_S):
            async with client.post(
                "/v1/runs",
                data=laughs(levels).encode(),
                headers={"Content-Type": "application/yaml"},
            ) as response:
                body = await response.json()
                assert response.status == 400, body
            assert body["error"].startswith("body: ") and "alias" in body["error"]
            status, health = await call(client, "GET", "/healthz")
        assert (status, health["busy"]) == (200, False)


async def test_a_deep_json_body_is_a_400_naming_the_key_path(tmp_path: Path) -> None:
    async with sidecar(tmp_path / "data", NO_TARGET) as client:
        raw = b'{"lanes": [{"name": "a", "extra-body": {"x": ' + b"[" * 1000 + b"]" * 1000
        status, body = await call(client, "POST", "/v1/runs", raw + b"}}]}")
        assert status == 400, body
        assert body["error"].startswith(
            "body: lanes[0].extra-body.x" + "[0]" * 28 + ": nested more than 32 levels deep"
        )
        async with client.post(
            "/v1/runs",
            data=b"seed: 0x10000000000000000\nlanes: []",
            headers={"Content-Type": "application/yaml"},
        ) as response:
            assert response.status == 400
            assert (await response.json())["error"] == (
                "body: seed: 18446744073709551616 does not fit in 64 bits"
            )


KEY = "sk-mapping-4b1d0e"
LANE_KEY = "sk-lane-9c2f77"
SWEEP_WITH_HEADERS = f"""
workload: {{isl: 64, osl: 16, encoder: raw, prompts-per-conc: 2, warmup-per-conc: 0}}
target: {{header: {{X-Api-Key: {KEY}, X-Team: a}}}}
lanes:
  - name: one
    conc: 1
  - name: two
    conc: 1
    header: ["X-Upstream-Auth:Bearer {LANE_KEY}"]
""".encode()


async def test_header_secrets_are_redacted_in_the_mapping_form_too(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with simulator() as sim_url:
        port = int(sim_url.rsplit(":", 1)[1])
        async with (
            recording_proxy("127.0.0.1", port) as wire,
            sidecar(data_dir, f"http://127.0.0.1:{wire.port}") as client,
        ):
            options = {**QUICK, "conc": "1", "header": {"X-Api-Key": KEY, "X-Team": "a"}}
            status, started = await call(client, "POST", "/v1/runs", options)
            assert status == 202, started
            run = await wait_for(client, started["id"], states={"succeeded"})
            async with client.post(
                "/v1/runs", data=SWEEP_WITH_HEADERS, headers={"Content-Type": "application/yaml"}
            ) as response:
                swept = await response.json()
                assert response.status == 202, swept
            sweep = await wait_for(client, swept["id"], states={"succeeded"})
            answers = [orjson.dumps(run), orjson.dumps(sweep)]
            for path in (
                "/v1/runs",
                f"/v1/runs/{started['id']}/results",
                f"/v1/runs/{swept['id']}/results",
            ):
                status, answer = await call(client, "GET", path)
                assert status == 200
                answers.append(orjson.dumps(answer))
    assert run["options"]["header"] == {"X-Api-Key": "***", "X-Team": "a"}
    assert sweep["options"]["target"]["header"] == {"X-Api-Key": "***", "X-Team": "a"}
    assert sweep["options"]["lanes"][1]["header"] == ["X-Upstream-Auth:***"]
    on_disk = orjson.loads((data_dir / "runs" / started["id"] / "run.json").read_bytes())
    assert on_disk["options"]["header"] == {"X-Api-Key": "***", "X-Team": "a"}
    sweep_yaml = (data_dir / "runs" / swept["id"] / "results" / "sweep.yaml").read_text()
    assert "X-Api-Key: '***'" in sweep_yaml or 'X-Api-Key: "***"' in sweep_yaml, sweep_yaml
    for blob in (*answers, all_bytes_under(data_dir)):
        assert KEY.encode() not in blob and LANE_KEY.encode() not in blob
        assert b"<redacted>" not in blob
    # redacted where stored, real on the wire
    assert wire.sent.count(f"X-Api-Key: {KEY}".encode()) >= 4
    assert wire.sent.count(f"X-Upstream-Auth: Bearer {LANE_KEY}".encode()) >= 1


# Short deadlines so that the test sees them pass; the cap as shipped.
SHORT = ServerLimits(max_connections=64, header_timeout_s=1.0, body_timeout_s=1.0)
# Deadlines out of reach: only the cap can close an idle connection.
NO_DEADLINE = ServerLimits(max_connections=64, header_timeout_s=3600.0, body_timeout_s=3600.0)
HANG_S = 10  # a hang guard, not a measurement
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def closed_within(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    """Whether the server closes the connection within timeout_s (what it sends first,
    if anything, is read and ignored)."""
    try:
        async with asyncio.timeout(timeout_s):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass  # reset: closed too
    return True


async def open_idle(port: int, count: int) -> list[Stream]:
    """`count` connections: half send nothing, half the start of a request head."""
    streams = []
    for i in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if i % 2:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
        streams.append((reader, writer))
    await asyncio.sleep(0.2)  # the server has accepted them all
    return streams


async def held_open(streams: list[Stream], timeout_s: float) -> int:
    closed = await asyncio.gather(*(closed_within(r, timeout_s) for r, _ in streams))
    return closed.count(False)


async def check_idle_connections_cannot_starve(
    port: int, answers: Callable[[], Awaitable[int]], caplog: pytest.LogCaptureFixture
) -> None:
    """On a server without deadlines (NO_DEADLINE), so that only the cap frees a slot:
    the request is answered while the idle connections are held, the oldest idle one
    closed to make room for it."""
    streams = await open_idle(port, 200)
    try:
        # at the cap of 64 the oldest idle ones were closed at once: 64 left open
        assert await held_open(streams, 0.3) == 64
        async with asyncio.timeout(HANG_S):  # a hang guard: starved, it is never answered
            assert await answers() == 200
        still_open = sum(not (r.at_eof() or r.exception()) for r, _ in streams)
        assert still_open == 63  # the oldest idle one made room for it
    finally:
        for _, writer in streams:
            writer.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(":")[1].strip() for r in warnings] == [
        "64 connections open (the cap)"
    ], [r.getMessage() for r in warnings]
    assert not any(r.exc_info for r in caplog.records), "no traceback in the log"


@asynccontextmanager
async def sidecar_port(tmp_path: Path, limits: ServerLimits) -> AsyncIterator[int]:
    config = ServiceConfig(
        target=NO_TARGET,
        model="m",
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path / "data",
        limits=limits,
    )
    async with running_service(config) as service:
        yield service.port


async def get_status(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status


async def test_idle_connections_cannot_starve_the_sidecar(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with sidecar_port(tmp_path, NO_DEADLINE) as port:
        await check_idle_connections_cannot_starve(
            port, lambda: get_status(f"http://127.0.0.1:{port}/healthz"), caplog
        )


async def test_idle_connections_cannot_starve_the_metrics_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with serve_metrics(CollectorRegistry(), "127.0.0.1", 0, NO_DEADLINE) as server:
        await check_idle_connections_cannot_starve(
            server.port, lambda: get_status(server.url), caplog
        )


@pytest.mark.exclusive
@pytest.mark.parametrize("server", ["sidecar", "metrics-port"])
async def test_idle_connections_are_closed_at_the_header_deadline(
    tmp_path: Path, server: str
) -> None:
    """Subject: the header deadline (1 s here). The 64 idle connections left at the cap
    are closed once it has passed, not before; when the last one closed is printed."""
    async with contextlib.AsyncExitStack() as stack:
        if server == "sidecar":
            port = await stack.enter_async_context(sidecar_port(tmp_path, SHORT))
        else:
            metrics = await stack.enter_async_context(
                serve_metrics(CollectorRegistry(), "127.0.0.1", 0, SHORT)
            )
            port = metrics.port
        started = time.monotonic()
        streams = await open_idle(port, 200)
        try:
            assert await held_open(streams, 0.3) == 64  # the cap closed the rest at once
            assert await held_open(streams, 2.0) == 0
            closed_after = time.monotonic() - started
        finally:
            for _, writer in streams:
                writer.close()
    print(f"{server}: 64 idle connections closed {closed_after:.2f} s after opening (deadline 1 s)")
    assert closed_after < 4.0, f"{closed_after:.2f} s"


@pytest.mark.exclusive
async def test_a_body_that_does_not_arrive_is_a_408_after_the_deadline(tmp_path: Path) -> None:
    """Subject: the body deadline (1 s here): the 408 comes after it, not before, and
    the wait is printed."""
    async with sidecar_port(tmp_path, SHORT) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b'\r\nContent-Length: 100\r\n\r\n{"conc"'
        )
        started = time.monotonic()
        head = await asyncio.wait_for(reader.readline(), 3.0)
        waited = time.monotonic() - started
        print(f"408 after {waited:.2f} s (body deadline 1 s)")
        assert head.startswith(b"HTTP/1.1 408"), head
        assert 0.9 < waited < 2.5, f"{waited:.2f} s"
        assert await closed_within(reader, 2.5)  # after at most LINGER_S of draining
        writer.close()
        assert await get_status(f"http://127.0.0.1:{port}/healthz") == 200
