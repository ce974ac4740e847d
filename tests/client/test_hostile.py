"""The client against a hostile server (tests/support/hostile_server.py): the hardening rows.

Each test names the row of the issue it guards and runs the real client (Transport,
sweep_points) over real sockets against a raw asyncio server that sends exactly the bytes
the row describes. The CLI-level rows (one line on stderr, an exit status) are in
test_hostile_cli.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.client.native import kernel_stamps
from loadgen.client.native.client import NativeStreams
from loadgen.client.sse import SseFramer
from loadgen.client.transport import Transport
from loadgen.config.spec import RunSpec
from loadgen.records import ErrorKind, RequestRecord, StrayBytes
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions, SweepOutcome, sweep_points
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.plan import RequestSpec
from tests.support.hostile_server import (
    Conn,
    Handler,
    HostileServer,
    Request,
    alternate,
    answer_twice,
    completion,
    endless,
    hang,
    send_request,
    sized_response,
    sse,
    token_events,
    upgrade,
)

pytestmark = pytest.mark.timeout(120)

ISL, OSL = 48, 4
CONC, PER_CONC = 2, 2  # four measured requests per sweep
# Hang guards, not measurements: a row whose deadline or cap never fires fails here
# rather than at the module's 120 s timeout. What ended each request is its error's kind
# and detail, asserted by each test.
HANG_S, QUADRATIC_S = 10, 30


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


@pytest.fixture(params=["native"])  # loadgen's one client of the measured streams
def client(request: pytest.FixtureRequest) -> str:
    """The streaming client the transport-level rows run through."""
    return str(request.param)


async def send_one(
    base_url: str,
    client: str,
    *,
    idle_s: float = 5.0,
    request_timeout_s: float | None = None,
    max_tokens: int = OSL,
) -> RequestRecord:
    """One streamed request through the real transport and the given client."""
    assert client == "native"
    native = NativeStreams(max_connections=1)
    transport = Transport(
        native,
        base_url + "/v1/completions",
        request_timeout_s=request_timeout_s,
        stream_idle_timeout_s=idle_s,
    )
    request = RequestSpec(
        index=0,
        input_len=3,
        max_tokens=max_tokens,
        body=orjson.dumps({"max_tokens": max_tokens}),
    )
    try:
        async with asyncio.timeout(60):  # an old client would hang: fail instead
            return await transport.send(
                request, x_request_id="r", conc=1, scheduled_ns=0, on_record=lambda _r: None
            )
    finally:
        await native.close()


async def send_in_turn(
    base_url: str,
    client: str,
    count: int,
    *,
    pause_s: float = 0.0,
    block: Callable[[], object] | None = None,
) -> list[RequestRecord]:
    """`count` requests one after another over one kept-alive connection slot; between
    two, `pause_s` with the loop running, then `block()` with it blocked (bytes that
    arrive then wait in the socket until after the next request's write)."""
    records = []
    assert client == "native"
    native = NativeStreams(max_connections=1)
    transport = Transport(native, base_url + "/v1/completions", stream_idle_timeout_s=5)
    try:
        for index in range(count):
            if index:
                await asyncio.sleep(pause_s)
                if block is not None:
                    block()  # blocking the loop is the point
            async with asyncio.timeout(60):
                records.append(await send_request(transport, index, OSL))
    finally:
        await native.close()
    return records


async def sweep(
    server: HostileServer, results: Path, tokenizer: Tokenizer, **settings: Any
) -> tuple[SweepOutcome, dict[str, Any], list[RequestRecord]]:
    spec = RunSpec.flat(
        conc=(CONC,),
        isl=ISL,
        osl=OSL,
        base_url=server.base_url,
        prompts_per_conc=PER_CONC,
        warmup_per_conc=0,
        results_dir=results,
        progress=False,
        **settings,
    )
    async with asyncio.timeout(90):
        outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    result = orjson.loads((results / f"conc_{CONC}.json").read_bytes())
    assert (results / "run.json").is_file()
    return outcome, result, read_jsonl(results / f"requests_conc_{CONC}.jsonl")


# --- row 1: CRLF / CR line endings --------------------------------------------------------


@pytest.mark.parametrize("piece", [None, 5], ids=["one-write", "5-byte-writes"])
@pytest.mark.parametrize("eol", [b"\r\n", b"\r"], ids=["crlf", "cr"])
async def test_row1_crlf_and_cr_streams_complete(
    eol: bytes, piece: int | None, client: str
) -> None:
    async with HostileServer({"/v1/completions": completion(eol=eol, piece=piece)}) as server:
        record = await send_one(server.base_url, client)
    assert record.ok, record.error_detail
    assert record.chunk_tokens == (1,) * OSL and record.completion_tokens == OSL


async def test_row1_crlf_sweep_has_no_disconnects(tmp_path: Path, tokenizer: Tokenizer) -> None:
    routes = {"/v1/completions": completion(eol=b"\r\n")}
    async with HostileServer(routes) as server:
        outcome, result, records = await sweep(server, tmp_path, tokenizer)
    assert outcome.exit_code == 0 and result["completed"] == CONC * PER_CONC
    assert all(count == 0 for count in result["errors_by_kind"].values())
    assert result["total_output_tokens"] == OSL * CONC * PER_CONC
    assert all(r.ok for r in records)


async def test_event_cut_by_end_of_stream_is_not_dispatched(client: str) -> None:
    """WHATWG: an event no blank line ended is discarded at end of stream."""

    async def unterminated(request: Request, conn: Conn) -> None:
        body = sse(token_events(OSL))
        await conn.head(chunked=True)
        await conn.chunk(body[:-1])  # `data: [DONE]\n` without its blank line
        await conn.end()

    async with HostileServer({"/v1/completions": unterminated}) as server:
        record = await send_one(server.base_url, client)
    assert record.error is ErrorKind.DISCONNECT and "discarded" in record.error_detail
    assert record.chunk_tokens == (1,) * OSL  # what came before is kept


# --- rows 2 and 4: wrong types and impossible values ---------------------------------------

PLAIN = completion(usage=None, ids=False)  # no token ids, no usage: counts from the text


def _assert_published_figures_sane(result: dict[str, Any]) -> None:
    for key, value in result.items():
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and ("throughput" in key or key.endswith(("_ms", "_tokens", "duration")))
        ):
            assert value >= 0, (key, value)


