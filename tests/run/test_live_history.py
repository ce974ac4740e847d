"""--live-history over real sockets: the next turn carries the server's own reply.

Scripted servers (tests/support/hostile_server.py, raw asyncio on 127.0.0.1) answer each turn with
a reply derived from its prompt, so the test knows exactly what the next prompt must
hold; a relay in front of the real simulator records its streamed replies the same way.
"""

from __future__ import annotations

import itertools
import zlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from tokenizers import Tokenizer

from encoders.deepseek_v4 import EOS, USER
from loadgen.config.args import spec_from_argv, spec_from_options
from loadgen.config.spec import SpecError
from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions, sweep_points
from tests.support.hostile_server import Conn, Handler, HostileServer, Request, sse
from tests.support.paths import TRACES
from tests.support.procs import simulator

pytestmark = pytest.mark.timeout(240)

TURNS = 3
BASE = (
    "--conc",
    "2",
    "--isl",
    "64",
    "--osl",
    "4",
    "--turns",
    str(TURNS),
    "--turn-tokens",
    "8",
    "--sessions-per-conc",
    "1",
    "--seed",
    "5",
    "--no-progress",
)
Script = Callable[[Request, int], tuple[str, str] | None]  # (reasoning, content) or HTTP 500


def key(request: Request) -> str:
    body = request.json()
    return f"{zlib.crc32(orjson.dumps(body.get('prompt') or body['messages'])):08x}"


def reply(request: Request, salt: int) -> tuple[str, str]:
    return f"R{salt}-{key(request)}", f" A{salt}-{key(request)}"


def scripted(script: Script, salt: int, *, chat: bool) -> Handler:
    """Streams the scripted reply in the first event, then empty token events up to
    max_tokens (one token id each, as vLLM with return_token_ids), usage, [DONE]."""

    async def handle(request: Request, conn: Conn) -> None:
        texts = script(request, salt)
        if texts is None:
            await conn.answer(500, b'{"error": "scripted failure"}')
            return
        max_tokens = request.json()["max_tokens"]
        if chat:
            deltas = [{"reasoning": texts[0]}, {"content": texts[1]}]
            choices = [{"index": 0, "delta": d, "token_ids": [7]} for d in deltas]
        else:
            text = f"{texts[0]}</think>{texts[1]}" if texts != ("", "") else ""
            choices = [{"index": 0, "text": text, "token_ids": [7]}]
        while len(choices) < max_tokens:
            choices.append(
                {"index": 0, "text": "", "token_ids": [7]}
                if not chat
                else {"index": 0, "delta": {"content": ""}, "token_ids": [7]}
            )
        events = [
            {"choices": [c], "usage": {"prompt_tokens": 3, "completion_tokens": n}}
            for n, c in enumerate(choices[:max_tokens], 1)
        ]
        await conn.head(chunked=True)
        await conn.chunk(sse(events))
        await conn.end()

    return handle


def turns_by_session(server: HostileServer) -> dict[str, list[Request]]:
    sessions: dict[str, list[Request]] = defaultdict(list)
    for request in server.requests:
        if "x-session-id" in request.headers:  # not the preflight probe
            sessions[request.headers["x-session-id"]].append(request)
    return dict(sessions)


async def play(
    tmp_path: Path, tokenizer: Tokenizer, script: Script, salt: int, *args: str, chat: bool = False
) -> tuple[dict[str, list[Request]], dict[str, Any], list[RequestRecord]]:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    results = tmp_path / f"r{salt}{'-'.join(args)}"
    async with HostileServer({path: scripted(script, salt, chat=chat)}) as server:
        spec = spec_from_argv(
            ["--base-url", server.base_url, *BASE, "--results", str(results), *args]
        )
        await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    result = orjson.loads((results / "conc_2.json").read_bytes())
    return turns_by_session(server), result, read_jsonl(results / "requests_conc_2.jsonl")


