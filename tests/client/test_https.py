"""`loadgen --base-url https://...` end to end: a real CLI run through a TLS endpoint.

The simulator speaks plain HTTP, so a small TLS-terminating relay (asyncio, a
self-signed certificate for 127.0.0.1) sits in front of it. The CLI trusts that
certificate the way a user trusts a private CA: SSL_CERT_FILE. Preflight, metrics
scrapes (aiohttp) and the measured streams (the native client) all go through TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from loadgen.records import ArrivalStamps
from loadgen.results.jsonl import read_jsonl
from loadgen.run.embedded_sim import embedded_simulator
from tests.support.tls_certs import make_certificate, server_context

SIM = ("--step-fixed-ms", "2", "--decode-token-us", "10", "--spin-us", "0", "--seed", "3")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def tls_relay(target: str, certificate: tuple[Path, Path]) -> AsyncIterator[int]:
    host, port = urlsplit(target).hostname, urlsplit(target).port
    connections = []

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, port)
        connections.append(asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w)))
        await connections[-1]

    server = await asyncio.start_server(relay, "127.0.0.1", 0, ssl=server_context(certificate))
    async with server:
        yield server.sockets[0].getsockname()[1]
        server.close()
        for pipes in connections:
            pipes.cancel()


async def test_https_base_url_end_to_end(tmp_path: Path) -> None:
    certificate = make_certificate(tmp_path)
    results = tmp_path / "results"
    async with (
        embedded_simulator(SIM, log_path=tmp_path / "sim.log") as url,
        tls_relay(url, certificate) as port,
    ):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadgen",
            "--base-url",
            f"https://127.0.0.1:{port}",
            "--conc",
            "2",
            "--isl",
            "32",
            "--osl",
            "8",
            "--prompts-per-conc",
            "2",
            "--warmup-per-conc",
            "1",
            "--results",
            str(results),
            "--no-progress",
            env={**os.environ, "SSL_CERT_FILE": str(certificate[0])},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, stderr.decode()
    records = read_jsonl(results / "requests_conc_2.jsonl")
    assert len(records) == 4 and all(r.ok and sum(r.chunk_tokens) == 8 for r in records)
    # TLS is decrypted in user space: stamped at the read, and the file says so
    assert {r.arrival_stamps for r in records} == {ArrivalStamps.READ}
    run = orjson.loads((results / "run.json").read_bytes())
    assert run["settings"]["http_client"] == "native"
    assert run["base_url"].startswith("https://")