@pytest.mark.parametrize(
    ("good", "bad", "reason"),
    [
        (completion(), completion(usage="7"), 'usage.completion_tokens is "7"'),
        (PLAIN, completion(usage=None, ids=False, text=5), "text is 5"),
        (completion(), completion(usage=2**70), "usage.completion_tokens is 1.18"),
    ],
    ids=["usage-string", "text-number", "usage-2^70"],
)
async def test_row2_wrong_types_are_malformed_not_a_crash(
    tmp_path: Path, tokenizer: Tokenizer, good: Handler, bad: Handler, reason: str
) -> None:
    # The preflight probe gets `good`, then measured requests alternate bad, good, ...
    async with HostileServer({"/v1/completions": alternate(good, bad)}) as server:
        outcome, result, records = await sweep(server, tmp_path, tokenizer)
    malformed = [r for r in records if r.error is ErrorKind.MALFORMED]
    assert len(records) == CONC * PER_CONC and len(malformed) == CONC * PER_CONC // 2
    assert all(reason in r.error_detail for r in malformed), malformed[0].error_detail
    assert result["errors_by_kind"]["malformed"] == len(malformed)
    assert result["completed"] == len(records) - len(malformed)
    assert outcome.failed_points == (CONC,)  # 50% errors > --max-error-rate
    assert result["output_throughput"] > 0
    _assert_published_figures_sane(result)


