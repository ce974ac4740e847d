"""The sidecar end to end over HTTP on 127.0.0.1 (port 0) against the real simulator:
start, progress, results, cancel, 409, 400, 401, exposure refusal, restart, SIGTERM/SIGHUP/SIGINT;
secrets redacted, malformed Authorization bytes, symbolic links in the data directory."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from loadgen.cli import main as loadgen_main
from loadgen.results.jsonl import read_jsonl
from loadgen.sidecar.serve import config_from_args
from loadgen.sidecar.service import running_service
from loadgen.sidecar.settings import ServiceConfig, ServiceError
from tests.support.recording_proxy import recording_proxy
from tests.support.sidecar import (
    LONG,
    MODEL,
    QUICK,
    all_bytes_under,
    call,
    sidecar,
    simulator,
    wait_for,
)

TOKEN = "s3cret-token-for-tests"


def metric_sum(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_run_start_progress_results_and_metrics(tmp_path: Path) -> None:
    async with simulator() as target, sidecar(tmp_path, target) as client:
        status, started = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 202, started
        run = await wait_for(client, started["id"], states={"succeeded"})
        assert run["progress"]["points_done"] == run["progress"]["points_total"] == 2
        assert [p["conc"] for p in run["points"]] == [1, 2]
        assert all(p["completed"] == p["num_prompts"] > 0 for p in run["points"])

        status, results = await call(client, "GET", f"/v1/runs/{started['id']}/results")
        assert status == 200
        names = {f["name"] for f in results["files"]}
        assert {"requests_conc_1.jsonl", "requests_conc_2.jsonl"} <= names
        points = [r["result"] for r in results["results"] if "max_concurrency" in r["result"]]
        assert sorted(p["max_concurrency"] for p in points) == [1, 2]

        status, listing = await call(client, "GET", "/v1/runs")
        assert [r["id"] for r in listing["runs"]] == [started["id"]]
        async with client.get("/metrics") as response:
            text = await response.text()
        # The live counters agree with the result files of the same run.
        for point in points:
            conc = str(point["max_concurrency"])
            assert (
                metric_sum(text, "loadgen_requests_total", conc=conc, outcome="ok")
                == point["completed"]
            )
            assert (
                metric_sum(text, "loadgen_output_tokens_total", conc=conc)
                == point["total_output_tokens"]
            )
        async with client.get("/v1/runs/" + started["id"] + "/files/requests_conc_2.jsonl") as r:
            assert r.status == 200
            assert len((await r.read()).splitlines()) == points[-1]["completed"]
        # Nothing outside the run's results directory is served.
        escape = URL(f"/v1/runs/{started['id']}/files/..%2F..%2F..%2Fruns", encoded=True)
        async with client.get(escape) as r:
            assert r.status == 404
        async with client.get(f"/v1/runs/{started['id']}/files/%2Fetc%2Fpasswd") as r:
            assert r.status == 404


async def test_busy_409_then_cancel_keeps_what_was_measured(tmp_path: Path) -> None:
    async with simulator(step_ms=20.0) as target, sidecar(tmp_path, target) as client:
        status, started = await call(client, "POST", "/v1/runs", LONG)
        assert status == 202
        run_id = started["id"]
        await wait_for(client, run_id, states={"running"}, min_requests=1)
        status, busy = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 409 and run_id in busy["error"]

        status, cancelled = await call(client, "DELETE", f"/v1/runs/{run_id}")
        assert status == 200 and cancelled["state"] == "cancelled"
        status, _again = await call(client, "DELETE", f"/v1/runs/{run_id}")
        assert status == 409
        records = read_jsonl(tmp_path / "runs" / run_id / "results" / "requests_conc_2.jsonl")
        assert len(records) >= 1
        status, results = await call(client, "GET", f"/v1/runs/{run_id}/results")
        point = next(r["result"] for r in results["results"] if "complete" in r["result"])
        assert point["complete"] is False

        status, second = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 202, "a cancelled run must free the slot"
        await wait_for(client, second["id"], states={"succeeded"})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"conc": "0..4", "isl": 64, "osl": 16}, "--conc"),
        ({"conc": "4", "isl": -1, "osl": 16}, "--isl"),
        ({"conc": "4", "isl": 64}, "osl"),
        ({"conc": "4", "isl": 64, "osl": 16, "bogus": 1}, "bogus"),
        ({"conc": "4", "isl": 64, "osl": 16, "base_url": "http://10.0.0.1"}, "base_url"),
        ({"conc": "4", "isl": 64, "osl": 16, "results-dir": "/etc"}, "results-dir"),
        ({"conc": "4", "isl": 64, "osl": 16, "aiperf-artifacts": "/etc/x"}, "aiperf-artifacts"),
        # Paths and processes of the sidecar's own machine: not for the network to choose.
        ({"conc": "4", "isl": 64, "osl": 16, "resume": "/srv/old"}, "resume"),
        ({"conc": "4", "isl": 64, "osl": 16, "overwrite": True}, "overwrite"),
        ({"conc": "4", "isl": 64, "osl": 16, "server-pid": 1}, "server-pid"),
        # Parses, but no prompt can be that short: refused before a run exists.
        ({"conc": "4", "isl": 2, "osl": 16}, "shorter than the dsv4 prompt template"),
        (["conc", "4"], "JSON object"),
        (b"{not json", "not JSON"),
    ],
)
async def test_invalid_run_options_get_400_with_the_reason(
    tmp_path: Path, body: Any, reason: str
) -> None:
    # No target needed: validation happens before anything is sent.
    async with sidecar(tmp_path, "http://127.0.0.1:9") as client:
        status, answer = await call(client, "POST", "/v1/runs", body)
        assert status == 400, answer
        assert reason in answer["error"]
        assert (await call(client, "GET", "/v1/runs"))[1]["runs"] == []


async def test_oversized_body_is_refused(tmp_path: Path) -> None:
    async with sidecar(tmp_path, "http://127.0.0.1:9", max_body_bytes=1024) as client:
        status, _ = await call(client, "POST", "/v1/runs", b"{" + b" " * 4096 + b"}")
        assert status == 413


async def test_token_required_on_control_endpoints_only(tmp_path: Path) -> None:
    config = ServiceConfig(
        target="http://127.0.0.1:9", model=MODEL, port=0, data_dir=tmp_path, token=TOKEN
    )
    async with (
        running_service(config) as service,
        aiohttp.ClientSession(f"http://127.0.0.1:{service.port}") as client,
    ):
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
        ):
            async with client.get("/v1/runs", headers=headers) as response:
                assert response.status == 401
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
            async with client.post("/v1/runs", data=b"{}", headers=headers) as response:
                assert response.status == 401
        async with client.get("/v1/runs", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status == 200
        for open_path in ("/healthz", "/metrics"):
            async with client.get(open_path) as response:
                assert response.status == 200


def test_refuses_a_public_bind_without_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--target", "http://127.0.0.1:9", "--model", MODEL, "--listen", "0.0.0.0:0"]
    with pytest.raises(ServiceError, match="LOADGEN_API_TOKEN"):
        config_from_args(argv, {})
    assert config_from_args(argv, {"LOADGEN_API_TOKEN": TOKEN}).token == TOKEN
    assert config_from_args([*argv, "--insecure-no-auth"], {}).insecure_no_auth
    assert config_from_args([*argv[:-1], "127.0.0.1:0"], {}).token is None
    saved = os.environ.pop("LOADGEN_API_TOKEN", None)
    try:
        assert loadgen_main(["serve", *argv]) == 2
    finally:
        if saved is not None:
            os.environ["LOADGEN_API_TOKEN"] = saved
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err


async def test_results_survive_a_restart(tmp_path: Path) -> None:
    async with simulator() as target:
        async with sidecar(tmp_path, target) as client:
            _, started = await call(client, "POST", "/v1/runs", QUICK)
            await wait_for(client, started["id"], states={"succeeded"})
            _, before = await call(client, "GET", f"/v1/runs/{started['id']}/results")
        # A run that was in progress when a previous process died.
        crashed = tmp_path / "runs" / "20260101T000000Z-abcdef" / "run.json"
        crashed.parent.mkdir(parents=True)
        crashed.write_bytes(
            orjson.dumps(
                {
                    "id": crashed.parent.name,
                    "state": "running",
                    "created_unix": 1.0,
                    "options": QUICK,
                }
            )
        )
        async with sidecar(tmp_path, target) as client:
            _, listing = await call(client, "GET", "/v1/runs")
            states = {r["id"]: r["state"] for r in listing["runs"]}
            assert states == {started["id"]: "succeeded", crashed.parent.name: "interrupted"}
            _, after = await call(client, "GET", f"/v1/runs/{started['id']}/results")
            assert after == before
            _, run = await call(client, "GET", f"/v1/runs/{started['id']}")
            assert len(run["points"]) == 2


async def test_readyz_reports_whether_the_target_serves_the_model(tmp_path: Path) -> None:
    async with simulator() as target:
        async with sidecar(tmp_path, target) as client:
            status, ready = await call(client, "GET", "/readyz")
            assert status == 200 and ready["model"] == MODEL
        config = ServiceConfig(target=target, model="other", port=0, data_dir=tmp_path)
        async with (
            running_service(config) as service,
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{service.port}/readyz") as response,
        ):
            assert response.status == 503
            assert MODEL in (await response.json())["error"]
    async with sidecar(tmp_path, "http://127.0.0.1:9") as client:
        status, answer = await call(client, "GET", "/readyz")
        assert status == 503 and "unreachable" in answer["error"]


async def test_canary_feeds_metrics_between_runs(tmp_path: Path) -> None:
    async with (
        simulator() as target,
        sidecar(tmp_path, target, canary_conc=1, canary_interval_s=0.2) as client,
    ):
        deadline = time.monotonic() + 30
        ok = 0.0
        while time.monotonic() < deadline and ok == 0:
            await asyncio.sleep(0.2)
            async with client.get("/metrics") as response:
                ok = metric_sum(await response.text(), "loadgen_requests_total", outcome="ok")
        assert ok >= 1, "no canary request within 30 s"
        status, started = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 202, "a canary round must give way to a posted run"
        await wait_for(client, started["id"], states={"succeeded"})


@pytest.mark.parametrize(
    "stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name
)
async def test_a_stop_signal_cancels_the_run_flushes_and_exits_0(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """SIGHUP (the terminal or the ssh session went away) and SIGTERM stop `loadgen
    serve` as Ctrl-C does: the run is cancelled, its files kept, one line said."""
    async with simulator(step_ms=20.0) as target:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadgen",
            "serve",
            "--target",
            target,
            "--model",
            MODEL,
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path),
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "LOADGEN_API_TOKEN": ""},
        )
        try:
            assert process.stderr is not None
            port = None
            for _ in range(50):  # the "listening" line, after any warnings
                line = await asyncio.wait_for(process.stderr.readline(), 30)
                port = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line)
                if port or not line:
                    break
            assert port, "the sidecar never said where it listens"
            async with aiohttp.ClientSession(f"http://127.0.0.1:{int(port[1])}") as client:
                _, started = await call(client, "POST", "/v1/runs", LONG)
                await wait_for(client, started["id"], states={"running"}, min_requests=1)
            process.send_signal(stop)
            # hang guards: that the run was cut short, not waited out, is its state below
            rest = await asyncio.wait_for(process.stderr.read(), 15)
            code = await asyncio.wait_for(process.wait(), 15)
            assert code == 0, rest.decode(errors="replace")
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        stopping = [line for line in rest.decode().splitlines() if "stopping" in line]
        assert stopping == [
            f"loadgen serve: stopping on {stop.name} (cancelling the active run, flushing results)"
        ], rest.decode(errors="replace")
        assert "Traceback" not in rest.decode(errors="replace")
        run = orjson.loads((tmp_path / "runs" / started["id"] / "run.json").read_bytes())
        assert run["state"] == "cancelled" and run["finished_unix"] is not None
        assert read_jsonl(tmp_path / "runs" / started["id"] / "results" / "requests_conc_2.jsonl")
        point = orjson.loads(
            (tmp_path / "runs" / started["id"] / "results" / "conc_2.json").read_bytes()
        )
        assert point["complete"] is False and point["stop_reason"] == "interrupted"
        # measured on the CLI's loop, not stdlib asyncio's
        assert [p["event_loop"] for p in point["client_processes"]] == ["uvloop"]


async def test_a_failing_run_is_reported_and_frees_the_slot(tmp_path: Path) -> None:
    # Port 9 (discard) on loopback: nothing listens, the engine's preflight fails.
    async with sidecar(tmp_path, "http://127.0.0.1:9") as client:
        status, started = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 202
        run = await wait_for(client, started["id"], states={"failed"})
        assert run["error"] and run["finished_unix"] is not None
        status, again = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 202, again
        await wait_for(client, again["id"], states={"failed"})
        for method in ("GET", "DELETE"):
            status, missing = await call(client, method, "/v1/runs/20990101T000000Z-000000")
            assert status == 404 and "no run" in missing["error"]
        status, _ = await call(client, "GET", "/v1/runs/../../etc")
        assert status == 404


# --- hardening: secrets redacted, malformed auth is 401, no symbolic link followed -----

UPSTREAM_SECRET = "sk-upstream-7f3a9c1e"
URL_PASSWORD = "hunter2-pw-5150"


async def test_secrets_are_redacted_in_run_records_results_and_answers(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with simulator() as sim_url:
        port = int(sim_url.rsplit(":", 1)[1])
        async with recording_proxy("127.0.0.1", port) as wire:
            target = f"http://alice:{URL_PASSWORD}@127.0.0.1:{wire.port}"
            options = {
                **QUICK,
                "header": [f"X-Upstream-Auth:Bearer {UPSTREAM_SECRET}", "X-Session-Affinity:abc"],
            }
            async with sidecar(data_dir, target) as client:
                status, started = await call(client, "POST", "/v1/runs", options)
                assert status == 202, started
                run = await wait_for(client, started["id"], states={"succeeded"})
                answers = [orjson.dumps(run)]
                for path in ("/v1/runs", f"/v1/runs/{started['id']}/results", "/readyz"):
                    status, answer = await call(client, "GET", path)
                    assert status == 200, answer
                    answers.append(orjson.dumps(answer))
                    if path.endswith("/results"):
                        results = answer
    shown = ["X-Upstream-Auth:***", "X-Session-Affinity:abc"]
    assert run["options"]["header"] == shown
    on_disk = orjson.loads((data_dir / "runs" / started["id"] / "run.json").read_bytes())
    assert on_disk["options"]["header"] == shown
    points = [r["result"] for r in results["results"] if "max_concurrency" in r["result"]]
    assert [p["base_url"] for p in points] == [f"http://***@127.0.0.1:{wire.port}"] * 2
    for blob in (*answers, all_bytes_under(data_dir)):
        assert UPSTREAM_SECRET.encode() not in blob and URL_PASSWORD.encode() not in blob
    # Redacted where stored, real on the wire: the header and the URL's Basic auth.
    basic = base64.b64encode(f"alice:{URL_PASSWORD}".encode())
    assert wire.sent.count(f"X-Upstream-Auth: Bearer {UPSTREAM_SECRET}".encode()) >= 6
    assert wire.sent.count(b"Authorization: Basic " + basic) >= 6


async def test_url_credentials_are_redacted_in_errors(tmp_path: Path) -> None:
    async with sidecar(tmp_path, f"http://alice:{URL_PASSWORD}@127.0.0.1:9") as client:
        status, ready = await call(client, "GET", "/readyz")
        assert status == 503 and "http://***@127.0.0.1:9" in ready["error"]
        status, started = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 202
        run = await wait_for(client, started["id"], states={"failed"})
        assert "http://***@127.0.0.1:9" in run["error"]
        assert URL_PASSWORD not in orjson.dumps(run).decode() + ready["error"]
    assert URL_PASSWORD.encode() not in all_bytes_under(tmp_path)


async def test_a_record_stored_with_secrets_is_redacted_on_load(tmp_path: Path) -> None:
    """Run records written before redaction existed are rewritten when the sidecar starts."""
    old = tmp_path / "runs" / "20260101T000000Z-abcdef" / "run.json"
    old.parent.mkdir(parents=True)
    old.write_bytes(
        orjson.dumps(
            {
                "id": old.parent.name,
                "state": "succeeded",
                "created_unix": 1.0,
                "options": {**QUICK, "header": [f"Authorization:Bearer {UPSTREAM_SECRET}"]},
            }
        )
    )
    async with sidecar(tmp_path, "http://127.0.0.1:9") as client:
        status, run = await call(client, "GET", f"/v1/runs/{old.parent.name}")
        assert status == 200 and run["options"]["header"] == ["Authorization:***"]
    assert UPSTREAM_SECRET.encode() not in old.read_bytes()


async def raw_get(port: int, path: str, header_lines: list[bytes]) -> tuple[int, bytes]:
    """GET over a plain socket, header bytes sent exactly as given (no client encoding)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = [
        f"GET {path} HTTP/1.1".encode(),
        b"Host: 127.0.0.1",
        *header_lines,
        b"Connection: close",
    ]
    writer.write(b"\r\n".join(head) + b"\r\n\r\n")
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    return int(status_line.split()[1]), rest


