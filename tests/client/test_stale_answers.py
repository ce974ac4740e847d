"""Answers out of step on a kept connection, over real sockets: a raw asyncio server of
our own (it sends what no real server would on purpose), the real native client.

- A server whose chunks carry no `id`: 20 ms after each request it sends a same-size
  copy of the answer before (a stale response of the right size), and the real answer
  only 300 ms after the request. The copy was taken as the request's answer (TTFT 20 ms
  instead of ~300 ms, recorded ok, no counter moved); the real answer then came while
  the connection was idle and only closed it. Now those bytes taint every request the
  connection answered since its last clean idle period: each is made malformed
  (`stray_bytes: later`), in the point and its JSONL alike.
- A server whose chunks carry their response's `id` (as vLLM's do) and that answers a
  request with a copy of the previous answer only: no bytes ever came while idle, so the
  copy stood as the answer, ok. Now a response whose chunks carry the previous
  response's id on its connection, or change id midway, is malformed and its connection
  closed.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.client.native.client import NativeStreams
from loadgen.client.transport import Transport
from loadgen.config.spec import RunSpec
from loadgen.records import ErrorKind, RequestRecord, StrayBytes
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.tokenizer import load_tokenizer
from tests.support.hostile_server import (
    Conn,
    Handler,
    HostileServer,
    Request,
    completion,
    send_request,
    sized_response,
    sse,
    token_events,
)

pytestmark = pytest.mark.timeout(120)
# The point-level tests build the scenario from a paced server (out_of_step): the copy must
# be read within 200 ms of the request and the real answer after it (CI, three workers
# busy: the copy's TTFT read 530 ms), so they run alone. The transport-level test hands
# off by events instead (out_of_step_on_cue).
ALONE = pytest.mark.exclusive
OSL = 4
STALE_S, REAL_S = 0.02, 0.3


def out_of_step() -> Handler:
    """Per connection: a copy of its previous answer after STALE_S, the real one after
    REAL_S (each request in turn, as one connection's requests are); no chunk has an
    `id`, so only the late bytes can show the copy."""
    last: weakref.WeakKeyDictionary[Conn, bytes] = weakref.WeakKeyDictionary()

    async def handle(request: Request, conn: Conn) -> None:
        started = time.monotonic()
        answer = sized_response(request.json()["max_tokens"], chunk_id=None)
        if conn in last:
            await asyncio.sleep(STALE_S)
            await conn.send(last[conn])
        await asyncio.sleep(max(0.0, REAL_S - (time.monotonic() - started)))
        await conn.send(answer)
        last[conn] = answer

    return handle


class OnCue:
    """out_of_step's exchange by events, not by a pace: on a kept connection the copy of
    the previous answer goes at once, and the real answer only when the test says so
    (once the client has made its record, from the copy alone)."""

    def __init__(self) -> None:
        self.cue = asyncio.Event()  # the test: send the real answer now
        self.late_sent = asyncio.Event()  # the real answer went after a copy
        self.last: weakref.WeakKeyDictionary[Conn, bytes] = weakref.WeakKeyDictionary()

    async def __call__(self, request: Request, conn: Conn) -> None:
        answer = sized_response(request.json()["max_tokens"], chunk_id=None)
        late = conn in self.last
        if late:
            await conn.send(self.last[conn])
            await self.cue.wait()
        await conn.send(answer)
        self.last[conn] = answer
        if late:
            self.late_sent.set()


async def test_the_request_that_took_a_stale_copy_is_tainted() -> None:
    server_side = OnCue()
    async with HostileServer({"/v1/completions": server_side}) as server:
        native = NativeStreams(max_connections=1)
        transport = Transport(native, server.base_url + "/v1/completions", stream_idle_timeout_s=5)
        records: list[RequestRecord] = []
        tainted: dict[tuple[int, int], str] = {}
        try:
            async with asyncio.timeout(30):  # a hang guard
                for index in range(3):
                    records.append(await send_request(transport, index, OSL))
                    if index == 0:
                        # a clean idle period (protocol.reused): at rest at least as long as
                        # the exchange took, so request 0 stands whatever comes later
                        record = records[0]
                        await asyncio.sleep(2 * (record.end_ns - record.start_ns) / 1e9 + 0.01)
                    if index == 1:  # recorded from the copy: now the real answer, while idle
                        assert not server_side.late_sent.is_set()
                        server_side.cue.set()
                        await server_side.late_sent.wait()
                        while not tainted:  # until the client has read it
                            tainted |= transport.take_tainted()
                            await asyncio.sleep(0.01)
        finally:
            await native.close()
    first, stale, fresh = records
    assert first.ok and first.connect_ns > 0
    assert stale.ok and stale.connect_ns == 0  # the copy, on the kept connection, stood
    assert fresh.ok and fresh.connect_ns > 0  # the real answer came while idle and closed it
    tainted |= transport.take_tainted()
    assert set(tainted) == {(stale.request_id, stale.start_ns)}, tainted
    assert "came on its connection while idle after it" in tainted[stale.request_id, stale.start_ns]


def copy_of_the_last() -> Handler:
    """Per connection: the first request answered (chunks with their own id), every later
    one with a byte-for-byte copy of that answer only: the right size, ids and all."""
    last: weakref.WeakKeyDictionary[Conn, bytes] = weakref.WeakKeyDictionary()

    async def handle(request: Request, conn: Conn) -> None:
        if conn not in last:
            last[conn] = sized_response(request.json()["max_tokens"])
        await conn.send(last[conn])

    return handle


def two_ids_in_one() -> Handler:
    """One response whose first chunks carry one id and the rest another."""

    async def handle(request: Request, conn: Conn) -> None:
        tokens = request.json()["max_tokens"]
        events = token_events(tokens, usage=None)
        for event in events[tokens // 2 :]:
            event["id"] = "cmpl-another"
        body = sse(events)
        await conn.answer(200, body, "text/event-stream")

    return handle


async def send_in_turn(
    handler: Handler, count: int
) -> tuple[list[RequestRecord], dict[tuple[int, int], str]]:
    """`count` requests one after the other on a one-connection pool; their records and
    the taints found."""
    async with HostileServer({"/v1/completions": handler}) as server:
        native = NativeStreams(max_connections=1)
        transport = Transport(native, server.base_url + "/v1/completions", stream_idle_timeout_s=5)
        records: list[RequestRecord] = []
        try:
            for index in range(count):
                async with asyncio.timeout(30):
                    records.append(await send_request(transport, index, OSL, f"r{index}"))
        finally:
            await native.close()
    return records, transport.take_tainted()


async def test_a_copy_of_the_previous_answer_is_not_taken_as_the_answer() -> None:
    """Round 4's case: the copy comes after the next request was written, and nothing
    comes while idle; the chunk ids are the copy's tell."""
    (first, copy, after), tainted = await send_in_turn(copy_of_the_last(), 3)
    assert first.ok and first.chunk_tokens == (1,) * OSL
    assert copy.error is ErrorKind.MALFORMED, copy
    assert "of the previous response on its connection" in copy.error_detail
    assert copy.chunk_ns == ()  # refused at its first chunk: nothing of it is counted
    # its connection closed: the next request opened another, and got a fresh answer
    assert after.ok and after.connect_ns > 0
    assert tainted == {}


async def test_a_response_whose_chunk_id_changes_is_out_of_step() -> None:
    (record,), _ = await send_in_turn(two_ids_in_one(), 1)
    assert record.error is ErrorKind.MALFORMED, record
    assert "chunk id changed from" in record.error_detail
    assert "'cmpl-another'" not in record.error_detail  # (shown as JSON, quoted)
    assert '"cmpl-another"' in record.error_detail


async def test_responses_with_their_own_ids_stand() -> None:
    """The check refuses nothing a server that gives each response its id sends."""
    records, tainted = await send_in_turn(completion(), 4)
    assert [r.ok for r in records] == [True] * 4
    assert [r.connect_ns > 0 for r in records] == [True, False, False, False]  # one connection
    assert tainted == {}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


async def slow_metrics(_request: Request, conn: Conn) -> None:
    """/metrics after a while: the point ends only once the late answer has come."""
    await asyncio.sleep(0.8)
    await conn.answer(404, b'{"detail":"Not Found"}')


@ALONE
async def test_a_point_counts_tainted_requests_malformed(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    routes = {"/v1/completions": out_of_step(), "/metrics": slow_metrics}
    async with HostileServer(routes) as server:
        spec = RunSpec.flat(
            conc=(1,),
            isl=48,
            osl=OSL,
            base_url=server.base_url,
            prompts_per_conc=2,
            warmup_per_conc=0,
            results_dir=tmp_path,
            progress=False,
            max_error_rate=1.0,
        )
        async with asyncio.timeout(60):
            await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    point: dict[str, Any] = orjson.loads((tmp_path / "conc_1.json").read_bytes())
    records = read_jsonl(tmp_path / "requests_conc_1.jsonl")
    # the first took the probe's copy, the second the first's real answer: both out of step
    assert [r.error for r in records] == [ErrorKind.MALFORMED] * 2, records
    assert all(r.stray_bytes is StrayBytes.LATER for r in records)
    assert point["completed"] == 0 and point["errors_by_kind"]["malformed"] == 2
    assert point["stray_bytes_later"] == 2, point["errors"]


@ALONE
async def test_taints_found_in_worker_processes_reach_the_merged_point(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """--workers 2: each worker's transport finds its own taints, after the records went
    to the parent; they used to stay in the worker (every request counted ok, no counter
    moved). Now they reach the parent's point, its counters and its JSONL alike."""
    from loadgen.scale.sweep import run_sweep

    routes = {"/v1/completions": out_of_step(), "/metrics": slow_metrics}
    async with HostileServer(routes) as server:
        spec = RunSpec.flat(
            conc=(2,),
            isl=48,
            osl=OSL,
            base_url=server.base_url,
            prompts_per_conc=2,
            warmup_per_conc=0,
            results_dir=tmp_path,
            progress=False,
            max_error_rate=1.0,
            workers=2,
        )
        async with asyncio.timeout(90):
            await run_sweep(spec, SweepOptions(tokenizer=tokenizer))
    point: dict[str, Any] = orjson.loads((tmp_path / "conc_2.json").read_bytes())
    records = read_jsonl(tmp_path / "requests_conc_2.jsonl")
    assert {p["process"] for p in point["client_processes"]} >= {
        "shard 0/1 worker 0/2",
        "shard 0/1 worker 1/2",
    }
    assert len(records) == 4
    later = [r for r in records if r.stray_bytes is StrayBytes.LATER]
    # each worker's second request took its first's copy: at least one per worker
    assert len(later) >= 2, [(r.error, r.stray_bytes) for r in records]
    assert all(r.error is ErrorKind.MALFORMED for r in later)
    assert "came on its connection while idle after it" in (later[0].error_detail or "")
    assert point["stray_bytes_later"] == len(later)
    assert point["errors_by_kind"]["malformed"] == len(later)
    assert point["completed"] == 4 - len(later)