@pytest.mark.parametrize(
    ("usage", "reason"),
    [
        (-5, "usage.completion_tokens is -5"),
        (1e15, "usage.completion_tokens is 1000000000000000.0"),
        (10**15, "usage.completion_tokens is 1000000000000000"),
        (3.7, "usage.completion_tokens is 3.7"),
        (True, "usage.completion_tokens is true"),
        (10**6, "usage.completion_tokens is 1000000, more than max_tokens 4"),
    ],
    ids=["negative", "1e15", "10^15", "3.7", "true", "over-max-tokens"],
)
async def test_row4_impossible_usage_never_reaches_a_figure(
    tmp_path: Path, tokenizer: Tokenizer, usage: Any, reason: str
) -> None:
    async with HostileServer(
        {"/v1/completions": alternate(completion(), completion(usage=usage))}
    ) as server:
        _, result, records = await sweep(server, tmp_path, tokenizer)
    malformed = [r for r in records if r.error is ErrorKind.MALFORMED]
    assert len(malformed) == CONC * PER_CONC // 2
    assert all(reason in r.error_detail for r in malformed), malformed[0].error_detail
    assert all(r.completion_tokens in (None, OSL) for r in records)  # never stored
    # The published figures are the good requests' own, exactly.
    completed = result["completed"]
    assert completed == CONC * PER_CONC // 2
    assert result["total_output_tokens"] == OSL * completed
    assert result["output_throughput"] == pytest.approx(
        result["total_output_tokens"] / result["duration"]
    )
    assert result["output_lens"].count(0) == len(malformed)
    _assert_published_figures_sane(result)


# --- row 3: no unbounded wait ------------------------------------------------------------


def _bad_chunk_then_silence(tail: bytes) -> Handler:
    async def handle(request: Request, conn: Conn) -> None:
        await conn.head(chunked=True)
        await conn.chunk(sse(token_events(OSL))[:200])  # the first event, whole
        await asyncio.sleep(0.05)
        await conn.send(tail)
        await conn.hang()

    return handle


@pytest.mark.parametrize(
    "tail",
    [b"fffffff\r\nabc", b"5\r\nab", b"3"],
    ids=["huge-size", "short-chunk", "unterminated-size"],
)
async def test_row3_bad_chunk_size_then_silence_times_out(tail: bytes, client: str) -> None:
    async with HostileServer({"/v1/completions": _bad_chunk_then_silence(tail)}) as server:
        async with asyncio.timeout(HANG_S):  # a hang guard: no timer fired at all
            record = await send_one(server.base_url, client, idle_s=0.5)
    assert record.error is ErrorKind.TIMEOUT, record
    assert "--stream-idle-timeout" in record.error_detail  # the idle timer, not another
    assert record.chunk_tokens == (1,)  # the event before the silence is kept


async def test_invalid_chunk_size_is_malformed_at_once(client: str) -> None:
    """aiohttp closes the connection but never fails the body: it would wait forever.
    The native client's llhttp rejects the size in the read that carries it."""
    async with HostileServer({"/v1/completions": _bad_chunk_then_silence(b"zz\r\n")}) as server:
        async with asyncio.timeout(HANG_S):  # a hang guard: aiohttp waited forever
            record = await send_one(server.base_url, client, idle_s=30)
    # malformed, not the idle timeout's TIMEOUT: rejected in the read, not 30 s later
    assert record.error is ErrorKind.MALFORMED, record
    assert "invalid HTTP body framing" in record.error_detail
    assert "chunk size" in record.error_detail
    assert record.chunk_tokens == (1,)


async def test_row3_post_never_answered_times_out(client: str) -> None:
    async with HostileServer({"/v1/completions": hang}) as server:
        record = await send_one(server.base_url, client, idle_s=0.5)
    assert record.error is ErrorKind.TIMEOUT and record.status is None
    assert "--stream-idle-timeout" in record.error_detail