@pytest.mark.parametrize(
    "header_lines",
    [
        [b"Authorization: Bearer \xff\xfe"],
        [b"Authorization: \xff\xfe"],
        [b"Authorization: Bearer " + TOKEN.encode() + b"\xe9"],
        [b"Authorization: Bearer s3cr\xc3\xa9t"],
        [b"Authorization: Bearer"],
        [b"Authorization: Bearer "],
        [b"Authorization:"],
        [b"Authorization: Basic " + TOKEN.encode()],
        [b"Authorization: Bearer " + TOKEN.encode()] * 2,
    ],
    ids=[
        "bearer-ff-fe",
        "ff-fe",
        "token-then-latin1",
        "utf8",
        "no-token",
        "empty-token",
        "empty",
        "basic",
        "twice",
    ],
)
async def test_malformed_authorization_is_401_never_500(
    tmp_path: Path, header_lines: list[bytes]
) -> None:
    config = ServiceConfig(
        target="http://127.0.0.1:9", model=MODEL, port=0, data_dir=tmp_path, token=TOKEN
    )
    async with running_service(config) as service:
        for path in ("/v1/runs", "/v1/runs/20260101T000000Z-abcdef/files/x"):
            status, rest = await raw_get(service.port, path, header_lines)
            assert status == 401, rest
            assert b'WWW-Authenticate: Bearer realm="loadgen"' in rest
        # The same socket path with the right token works (the 401 is the header's fault).
        status, _ = await raw_get(
            service.port, "/v1/runs", [b"Authorization: bearer " + TOKEN.encode()]
        )
        assert status == 200