async def test_completions_next_prompt_holds_the_reply_rendered_by_dsv4(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    sessions, result, records = await play(tmp_path, tokenizer, reply, 1, "--live-history")
    assert result["session_history"] == "live" and len(records) == 2 * TURNS
    assert len(sessions) == 2 and all(len(turns) == TURNS for turns in sessions.values())
    for turns in sessions.values():
        for before, after in itertools.pairwise(turns):
            reasoning, content = reply(before, 1)
            previous, prompt = before.json()["prompt"], after.json()["prompt"]
            # What a DeepSeek-V4 agent sends: the earlier turn's opening closed, its
            # reasoning dropped (drop_thinking: a new user turn follows), the content kept.
            assert previous.endswith("<｜Assistant｜><think>")
            assert prompt.startswith(
                previous.removesuffix("<think>") + "</think>" + content + EOS + USER
            ), (previous[-80:], prompt[len(previous) - 80 :])
            assert reasoning not in prompt


async def test_chat_next_messages_hold_content_and_reasoning(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    sessions, result, _ = await play(
        tmp_path, tokenizer, reply, 2, "--live-history", "--endpoint", "chat", chat=True
    )
    assert result["session_history"] == "live"
    for turns in sessions.values():
        assert len(turns) == TURNS
        for before, after in itertools.pairwise(turns):
            reasoning, content = reply(before, 2)
            previous, messages = before.json()["messages"], after.json()["messages"]
            assert messages[: len(previous)] == previous
            assert messages[len(previous)] == {
                "role": "assistant",
                "content": content,
                "reasoning": reasoning,
            }
            assert messages[len(previous) + 1]["role"] == "user"


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_default_history_does_not_depend_on_the_replies(
    tmp_path: Path, tokenizer: Tokenizer, chat: bool
) -> None:
    """Recorded history: byte-identical requests whatever the server answered; live
    history: later turns differ with the replies (first turns do not). No cache bust: its
    marker is drawn per run."""
    extra = ("--no-cache-bust", *(("--endpoint", "chat") if chat else ()))
    bodies: dict[str, list[list[dict[str, Any]]]] = {}
    for mode in ("recorded", "live"):
        flags = (*extra, "--live-history") if mode == "live" else extra
        runs = []
        for salt in (3, 4):
            sessions, result, _ = await play(tmp_path, tokenizer, reply, salt, *flags, chat=chat)
            assert result["session_history"] == mode
            runs.append([r.json() for _, turns in sorted(sessions.items()) for r in turns])
        bodies[mode] = runs
    assert bodies["recorded"][0] == bodies["recorded"][1]
    live_a, live_b = bodies["live"]
    assert len(live_a) == len(live_b) == 2 * TURNS
    differing = [i for i, (a, b) in enumerate(zip(live_a, live_b, strict=True)) if a != b]
    assert differing == [1, 2, 4, 5]  # every turn after the first of each session


@pytest.mark.parametrize("failure", ["http-500", "empty"])
async def test_a_failed_or_empty_turn_ends_its_session(
    tmp_path: Path, tokenizer: Tokenizer, failure: str
) -> None:
    seen: dict[str, int] = defaultdict(int)

    def script(request: Request, salt: int) -> tuple[str, str] | None:
        session = request.headers.get("x-session-id", "")
        seen[session] += 1
        if session.endswith(":s00000") and seen[session] == 2:
            return None if failure == "http-500" else ("", "")
        return reply(request, salt)

    sessions, result, records = await play(
        tmp_path, tokenizer, script, 6, "--live-history", "--max-error-rate", "0.5"
    )
    cut = next(s for s in sessions if s.endswith(":s00000"))
    assert [len(sessions[s]) for s in sorted(sessions)] == [2, TURNS]  # s00000, s00001
    assert result["replay_sessions_cut"] == 1
    assert result["replay_turns_skipped"] == TURNS - 2
    cut_records = sorted((r.turn_index, r.ok) for r in records if r.session_id == cut)
    assert cut_records == [(0, True), (1, failure == "empty")]


async def test_against_the_simulator_the_reply_text_is_in_the_next_prompt(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """A relay on a real socket in front of the real simulator keeps each streamed reply."""
    replies: dict[str, str] = {}
    with simulator(tmp_path / "sim.log") as sim_url:
        async with aiohttp.ClientSession() as client:

            def relay(path: str) -> Handler:
                async def handle(request: Request, conn: Conn) -> None:
                    async with client.request(
                        request.method,
                        sim_url + path,
                        data=request.body or None,
                        headers={"Content-Type": "application/json"},
                    ) as upstream:
                        body = await upstream.read()
                        status, content_type = upstream.status, upstream.content_type
                    if path.endswith("completions"):
                        replies[key(request)] = streamed_text(body)
                    await conn.answer(status, body, content_type)

                return handle

            routes = {
                p: relay(p)
                for p in (
                    "/v1/completions",
                    "/v1/chat/completions",
                    "/v1/models",
                    "/tokenize",
                    "/version",
                )
            }
            extras: list[tuple[str, str]] = [("--thinking", "chat"), ("--endpoint", "chat")]
            for extra in extras:
                async with HostileServer(routes) as server:
                    spec = spec_from_argv(
                        [
                            "--base-url",
                            server.base_url,
                            *BASE,
                            "--encoder",
                            "dsv4",
                            "--live-history",
                            *extra,
                            "--results",
                            str(tmp_path / extra[0].strip("-")),
                        ]
                    )
                    outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
                assert outcome.exit_code == 0
                check_sim_replies(turns_by_session(server), replies, chat=extra[0] == "--endpoint")


def streamed_text(body: bytes) -> str:
    text = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in orjson.loads(line[6:])["choices"]:
                text.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(text)


def check_sim_replies(
    sessions: dict[str, list[Request]], replies: dict[str, str], *, chat: bool
) -> None:
    assert len(sessions) == 2
    for turns in sessions.values():
        assert len(turns) == TURNS
        for before, after in itertools.pairwise(turns):
            text = replies[key(before)]
            assert text.strip()  # the simulator streamed real vocabulary text
            if chat:
                assert after.json()["messages"][len(before.json()["messages"])] == {
                    "role": "assistant",
                    "content": text,
                }
            else:  # --thinking chat: the whole completion is content
                assert after.json()["prompt"].startswith(
                    before.json()["prompt"] + text + EOS + USER
                )


def test_trace_replay_refuses_live_history() -> None:
    traces = TRACES
    with pytest.raises(SpecError, match="--live-history: trace replay rebuilds"):
        spec_from_argv(
            [
                "--sim",
                "--conc",
                "1",
                "--dataset",
                str(traces / "agentic_small.jsonl"),
                "--live-history",
            ]
        )
    with pytest.raises(SpecError, match="use it with --turns N or --multi-turn"):
        spec_from_argv(["--sim", "--conc", "1", "--isl", "64", "--osl", "4", "--live-history"])


def test_sidecar_options_take_live_history() -> None:
    options = {
        "conc": "1",
        "isl": 64,
        "osl": 4,
        "turns": "2",
        "live_history": True,
        "base_url": "http://127.0.0.1:1",
    }
    assert spec_from_options(options).session.live_history
    assert not spec_from_options({**options, "live_history": False}).session.live_history