async def test_request_timeout_still_caps_a_steady_stream(client: str) -> None:
    """A stream that never idles is still ended by --request-timeout, and says so."""

    async def endless(request: Request, conn: Conn) -> None:
        event = sse(token_events(1))[: -len(b"data: [DONE]\n\n")]
        await conn.head(chunked=True)
        for index in range(2000):
            await conn.chunk(event)
            # the first ten at once: the stream has flowed by the timeout however late the
            # loop comes round (CI, busy: none had been read 0.5 s after a paced start)
            await asyncio.sleep(0.02 if index >= 10 else 0)

    async with HostileServer({"/v1/completions": endless}) as server:
        record = await send_one(
            server.base_url, client, idle_s=5, request_timeout_s=2, max_tokens=10_000
        )
    assert record.error is ErrorKind.TIMEOUT
    assert record.error_detail == "--request-timeout 2 s elapsed"
    assert len(record.chunk_tokens) >= 10


METRICS_TEXT = (
    b"# TYPE vllm:time_to_first_token_seconds histogram\n"
    b"vllm:time_to_first_token_seconds_sum 1.0\n"
    b"vllm:time_to_first_token_seconds_count 2\n"
)


async def test_row3_hanging_scrape_mid_sweep_nulls_server_fields(
    tmp_path: Path, tokenizer: Tokenizer, capsys: pytest.CaptureFixture[str]
) -> None:
    scrapes = 0

    async def metrics(request: Request, conn: Conn) -> None:
        nonlocal scrapes
        scrapes += 1
        if scrapes == 1:  # preflight's scrape is answered; every later one hangs
            await conn.answer(200, METRICS_TEXT, "text/plain; version=0.0.4")
        else:
            await conn.hang()

    async with HostileServer({"/metrics": metrics}) as server:
        outcome, result, _ = await sweep(server, tmp_path, tokenizer, http_timeout_s=0.5)
    assert outcome.exit_code == 0 and result["completed"] == CONC * PER_CONC
    assert result["server_requests"] is None and result["server_mean_ttft_ms"] is None
    warnings = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert len(warnings) == 2 and scrapes == 3  # before and after the point
    assert all(
        "/metrics did not answer within 0.5 s (--http-timeout)" in w and "server-side" in w
        for w in warnings
    )


# --- row 12: a huge event in small reads ---------------------------------------------------


@pytest.mark.exclusive
def test_row12_framer_is_linear_in_event_size() -> None:
    """Subject: the framer's CPU cost for one huge event. 20 MB in 1 KB reads: the old
    framer re-scanned its buffer per read (quadratic, hours here); each byte is now
    searched once. A generous bound, not a benchmark; the CPU time is printed."""
    event = b"data: " + b"x" * (20 << 20) + b"\r\n\r\n"
    framer = SseFramer()
    started = time.process_time()  # the work done (CPU), not the machine's load
    events = [e for i in range(0, len(event), 1024) for e in framer.feed(event[i : i + 1024])]
    elapsed = time.process_time() - started
    print(f"framer: 20 MB event in 1 KB reads, {elapsed:.2f} s CPU")
    assert len(events) == 1 and len(events[0].data) == 20 << 20 and events[0].offset == 0
    assert elapsed < 5, f"{elapsed:.1f} s for 20 MB"


async def test_row12_20mb_event_in_4kb_writes_through_the_transport(client: str) -> None:
    routes = {"/v1/completions": completion(pad=20 << 20, piece=4096)}
    async with HostileServer(routes) as server:
        async with asyncio.timeout(QUADRATIC_S):  # a guard: quadratic framing took hours
            record = await send_one(server.base_url, client)
    assert record.ok, record.error_detail
    assert record.chunk_tokens == (1,) * OSL


# --- bytes that no request asked for --------------------------------------------------------


