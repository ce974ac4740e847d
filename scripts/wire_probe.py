#!/usr/bin/env python3
"""Record exactly what an OpenAI-compatible server sends, and compare two servers.

    python3 scripts/wire_probe.py capture --base-url URL --out capture.json [--tokenizer-ok]
    python3 scripts/wire_probe.py diff real.json sim.json

`capture` sends a fixed set of requests (streams with every stream option, non-streaming,
chat, errors, /tokenize, /detokenize, /v1/models, /metrics, unknown routes) over a raw
socket and keeps the status line, headers, and every HTTP/1.1 chunk exactly as received:
chunk boundaries matter to an SSE client. `diff` compares the *shapes* (key order, value
types, nulls, constant fields, event order, header names, metric family names) because the
values (ids, times, generated text) legitimately differ between two servers.

Used for the vLLM-vs-simulator fidelity notes; standard library only, 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

PROMPT = "def main():\n    print('hello')\n"
MESSAGES = [{"role": "user", "content": "Say hello"}]
FULL_USAGE = {"include_usage": True, "continuous_usage_stats": True}


def probes(model: str) -> list[tuple[str, str, str, Any]]:
    """(name, method, path, body): body is a dict, raw bytes, or None."""
    cmpl = {"model": model, "prompt": PROMPT, "max_tokens": 6, "ignore_eos": True}
    chat = {"model": model, "messages": MESSAGES, "max_tokens": 6, "ignore_eos": True}
    return [
        ("health", "GET", "/health", None),
        ("models", "GET", "/v1/models", None),
        ("version", "GET", "/version", None),
        (
            "cmpl_stream_full",
            "POST",
            "/v1/completions",
            {**cmpl, "stream": True, "stream_options": FULL_USAGE, "return_token_ids": True},
        ),
        (
            "cmpl_stream_usage",
            "POST",
            "/v1/completions",
            {**cmpl, "stream": True, "stream_options": {"include_usage": True}},
        ),
        ("cmpl_stream_bare", "POST", "/v1/completions", {**cmpl, "stream": True}),
        (
            "cmpl_stream_logprobs",
            "POST",
            "/v1/completions",
            {**cmpl, "stream": True, "logprobs": 1, "stream_options": {"include_usage": True}},
        ),
        (
            "cmpl_stream_prompt_ids",
            "POST",
            "/v1/completions",
            {
                **cmpl,
                "prompt": [5, 6, 7, 8],
                "stream": True,
                "stream_options": FULL_USAGE,
                "return_token_ids": True,
            },
        ),
        ("cmpl_nonstream", "POST", "/v1/completions", {**cmpl, "stream": False}),
        (
            "chat_stream_full",
            "POST",
            "/v1/chat/completions",
            {**chat, "stream": True, "stream_options": FULL_USAGE, "return_token_ids": True},
        ),
        (
            "chat_stream_usage",
            "POST",
            "/v1/chat/completions",
            {**chat, "stream": True, "stream_options": {"include_usage": True}},
        ),
        ("chat_nonstream", "POST", "/v1/chat/completions", {**chat, "stream": False}),
        ("err_wrong_model", "POST", "/v1/completions", {**cmpl, "model": "nope"}),
        (
            "err_wrong_model_stream",
            "POST",
            "/v1/completions",
            {**cmpl, "model": "nope", "stream": True},
        ),
        ("err_wrong_model_chat", "POST", "/v1/chat/completions", {**chat, "model": "nope"}),
        ("err_max_tokens_too_big", "POST", "/v1/completions", {**cmpl, "max_tokens": 4000}),
        (
            "err_prompt_plus_max_tokens",
            "POST",
            "/v1/completions",
            {**cmpl, "prompt": list(range(10, 2010)), "max_tokens": 100},
        ),
        (
            "err_prompt_too_long",
            "POST",
            "/v1/completions",
            {**cmpl, "prompt": [7] * 2100, "max_tokens": 10},
        ),
        ("err_max_tokens_zero", "POST", "/v1/completions", {**cmpl, "max_tokens": 0}),
        ("err_bad_json", "POST", "/v1/completions", b"{not json"),
        ("err_missing_prompt", "POST", "/v1/completions", {"model": model, "max_tokens": 4}),
        ("tokenize_prompt", "POST", "/tokenize", {"model": model, "prompt": PROMPT}),
        ("tokenize_messages", "POST", "/tokenize", {"model": model, "messages": MESSAGES}),
        ("detokenize", "POST", "/detokenize", {"model": model, "tokens": [100, 200, 300]}),
        ("metrics", "GET", "/metrics", None),
        ("unknown_route", "GET", "/v1/nothing", None),
        ("wrong_method", "GET", "/v1/completions", None),
    ]


def read_response(sock: socket.socket) -> dict[str, Any]:
    """Status, headers and body; a chunked body keeps its chunk boundaries."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed before the headers ended")
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(line.split(": ", 1)) for line in lines[1:]]
    lower = {k.lower(): v for k, v in headers}
    chunks: list[str] = []
    if lower.get("transfer-encoding", "").lower() == "chunked":
        while True:
            while b"\r\n" not in rest:
                rest += sock.recv(65536)
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                rest += sock.recv(65536)
            chunk, rest = rest[:size], rest[size + 2 :]
            if size == 0:
                break
            chunks.append(chunk.decode("utf-8", errors="surrogateescape"))
    else:
        length = int(lower.get("content-length", "0"))
        while len(rest) < length:
            data = sock.recv(65536)
            if not data:
                break
            rest += data
        chunks.append(rest[:length].decode("utf-8", errors="surrogateescape"))
    return {"status_line": lines[0], "headers": headers, "chunks": chunks}