@pytest.mark.parametrize("token", ["two words", "tr\u00e9s", "tab\there", "newline\n"])
def test_an_unusable_api_token_is_refused_at_start(token: str) -> None:
    argv = ["--target", "http://127.0.0.1:9", "--model", MODEL]
    with pytest.raises(ServiceError, match="visible ASCII"):
        config_from_args(argv, {"LOADGEN_API_TOKEN": token})


async def test_symbolic_links_in_the_data_dir_are_neither_listed_nor_followed(
    tmp_path: Path,
) -> None:
    data_dir, outside = tmp_path / "data", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_bytes(b'{"max_concurrency": 1, "leak": "OUTSIDE-DATA"}')
    async with simulator() as target, sidecar(data_dir, target) as client:
        status, started = await call(client, "POST", "/v1/runs", QUICK)
        run_id = started["id"]
        await wait_for(client, run_id, states={"succeeded"})
        results_dir = data_dir / "runs" / run_id / "results"
        (results_dir / "leak.json").symlink_to(outside / "secret.json")
        (results_dir / "linkdir").symlink_to(outside, target_is_directory=True)
        (results_dir / "inner.json").symlink_to(results_dir / "conc_1.json")  # inside, too
        os.mkfifo(results_dir / "fifo.json")  # must not hang a read

        status, listing = await call(client, "GET", f"/v1/runs/{run_id}/results")
        assert status == 200
        names = {f["name"] for f in listing["files"]}
        assert {"conc_1.json", "conc_2.json", "run.json"} <= names
        assert not names & {"leak.json", "inner.json", "fifo.json", "linkdir/secret.json"}
        assert b"OUTSIDE-DATA" not in orjson.dumps(listing)
        for name in (
            "leak.json",
            "linkdir/secret.json",
            "linkdir%2Fsecret.json",
            "inner.json",
            "fifo.json",
        ):
            async with client.get(URL(f"/v1/runs/{run_id}/files/{name}", encoded=True)) as r:
                assert r.status == 404, name
                assert b"OUTSIDE-DATA" not in await r.read()
        async with client.get(f"/v1/runs/{run_id}/files/conc_1.json") as r:
            assert r.status == 200 and r.content_type == "application/json"
            assert await r.read() == (results_dir / "conc_1.json").read_bytes()

        # The whole results directory swapped for a link: nothing behind it is reachable.
        results_dir.rename(results_dir.with_name("moved"))
        results_dir.symlink_to(outside, target_is_directory=True)
        status, listing = await call(client, "GET", f"/v1/runs/{run_id}/results")
        assert status == 200 and listing["files"] == [] and listing["results"] == []
        async with client.get(f"/v1/runs/{run_id}/files/secret.json") as r:
            assert r.status == 404

    # A run directory that is a link is not loaded by a restarted sidecar.
    planted = data_dir / "runs" / "20260101T000000Z-abcdef"
    (outside / "run.json").write_bytes(
        orjson.dumps({"id": planted.name, "state": "succeeded", "created_unix": 1.0, "options": {}})
    )
    planted.symlink_to(outside, target_is_directory=True)
    async with sidecar(data_dir, "http://127.0.0.1:9") as client:
        status, runs = await call(client, "GET", "/v1/runs")
        assert [r["id"] for r in runs["runs"]] == [run_id]


async def test_a_run_on_worker_processes(tmp_path: Path) -> None:
    """`workers` in the run options: the sidecar spawns them; one result set, one /metrics."""
    options = {**QUICK, "conc": "2,4", "workers": 2}
    async with simulator() as target, sidecar(tmp_path, target) as client:
        status, refused = await call(client, "POST", "/v1/runs", {**options, "shard_sync": "/tmp"})
        assert status == 400 and "shard_sync" in refused["error"]
        status, started = await call(client, "POST", "/v1/runs", options)
        assert status == 202, started
        run = await wait_for(client, started["id"], states={"succeeded"})
        assert [p["completed"] for p in run["points"]] == [4, 8]
        status, results = await call(client, "GET", f"/v1/runs/{started['id']}/results")
        points = [r["result"] for r in results["results"] if "max_concurrency" in r["result"]]
        async with client.get("/metrics") as response:
            text = await response.text()
        for point in points:
            workers = [p for p in point["client_processes"] if p["process"] != "parent"]
            assert len(workers) == 2 and sum(p["requests"] for p in workers) == point["num_prompts"]
            assert (
                metric_sum(
                    text, "loadgen_requests_total", conc=str(point["max_concurrency"]), outcome="ok"
                )
                == point["completed"]
            )