async def test_second_response_in_the_same_write_is_nobodys(client: str) -> None:
    """A keep-alive response followed by a whole second one: the second was taken as the
    next request's answer (TTFT 0.16 ms). Now the connection closes after the first."""
    async with HostileServer({"/v1/completions": answer_twice()}) as server:
        records = await send_in_turn(server.base_url, client, 3)
        assert len(server.requests) == 3  # every request reached the server
    assert all(r.ok for r in records), [r.error_detail for r in records]
    assert all(r.connect_ns > 0 for r in records)  # a new connection each time
    assert all(r.chunk_tokens == (1,) * OSL for r in records)
    if client == "native":  # aiohttp closes such a connection too, without telling
        assert all(r.stray_bytes is StrayBytes.AFTER_RESPONSE for r in records)


async def test_late_response_on_an_idle_connection_reaches_no_request(client: str) -> None:
    """The second response comes while the connection is idle: aiohttp kept it and gave
    it to the next request (TTFT -50 ms). Now that connection closes. By events: the
    server sends the copy once the client has made its record, and the next request is
    sent once the client has closed that connection (or not, within the hang guard)."""
    assert client == "native"
    cue, late_sent = asyncio.Event(), asyncio.Event()

    async def answer_then_again_on_cue(request: Request, conn: Conn) -> None:
        response = sized_response(request.json()["max_tokens"])
        await conn.send(response)
        await cue.wait()
        cue.clear()
        await conn.send(response)  # the late end of an earlier answer, while idle
        late_sent.set()

    native = NativeStreams(max_connections=1)
    records: list[RequestRecord] = []
    tainted: dict[tuple[int, int], str] = {}
    async with HostileServer({"/v1/completions": answer_then_again_on_cue}) as server:
        transport = Transport(native, server.base_url + "/v1/completions", stream_idle_timeout_s=5)
        try:
            async with asyncio.timeout(30):  # a hang guard
                for index in range(3):
                    records.append(await send_request(transport, index, OSL))
                    late_sent.clear()
                    cue.set()
                    await late_sent.wait()
                    # until the client has read the late bytes (it says so for the
                    # request they may belong to, and closes the connection)
                    key = (records[-1].request_id, records[-1].start_ns)
                    while key not in tainted:
                        tainted |= transport.take_tainted()
                        await asyncio.sleep(0.01)
        finally:
            await native.close()
        assert len(server.requests) == 3
    assert all(r.ok for r in records), [r.error_detail for r in records]
    assert all(r.connect_ns > 0 for r in records)  # each on a new connection
    assert all(r.ttft_ns is not None and r.ttft_ns > 0 for r in records)
    assert set(tainted) == {(r.request_id, r.start_ns) for r in records}


