"""A hostile OpenAI-compatible server for tests: raw asyncio on 127.0.0.1, every byte scripted.

No HTTP library stands between a test and the wire: the server parses just enough of
HTTP/1.1 (request line, headers, Content-Length body, keep-alive) to route a request,
and each route is a handler that writes exactly the bytes it wants -- CR or CRLF line
endings, wrong-typed JSON, a chunk size that is not hex, a 20 MB event in 4 KB writes,
or nothing at all, forever.

    async with HostileServer({"/v1/completions": completion(eol=b"\\r\\n")}) as server:
        ... server.base_url ...

Routes not given answer like a minimal vLLM: /v1/models lists model "m", /tokenize,
/version and /metrics answer 404 (optional endpoints), /v1/completions streams
`max_tokens` one-token chunks with token ids and cumulative usage, then `[DONE]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadgen.client.transport import Transport
from loadgen.records import RequestRecord
from loadgen.workload.plan import RequestSpec

HOST = "127.0.0.1"
MODEL = "m"


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Conn:
    """One client connection, written byte for byte."""

    def __init__(self, writer: asyncio.StreamWriter, stopped: asyncio.Event) -> None:
        self.writer = writer
        self.keep_alive = True
        self._stopped = stopped

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def head(
        self,
        status: int = 200,
        content_type: str = "text/event-stream",
        *,
        length: int | None = None,
        chunked: bool = False,
    ) -> None:
        """Status line and headers; without length or chunked the body ends at close."""
        lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}"]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        elif chunked:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append("Connection: close")
            self.keep_alive = False
        await self.send(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def chunk(self, data: bytes) -> None:
        """One chunk of a chunked body (b"" would end it: use end())."""
        if data:
            await self.send(b"%x\r\n%s\r\n" % (len(data), data))

    async def end(self) -> None:
        await self.send(b"0\r\n\r\n")

    async def answer(
        self, status: int, body: bytes, content_type: str = "application/json"
    ) -> None:
        await self.head(status, content_type, length=len(body))
        await self.send(body)

    async def hang(self) -> None:
        """Never say another byte (until the server is stopped, which closes the socket)."""
        await self._stopped.wait()
        self.keep_alive = False


Handler = Callable[[Request, Conn], Awaitable[None]]


# --- ready-made handlers --------------------------------------------------------------


def answer_json(obj: Any, status: int = 200) -> Handler:
    async def handle(_request: Request, conn: Conn) -> None:
        await conn.answer(status, json.dumps(obj).encode())

    return handle


def answer_bytes(body: bytes, content_type: str, status: int = 200) -> Handler:
    async def handle(_request: Request, conn: Conn) -> None:
        await conn.answer(status, body, content_type)

    return handle


def compressed(body: bytes, content_type: str, encoding: str = "gzip") -> Handler:
    """`body` sent as is, declared compressed (`Content-Encoding`), whatever was asked."""

    async def handle(_request: Request, conn: Conn) -> None:
        await conn.send(
            f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Encoding: "
            f"{encoding}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        await conn.send(body)

    return handle


def redirect(location: str, status: int = 302) -> Handler:
    async def handle(_request: Request, conn: Conn) -> None:
        await conn.send(
            f"HTTP/1.1 {status} X\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()
        )

    return handle


async def hang(_request: Request, conn: Conn) -> None:
    await conn.hang()


async def upgrade(_request: Request, conn: Conn) -> None:
    """101 Switching Protocols to a completion, then silence."""
    await conn.send(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
    )
    await conn.hang()


async def not_found(_request: Request, conn: Conn) -> None:
    await conn.answer(404, b'{"detail":"Not Found"}')


MODELS = answer_json(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 1_000_000}]}
)

COUNT = object()  # usage value placeholder: the true cumulative count
_RESPONSES = itertools.count()


def response_id() -> str:
    """A response's own id, as vLLM gives each (its chunks all carry it): a connection
    that gets the previous response's id again is out of step (the client refuses it)."""
    return f"cmpl-h{next(_RESPONSES)}"


def token_events(
    max_tokens: int,
    *,
    usage: Any = COUNT,
    text: Any = "w",
    ids: bool = True,
    pad: int = 0,
    chunk_id: str | None = "",
) -> list[dict[str, Any]]:
    """vLLM's /v1/completions stream with return_token_ids and continuous usage.

    `usage` replaces every completion_tokens value (any JSON, however wrong; None: no
    usage at all); `ids=False` leaves out token_ids (a server without vLLM's extension);
    `pad` adds a string of that many bytes to the first event (a huge event);
    `chunk_id`: every chunk's `id` ("": a new one, `response_id()`; None: no `id`).
    """
    events: list[dict[str, Any]] = []
    if chunk_id == "":
        chunk_id = response_id()
    for n in range(1, max_tokens + 1):
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "finish_reason": "length" if n == max_tokens else None,
        }
        if ids:
            choice["token_ids"] = [7]
        event: dict[str, Any] = {"id": chunk_id, "object": "text_completion", "choices": [choice]}
        if chunk_id is None:
            del event["id"]
        if n == 1 and pad:
            event["padding"] = "x" * pad
        if usage is not None:
            event["usage"] = {
                "prompt_tokens": 3,
                "completion_tokens": n if usage is COUNT else usage,
            }
        events.append(event)
    if usage is not None:
        final: dict[str, Any] = {
            "choices": [],
            "usage": {
                "prompt_tokens": 3,
                "completion_tokens": max_tokens if usage is COUNT else usage,
            },
        }
        events.append(final if chunk_id is None else {"id": chunk_id, **final})
    return events