def send(host: str, port: int, method: str, path: str, body: Any) -> dict[str, Any]:
    payload = (
        b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    )
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: */*\r\nConnection: close\r\n"
    ).encode()
    if body is not None:
        request += (
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        ).encode()
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(request + b"\r\n" + payload)
        return read_response(sock)


def capture(base_url: str, model: str) -> dict[str, Any]:
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    out: dict[str, Any] = {"base_url": base_url, "captured_unix": time.time(), "probes": {}}
    for name, method, path, body in probes(model):
        out["probes"][name] = {
            "request": [method, path, body if not isinstance(body, bytes) else body.decode()],
            "response": send(host, port, method, path, body),
        }
    return out


# ---- shapes -------------------------------------------------------------------------
KEEP_VALUES = {
    "object",
    "finish_reason",
    "stop_reason",
    "role",
    "type",
    "code",
    "param",
    "owned_by",
    "index",
}


def shape(value: Any, key: str = "") -> Any:
    """Key order and types; values kept only where they are constants of the protocol."""
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if not value:
            return []
        if all(not isinstance(v, (dict, list)) for v in value):
            return [f"list[{type(value[0]).__name__}]"]
        return [shape(v) for v in value]
    if value is None or key in KEEP_VALUES:
        return value
    return type(value).__name__


def events(chunks: Sequence[str]) -> list[str]:
    return [e for e in "".join(chunks).split("\n\n") if e]


def event_shapes(chunks: Sequence[str]) -> list[Any]:
    shapes: list[Any] = []
    for event in events(chunks):
        data = event.removeprefix("data: ")
        try:
            shapes.append(shape(json.loads(data)))
        except json.JSONDecodeError:
            shapes.append(data)
    return shapes


def squash(shapes: list[Any]) -> list[Any]:
    """Collapse runs of identical consecutive event shapes (token counts differ by server)."""
    out: list[Any] = []
    for item in shapes:
        if not out or out[-1][0] != item:
            out.append([item, 1])
        else:
            out[-1][1] += 1
    return [item if count == 1 else {"repeated": item} for item, count in out]


def metric_families(text: str) -> dict[str, str]:
    families = {}
    for line in text.splitlines():
        if match := re.match(r"# TYPE (\S+) (\S+)", line):
            families[match.group(1)] = match.group(2)
    return families


def describe(probe: dict[str, Any], name: str) -> dict[str, Any]:
    response = probe["response"]
    headers = [k.lower() for k, _ in response["headers"] if k.lower() not in ("date",)]
    content_type = next((v for k, v in response["headers"] if k.lower() == "content-type"), "")
    desc: dict[str, Any] = {
        "status": response["status_line"],
        "header_names": headers,
        "content_type": content_type,
    }
    body = "".join(response["chunks"])
    if name == "metrics":
        desc["families"] = metric_families(body)
    elif "event-stream" in content_type:
        desc["events"] = squash(event_shapes(response["chunks"]))
        desc["events_per_http_chunk"] = sorted({len(events([c])) for c in response["chunks"]})
    else:
        try:
            desc["body"] = shape(json.loads(body))
        except json.JSONDecodeError:
            desc["body"] = body
    return desc


def diff(real: dict[str, Any], other: dict[str, Any]) -> list[str]:
    lines = []
    for name, probe in real["probes"].items():
        if name not in other["probes"]:
            lines.append(f"{name}: missing in the second capture")
            continue
        a, b = describe(probe, name), describe(other["probes"][name], name)
        for field in a.keys() | b.keys():
            if field == "families":
                missing = sorted(set(a[field]) - set(b.get(field, {})))
                extra = sorted(set(b.get(field, {})) - set(a[field]))
                typed = sorted(
                    k for k in set(a[field]) & set(b.get(field, {})) if a[field][k] != b[field][k]
                )
                for label, items in (
                    ("missing", missing),
                    ("extra", extra),
                    ("type differs", typed),
                ):
                    if items:
                        lines.append(f"{name}: metric families {label}: {', '.join(items)}")
            elif a.get(field) != b.get(field):
                lines.append(
                    f"{name}.{field}:\n  first:  {json.dumps(a.get(field))}\n"
                    f"  second: {json.dumps(b.get(field))}"
                )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("--base-url", required=True)
    cap.add_argument("--model", default="tiny")
    cap.add_argument("--out", required=True)
    dif = sub.add_parser("diff")
    dif.add_argument("first")
    dif.add_argument("second")
    args = parser.parse_args(argv)
    if args.command == "capture":
        with open(args.out, "w") as handle:
            json.dump(capture(args.base_url, args.model), handle, indent=1)
        return 0
    with open(args.first) as f1, open(args.second) as f2:
        differences = diff(json.load(f1), json.load(f2))
    print("\n".join(differences) or "no shape differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