def _serve_twice_in_a_thread(
    listener: socket.socket, blocking: threading.Event, answered_twice: threading.Event
) -> None:
    """A connection's first request answered, then answered again once the client's loop
    is blocked (`blocking`), from a thread of its own (an in-loop server could not write
    then); `answered_twice` is set once that copy is written. Both are handshakes, not
    guessed times: a copy sent 50 ms after the answer was read by a CI rehearsal's busy
    loop before it blocked (stray after the response, not before the next write).

    The connection's second request gets no answer of its own: the copy waiting in the
    socket is what the client reads for it. An answer could land before that read, and
    one read that returns both carries the answer's stamp (one stamp per read), which
    no client can split. Any later request on it is answered once."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # the test closed the listener
        with conn:
            data = b""
            for served in itertools.count():
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        break
                    data += more
                if b"\r\n\r\n" not in data:
                    break
                head, _, data = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                response = sized_response(OSL)
                with contextlib.suppress(OSError):  # the client may close first
                    if served == 0:
                        conn.sendall(response)
                        blocking.wait(30)
                        blocking.clear()
                        conn.sendall(response)
                        answered_twice.set()
                    elif served > 1:
                        conn.sendall(response)


@pytest.mark.skipif(not kernel_stamps.supported(), reason="kernel receive stamps: Linux")
async def test_bytes_stamped_before_the_write_are_not_its_response() -> None:
    """The late response waits in the socket while the loop is blocked and is read only
    after the next request was written; its kernel stamp says it came before."""
    listener = socket.create_server(("127.0.0.1", 0))
    blocking, answered_twice = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=_serve_twice_in_a_thread, args=(listener, blocking, answered_twice), daemon=True
    )
    thread.start()

    def until_the_copy_is_in_the_socket() -> None:
        if answered_twice.is_set():
            return  # only the first connection's copy is the subject
        blocking.set()
        assert answered_twice.wait(30), "the server thread never wrote its second answer"
        # sendall() returned: on loopback the bytes are in our receive queue, stamped
        time.sleep(0.02)

    try:
        base_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        records = await send_in_turn(
            base_url, "native", 3, pause_s=0.01, block=until_the_copy_is_in_the_socket
        )
    finally:
        listener.close()
        blocking.set()  # the last request's copy waits for a block that never comes
        thread.join(30)
    first, stale, after = records
    assert first.ok and first.stray_bytes is None
    assert stale.error is ErrorKind.MALFORMED and stale.stray_bytes is StrayBytes.BEFORE_REQUEST
    assert "before this request was written" in stale.error_detail, stale.error_detail
    assert stale.chunk_tokens == ()  # nothing of it is counted
    assert after.ok and after.connect_ns > 0  # a new connection


async def test_stray_responses_are_counted_in_the_point(
    tmp_path: Path,
    tokenizer: Tokenizer,
) -> None:
    async with HostileServer({"/v1/completions": answer_twice()}) as server:
        outcome, result, _ = await sweep(server, tmp_path, tokenizer, http_client="native")
    assert outcome.exit_code == 0 and result["completed"] == CONC * PER_CONC
    assert result["stray_bytes_after_response"] == CONC * PER_CONC
    assert result["stray_bytes_before_request"] == 0
    assert result["new_connections"] == CONC * PER_CONC  # none was reused


async def test_101_is_that_requests_http_error_and_no_one_elses(client: str) -> None:
    """A 101 escaped the native parser loop (HttpParserUpgrade is no HttpParserError):
    streams queued behind it were never parsed, and it surfaced as a timeout."""
    routes = {"/up": upgrade, "/slow": completion(piece=20)}
    assert client == "native"
    async with HostileServer(routes) as server:
        native = NativeStreams(max_connections=4)
        streams = native
        upgraded = Transport(streams, server.base_url + "/up", stream_idle_timeout_s=5)
        slow = Transport(streams, server.base_url + "/slow", stream_idle_timeout_s=5)
        slow.ingest = upgraded.ingest  # one ingest, as in a run
        request = RequestSpec(
            index=0, input_len=3, max_tokens=20, body=orjson.dumps({"max_tokens": 20})
        )
        try:
            async with asyncio.timeout(30):
                records = await asyncio.gather(
                    *[
                        t.send(
                            request,
                            x_request_id="r",
                            conc=1,
                            scheduled_ns=0,
                            on_record=lambda _r: None,
                        )
                        for t in (slow, upgraded, slow)
                    ]
                )
        finally:
            await native.close()
    first, up, last = records
    assert up.error is ErrorKind.HTTP and up.status == 101, up
    assert "the server answered 101 Switching Protocols to a streamed completion" in (
        up.error_detail
    )
    assert "HttpParserUpgrade" not in up.error_detail
    for record in (first, last):
        assert record.ok, record.error_detail
        assert record.chunk_tokens == (1,) * 20


# --- bounded events and heads ---------------------------------------------------------------

_EVENT = sse(token_events(1))[:200]  # a whole first event, then the endless one


@pytest.mark.parametrize(
    ("start", "filler"),
    [
        (_EVENT + b"data: ", b"x"),  # one line that never ends
        (_EVENT, b"data: " + b"x" * 1000 + b"\n"),  # data lines, never a blank line
        (_EVENT + b": ", b"x"),  # a comment line that never ends
    ],
    ids=["endless-line", "endless-event", "endless-comment"],
)
async def test_an_event_that_never_ends_is_malformed_at_the_cap(
    client: str, start: bytes, filler: bytes
) -> None:
    """It grew without limit (6 GB in 20 s) and, bytes still coming, no deadline fired."""
    async with HostileServer({"/v1/completions": endless(start, filler)}) as server:
        async with asyncio.timeout(QUADRATIC_S):  # a hang guard: it grew without end
            record = await send_one(server.base_url, client, idle_s=60)
    assert record.error is ErrorKind.MALFORMED, record
    assert "grew past 32 MiB without ending" in record.error_detail, record.error_detail
    assert record.chunk_tokens == (1,)  # the event before it is kept


async def test_a_head_that_never_ends_is_malformed_at_the_cap(client: str) -> None:
    """Native: 64 KiB (MAX_HEAD_BYTES); aiohttp: its own 8190-byte line limit."""
    handler = endless(b"HTTP/1.1 200 OK\r\nX-A: ", b"a", head=False)
    async with HostileServer({"/v1/completions": handler}) as server:
        async with asyncio.timeout(QUADRATIC_S):  # a hang guard: it grew without end
            record = await send_one(server.base_url, client, idle_s=60)
    assert record.error is ErrorKind.MALFORMED, record
    if client == "native":
        assert "head grew past 64 KiB without ending" in record.error_detail
    else:
        assert "8190" in record.error_detail, record.error_detail


# --- counts a server lies about -------------------------------------------------------------


def _events_with(change: Any) -> list[dict[str, Any]]:
    events = token_events(OSL)
    change(events)
    return events


def _usages(*values: int) -> Any:
    def change(events: list[dict[str, Any]]) -> None:
        for event, value in zip(events, values, strict=True):
            event["usage"]["completion_tokens"] = value

    return change


def _no_usage_but_a_final_zero(events: list[dict[str, Any]]) -> None:
    for event in events[:-1]:
        del event["usage"]
    events[-1]["usage"]["completion_tokens"] = 0


def _index_one(events: list[dict[str, Any]]) -> None:
    events[1]["choices"][0]["index"] = 1


def _streamed(body: bytes) -> Handler:
    async def handle(_request: Request, conn: Conn) -> None:
        await conn.head(chunked=True)
        await conn.chunk(body)
        await conn.end()

    return handle


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_usages(1, 2, 1, 4, 4), "usage.completion_tokens went down from 2 to 1"),
        (_usages(1, 2, 3, 4, 0), "went down from 4 to 0"),
        (_usages(1, 1, 1, 1, 1), "usage.completion_tokens is 1, but the chunks' token_ids hold 4"),
        (_no_usage_but_a_final_zero, "usage.completion_tokens is 0 after chunks carrying 4"),
        (_index_one, "choices[0].index is 1, expected 0"),
        (_usages(1, 2, 3, 4, 14), "usage.completion_tokens is 14, more than max_tokens 4 allows"),
    ],
    ids=[
        "decreases",
        "final-zero",
        "under-token-ids",
        "only-final-zero",
        "index-1",
        "over-max-tokens-by-10",
    ],
)
async def test_counts_that_contradict_each_other_are_malformed(
    client: str, change: Any, reason: str
) -> None:
    body = sse(_events_with(change))
    async with HostileServer({"/v1/completions": _streamed(body)}) as server:
        record = await send_one(server.base_url, client)
    assert record.error is ErrorKind.MALFORMED, record
    assert reason in record.error_detail, record.error_detail


async def test_a_duplicate_key_cannot_inflate_a_count(client: str) -> None:
    """msgspec and orjson keep a duplicate key's last value; the cross-checks (here: the
    cap at max_tokens and the token ids' sum) refuse what that value claims."""
    body = sse(token_events(OSL)).replace(
        b'"completion_tokens": 4}}', b'"completion_tokens": 4, "completion_tokens": 60}}'
    )
    assert b'"completion_tokens": 60' in body
    async with HostileServer({"/v1/completions": _streamed(body)}) as server:
        record = await send_one(server.base_url, client)
    assert record.error is ErrorKind.MALFORMED and "is 60" in record.error_detail, record