def sse(events: Iterable[dict[str, Any] | str], eol: bytes = b"\n") -> bytes:
    """`data: <json>` events with the given line ending, then `data: [DONE]`.

    json (not orjson): it writes the ints beyond 64 bits that hostile tests need.
    """
    out = bytearray()
    for event in [*events, "[DONE]"]:
        payload = event.encode() if isinstance(event, str) else json.dumps(event).encode()
        out += b"data: " + payload + eol + eol
    return bytes(out)


def completion(
    *,
    eol: bytes = b"\n",
    usage: Any = COUNT,
    text: Any = "w",
    ids: bool = True,
    pad: int = 0,
    piece: int | None = None,
    then: str = "end",
) -> Handler:
    """A streamed completion for the request's max_tokens, written as scripted.

    piece: write the body in pieces of this many bytes, one per event-loop turn (the
    client then sees small reads); then: "end" (a proper end), "silence" (never end).
    """

    async def handle(request: Request, conn: Conn) -> None:
        body = sse(
            token_events(request.json()["max_tokens"], usage=usage, text=text, ids=ids, pad=pad),
            eol,
        )
        await conn.head(chunked=True)
        step = piece or len(body)
        for start in range(0, len(body), step):
            await conn.chunk(body[start : start + step])
            if piece:
                await asyncio.sleep(0)
        if then == "silence":
            await conn.hang()
            return
        await conn.end()

    return handle


def sized_response(max_tokens: int, chunk_id: str | None = "") -> bytes:
    """A whole streamed completion with a Content-Length (keep-alive) body (`chunk_id`:
    as token_events')."""
    body = sse(token_events(max_tokens, chunk_id=chunk_id))
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def answer_twice(delay: float | None = None) -> Handler:
    """A whole keep-alive response, then a second one no request asked for: in the same
    write (delay None) or `delay` seconds later (the late end of an earlier answer)."""

    async def handle(request: Request, conn: Conn) -> None:
        response = sized_response(request.json()["max_tokens"])
        if delay is None:
            await conn.send(response + response)
            return
        await conn.send(response)
        await asyncio.sleep(delay)
        await conn.send(response)

    return handle


def endless(start: bytes, filler: bytes, *, head: bool = True) -> Handler:
    """`start`, then `filler` over and over until the client hangs up: an SSE line or
    event that never ends (head=True: inside a chunked event-stream body), or a response
    head that never ends (head=False: `start` is the head's beginning)."""

    async def handle(_request: Request, conn: Conn) -> None:
        if head:
            await conn.head(chunked=True)
            await conn.chunk(start)
        else:
            await conn.send(start)
        block = filler * max(1, (64 << 10) // len(filler))
        while True:  # the client closing the connection ends this (ConnectionError)
            if head:
                await conn.chunk(block)
            else:
                await conn.send(block)

    return handle


def alternate(*handlers: Handler) -> Handler:
    """Request k is answered by handlers[k % len(handlers)] (per route, in arrival order)."""
    turn = itertools.cycle(handlers)

    async def handle(request: Request, conn: Conn) -> None:
        await next(turn)(request, conn)

    return handle


# --- the server -------------------------------------------------------------------------


@dataclass
class HostileServer:
    """Serves `routes` (path -> handler) over raw asyncio streams; see the module doc."""

    routes: dict[str, Handler] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)  # every request, in order

    def __post_init__(self) -> None:
        self.routes = {
            "/v1/models": MODELS,
            "/tokenize": not_found,
            "/version": not_found,
            "/metrics": not_found,
            "/v1/completions": completion(),
            **self.routes,
        }
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = asyncio.Event()
        self._port = 0

    @property
    def base_url(self) -> str:
        assert self._port, "the server has not started"
        return f"http://{HOST}:{self._port}"

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    async def __aenter__(self) -> HostileServer:
        self._server = await asyncio.start_server(self._connection, HOST, 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self._stopped.set()  # hanging handlers return; their connections close
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(writer, self._stopped)
        try:
            while conn.keep_alive:
                request = await _read_request(reader)
                if request is None:
                    break
                self.requests.append(request)
                await self.routes.get(request.path, not_found)(request, conn)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away (or sent a huge head): that is its right
        finally:
            self._tasks.discard(task)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, target.split("?", 1)[0], headers, body)


async def send_request(
    transport: Transport, index: int, max_tokens: int, x_request_id: str = "r"
) -> RequestRecord:
    """One small completions request through the real transport, at conc 1."""
    request = RequestSpec(
        index=index,
        input_len=3,
        max_tokens=max_tokens,
        body=orjson.dumps({"max_tokens": max_tokens}),
    )
    return await transport.send(
        request, x_request_id=x_request_id, conc=1, scheduled_ns=0, on_record=lambda _r: None
    )
