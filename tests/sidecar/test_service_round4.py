"""The sidecar against round 4's hostile cases, over real sockets on 127.0.0.1: a /readyz
target answering a gzip bomb, an endless body or a redirect away (a real `loadgen serve`
process for the memory bound), slow authenticated uploads, golden-al and aiperf-artifacts
paths, and secrets inside extra-body."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from loadgen.config.spec import SpecError
from loadgen.sidecar import service as sidecar_service
from loadgen.sidecar.options import Escapes, plan_for, spec_for
from loadgen.sidecar.service import running_service
from loadgen.sidecar.settings import ServiceConfig
from tests.support.hostile_documents import gzip_bomb
from tests.support.hostile_server import Conn, HostileServer, Request, compressed, redirect
from tests.support.procs import free_port
from tests.support.sidecar import (
    MODEL,
    QUICK,
    all_bytes_under,
    call,
    sidecar,
    simulator,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)

NO_TARGET = "http://127.0.0.1:9"
RUN = {"conc": "1", "isl": 64, "osl": 16, "encoder": "raw"}
INFLATED = 512 << 20  # the bomb's size once inflated (0.5 MB on the wire)
PEAK_RSS_BOUND = 128 << 20  # the sidecar's whole process (64 MiB at rest), bomb or not


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def healthz_seconds(base: str) -> float:
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.get(base + "/healthz", timeout=aiohttp.ClientTimeout(total=5)) as response,
    ):
        assert response.status == 200
    return time.monotonic() - started


@pytest.mark.exclusive
async def test_a_gzip_bomb_readyz_target_leaves_the_sidecar_small_and_healthz_answering(
    tmp_path: Path,
) -> None:
    """One unauthenticated GET /readyz whose target answers a bomb took the sidecar to
    4 GB; the sidecar now asks for identity and refuses a compressed answer unread.
    Subject, besides the refusal: the sidecar's peak memory and how long /healthz takes
    meanwhile (under 1 s), both printed; run alone, as another test's load would be what
    the latency measured."""
    bomb = compressed(gzip_bomb(INFLATED), "application/json")
    async with HostileServer({"/v1/models": bomb}) as target:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadgen",
            "serve",
            "--target",
            target.base_url,
            "--model",
            "m",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(tmp_path / "data"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k != "LOADGEN_API_TOKEN"},
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await healthz_seconds(base)
                    break
                except (aiohttp.ClientError, OSError):
                    assert time.monotonic() < deadline, "the sidecar did not start"
                    await asyncio.sleep(0.1)
            before = peak_rss(process.pid)
            async with aiohttp.ClientSession() as session:

                async def readyz() -> tuple[int, dict[str, str]]:
                    async with session.get(base + "/readyz") as response:
                        return response.status, await response.json()

                ready = asyncio.create_task(readyz())
                health = [await healthz_seconds(base) for _ in range(5)]
                status, answer = await ready
            peak = peak_rss(process.pid)
        finally:
            process.terminate()
            await process.wait()
    print(f"sidecar peak RSS: {before >> 20} MiB before /readyz, {peak >> 20} MiB after")
    print(f"/healthz meanwhile: {max(health) * 1000:.0f} ms at most")
    assert status == 503, answer
    assert "the answer is compressed (Content-Encoding 'gzip')" in answer["error"]
    assert max(health) < 1.0, health
    assert target.requests[0].headers["accept-encoding"] == "identity"
    assert peak < PEAK_RSS_BOUND, f"{peak >> 20} MiB"


async def slow_endless(_request: Request, conn: Conn) -> None:
    """A model list that never ends, 64 KiB every 5 ms (bounded for the test's sake)."""
    await conn.head(200, "application/json", chunked=True)
    await conn.chunk(b'{"data": [')
    while True:
        await conn.chunk(b" " * (64 << 10))
        await asyncio.sleep(0.005)


async def test_an_endless_readyz_answer_is_cut_at_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With /readyz's timeout out of reach, only the 1 MiB cap can end the read."""
    monkeypatch.setattr(sidecar_service, "READY_TIMEOUT_S", 3600.0)
    async with (
        HostileServer({"/v1/models": slow_endless}) as target,
        sidecar(tmp_path / "data", target.base_url) as client,
    ):
        async with asyncio.timeout(30):  # a hang guard, not a measurement
            status, answer = await call(client, "GET", "/readyz")
    assert status == 503
    assert "the answer is over 1 MiB" in answer["error"]


async def test_readyz_does_not_follow_a_redirect_to_another_origin(tmp_path: Path) -> None:
    async with (
        HostileServer() as elsewhere,
        HostileServer({"/v1/models": redirect(elsewhere.base_url + "/v1/models")}) as target,
        sidecar(tmp_path / "data", target.base_url) as client,
    ):
        status, answer = await call(client, "GET", "/readyz")
        assert status == 503
        assert "does not follow redirects to another origin" in answer["error"]
        assert elsewhere.requests == []


TOKEN = "round4-token-for-tests"


async def test_slow_authenticated_uploads_cannot_lock_out_healthz(tmp_path: Path) -> None:
    """64 uploads that never finish their body each held a connection (busy: never
    evicted) for the 30 s body deadline, the whole cap: /healthz was refused."""
    config = ServiceConfig(
        target=NO_TARGET, model=MODEL, port=0, data_dir=tmp_path / "data", token=TOKEN
    )
    async with running_service(config) as service:
        port = service.port
        writers = []
        try:
            for _ in range(64):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(
                    b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Authorization: Bearer {TOKEN}\r\n".encode()
                    + b'Content-Length: 1000\r\n\r\n{"conc": "1", '
                )
                await writer.drain()
                writers.append((reader, writer))
            await asyncio.sleep(0.5)  # every upload has reached its handler
            seconds = await healthz_seconds(f"http://127.0.0.1:{port}")
            assert seconds < 1.0
            # the uploads past the few being received were told so, not held
            refused = 0
            for reader, _ in writers:
                try:
                    head = await asyncio.wait_for(reader.readline(), 0.05)
                except TimeoutError:
                    continue
                refused += head.startswith(b"HTTP/1.1 503")
            assert refused >= 64 - 4
        finally:
            for _, writer in writers:
                writer.close()


# --- golden-al and aiperf-artifacts: placed on the raw option --------------------------------


def config_for(data: Path) -> ServiceConfig:
    data.mkdir(parents=True, exist_ok=True)
    return ServiceConfig(target=NO_TARGET, model=MODEL, data_dir=data)


async def test_golden_al_outside_the_data_dir_is_refused_before_it_is_opened(
    tmp_path: Path,
) -> None:
    """Main opened the file first: its 400 said whether a file existed and what it held."""
    outside = tmp_path / "outside.yaml"
    outside.write_text(f"{MODEL}:\n  thinking_on: {{1: 9.75}}\n")
    answers = []
    async with sidecar(tmp_path / "data", NO_TARGET) as client:
        for path in (outside, tmp_path / "absent.yaml"):
            for given in (str(path), f"../{path.name}", f"../../{path.name}"):
                status, answer = await call(client, "POST", "/v1/runs", {**RUN, "golden-al": given})
                assert status == 400, answer
                answers.append(answer["error"].replace(given, "X"))
    assert len(set(answers)) == 1, answers
    assert answers[0].startswith("golden-al 'X': not a name inside the sidecar's data directory")
    assert "9.75" not in "".join(answers)


async def test_a_golden_al_file_inside_is_used_and_never_described(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    config = config_for(data)
    monkeypatch.chdir(data)  # main resolved relative names from here: it opened them
    (data / "bad.yaml").write_text(f"{MODEL}:\n  thinking_on: {{1: 9.75}}\nother-model: x\n")
    (data / "good.yaml").write_text(f"{MODEL}:\n  thinking_on: {{1: 1.79, 2: 2.27}}\n")
    with pytest.raises(SpecError) as caught:
        spec_for(config, {**RUN, "golden-al": "bad.yaml"}, data / "runs" / "r")
    message = str(caught.value)
    assert message.startswith("golden-al: the file is missing, unreadable, or has no curve")
    assert "9.75" not in message and "other-model" not in message and "bad.yaml" not in message
    with pytest.raises(SpecError) as absent:
        spec_for(config, {**RUN, "golden-al": "absent.yaml"}, data / "runs" / "r")
    assert str(absent.value) == message  # nor whether it exists
    document = {**RUN, "lanes": [{"name": "a", "golden-al": "bad.yaml"}]}
    with pytest.raises(SpecError) as in_lane:
        plan_for(config, document, data / "runs" / "r")
    assert "9.75" not in str(in_lane.value) and "golden-al: the file is missing" in str(
        in_lane.value
    )
    spec = spec_for(config, {**RUN, "golden-al": "good.yaml"}, data / "runs" / "r")
    assert spec.scoring.golden_al is not None
    assert spec.scoring.golden_al.path == (data / "good.yaml").resolve()
    assert spec.scoring.golden_al.curve == ((1, 1.79), (2, 2.27))


def test_relative_aiperf_artifacts_resolve_inside_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    config = config_for(data)
    monkeypatch.chdir(data)  # main put them here, beside every run
    run_results = data / "runs" / "20260101T000000Z-abcd" / "results"
    spec = spec_for(config, {**RUN, "aiperf-artifacts": "artifacts"}, run_results)
    assert spec.output.aiperf_artifacts == (run_results / "artifacts").resolve()
    document = {**RUN, "lanes": [{"name": "a", "aiperf-artifacts": "art"}]}
    plan = plan_for(config, document, run_results)
    assert plan.lanes[0].spec.output.aiperf_artifacts == (run_results / "art").resolve()
    for escaping in ("../../x", "/tmp/x", "a/../../../x"):
        with pytest.raises(Escapes, match=r"not a name inside the run's results directory"):
            spec_for(config, {**RUN, "aiperf-artifacts": escaping}, run_results)


# --- secrets inside extra-body ---------------------------------------------------------------

BODY_SECRET = "sk-provider-0123456789abcdef"


async def test_secrets_inside_extra_body_are_redacted_in_every_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    extra = {"provider_token": BODY_SECRET, "nested": {"client_secret": BODY_SECRET}, "x": 1}
    async with simulator() as sim_url, sidecar(data, sim_url) as client:
        options = {**QUICK, "conc": "1", "extra-body": extra}
        status, started = await call(client, "POST", "/v1/runs", options)
        assert status == 202, started
        run = await wait_for(client, started["id"], states={"succeeded"})
        document = {**QUICK, "lanes": [{"name": "a", "conc": "1", "extra-body": extra}]}
        status, second = await call(client, "POST", "/v1/runs", document)
        assert status == 202, second
        await wait_for(client, second["id"], states={"succeeded"})
        listing = await call(client, "GET", "/v1/runs")
    shown = {"provider_token": "***", "nested": {"client_secret": "***"}, "x": 1}
    assert run["options"]["extra-body"] == shown
    stored = orjson.loads((data / "runs" / started["id"] / "run.json").read_bytes())
    assert stored["options"]["extra-body"] == shown
    assert BODY_SECRET.encode() not in all_bytes_under(data)
    assert BODY_SECRET not in orjson.dumps(listing).decode()
