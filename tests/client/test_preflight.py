"""Preflight against a small scripted OpenAI server on 127.0.0.1 (port 0).

The server is scripted (not the simulator) so it can refuse `return_token_ids` or count
tokens differently, which no faithful vLLM twin would do on purpose.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from aiohttp import web

from loadgen.client.http_session import open_session
from loadgen.client.native.client import NativeStreams
from loadgen.client.preflight import PreflightError, preflight
from loadgen.records import TokenSource
from loadgen.workload.bodies import BodyOptions


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class Script:
    def __init__(
        self,
        *,
        reject_token_ids: bool = False,
        tokenize_extra: int = 0,
        max_model_len: int = 4096,
        models: tuple[str, ...] = ("m",),
        redirect: dict[str, str] | None = None,
        refuse: tuple[str, ...] = (),
    ) -> None:
        self.redirect = redirect or {}  # path -> the Location it answers with (302)
        # top-level fields refused by name, in Dynamo 1.4.2's words (tests/fixtures/
        # dynamo_1.4.2/completions_400.json; the real frontend: tests/integration/test_dynamo.py)
        self.refuse = refuse
        self.reject_token_ids = reject_token_ids
        self.tokenize_extra = tokenize_extra
        self.max_model_len = max_model_len
        self.models = models
        self.bodies: list[dict[str, Any]] = []


async def serve(script: Script) -> AsyncGenerator[str, None]:
    async def models(_r: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "max_model_len": script.max_model_len}
                    for m in script.models
                ],
            }
        )

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"count": len(body["prompt"].split()) + script.tokenize_extra})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        script.bodies.append(body)
        if script.reject_token_ids and "return_token_ids" in body:
            return web.json_response(
                {"error": {"message": "unknown field return_token_ids", "code": 400}}, status=400
            )
        if refused := [name for name in body if name in script.refuse]:
            listed = ", ".join(f"`{name}`" for name in refused)
            message = f"Validation: Unsupported parameter(s): {listed}"
            return web.json_response(
                {"message": message, "type": "Bad Request", "code": 400}, status=400
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n in range(1, body["max_tokens"] + 1):
            choice: dict[str, Any] = {"index": 0, "text": "w "}
            if body.get("return_token_ids"):
                choice["token_ids"] = [7]
            await response.write(
                event({"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": n}})
            )
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    @web.middleware
    async def redirects(request: web.Request, handler: Any) -> web.StreamResponse:
        location = script.redirect.get(request.path)
        if location is not None:
            return web.Response(status=302, headers={"Location": location})
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application(middlewares=[redirects])
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/", models)  # a same-origin redirect's target
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def run_preflight(
    script: Script,
    *,
    model: str | None = None,
    isl: int = 100,
    osl: int = 10,
    headers: dict[str, str] | None = None,
) -> Any:
    gen = serve(script)
    base = await gen.__anext__()
    streams = NativeStreams(max_connections=2, headers=headers)
    try:
        async with open_session(max_connections=2, headers=headers) as session:
            return await preflight(
                session,
                base,
                wanted_model=model,
                isl=isl,
                osl=osl,
                options=BodyOptions(endpoint="completions", model=""),
                prompt=("one two three", 3),
                streams=streams,
            )
    finally:
        await streams.close()
        await gen.aclose()


async def test_accepts_and_prefers_token_ids() -> None:
    script = Script()
    info = await run_preflight(script)
    assert info.model == "m" and info.max_model_len == 4096
    assert info.token_source is TokenSource.TOKEN_IDS and info.options.return_token_ids
    assert info.tokenize_check["match"] is True and not info.warnings
    assert info.spec_decoding is None  # this server has no /metrics
    assert script.bodies[0]["add_special_tokens"] is False


async def test_rejected_option_falls_back_to_usage() -> None:
    script = Script(reject_token_ids=True)
    info = await run_preflight(script)
    assert not info.options.return_token_ids and info.options.continuous_usage
    assert info.token_source is TokenSource.USAGE
    assert any("usage" in w for w in info.warnings)
    assert "return_token_ids" in script.bodies[0] and "return_token_ids" not in script.bodies[-1]
    # a 400 that does not refuse the field by name drops nothing (the fallback chain acts)
    assert info.dropped_options == {} and info.options.omit == ()


async def test_options_refused_by_name_are_dropped_and_recorded() -> None:
    """Dynamo's frontend refuses vLLM's extensions by name: they are left out, the run
    goes on with counts from usage, and one line and run.json say so."""
    script = Script(refuse=("add_special_tokens", "return_token_ids"))
    info = await run_preflight(script)
    assert info.token_source is TokenSource.USAGE
    assert info.options.omit == ("add_special_tokens",) and not info.options.return_token_ids
    assert set(info.dropped_options) == {"add_special_tokens", "return_token_ids"}
    assert info.dropped_options["return_token_ids"] == "per-chunk token counts come from usage"
    assert "prompt_tokens" in info.dropped_options["add_special_tokens"]
    (line,) = [w for w in info.warnings if "refused" in w]
    assert "add_special_tokens, return_token_ids by name" in line and "from usage" in line
    assert not any("does not return token ids" in w for w in info.warnings)  # said once
    assert {"add_special_tokens", "return_token_ids"} <= script.bodies[0].keys()
    last = script.bodies[-1]
    assert "add_special_tokens" not in last and "return_token_ids" not in last
    assert last["ignore_eos"] is True and last["stream_options"]["continuous_usage_stats"]
    stored = info.to_json()
    assert stored["dropped_options"] == info.dropped_options
    assert list(stored["options"]["omit"]) == ["add_special_tokens"]


async def test_a_refused_field_the_user_asked_for_stops_the_run() -> None:
    """--extra-body fields are the user's: refused by name, they are not dropped."""
    script = Script(refuse=("priority",))
    gen = serve(script)
    base = await gen.__anext__()
    streams = NativeStreams(max_connections=2)
    try:
        async with open_session(max_connections=2) as session:
            with pytest.raises(PreflightError, match=r"Unsupported parameter.*priority"):
                await preflight(
                    session,
                    base,
                    wanted_model=None,
                    isl=100,
                    osl=10,
                    options=BodyOptions(
                        endpoint="completions", model="", extra_body={"priority": 1}
                    ),
                    prompt=("one two three", 3),
                    streams=streams,
                )
    finally:
        await streams.close()
        await gen.aclose()


async def test_tokenizer_mismatch_is_loud() -> None:
    info = await run_preflight(Script(tokenize_extra=2))
    assert info.tokenize_check == {"loadgen": 3, "server": 5, "match": False, "note": ""}
    assert any(w.startswith("TOKENIZER MISMATCH") and "--tokenizer" in w for w in info.warnings)


@pytest.mark.parametrize(
    ("script", "model", "isl", "message"),
    [
        (Script(models=("a", "b")), "c", 10, "model 'c' is not served .* served: a, b"),
        (Script(models=("a", "b")), None, 10, "pick one with --model"),
        (Script(max_model_len=2048), None, 2040, "max_model_len 2048.*--max-model-len >= 2050"),
    ],
)
async def test_stops_with_one_clear_line(
    script: Script, model: str | None, isl: int, message: str
) -> None:
    with pytest.raises(PreflightError, match=message) as caught:
        await run_preflight(script, model=model, isl=isl)
    assert "\n" not in str(caught.value)


SECRET = "sk-preflight-6d1e0b"


@asynccontextmanager
async def header_recorder() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """Another origin (another port of 127.0.0.1) that records what reaches it."""
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response(
            {"object": "list", "data": [{"id": "m"}], "count": 3, "version": "x"}
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("path", ["/v1/models", "/tokenize", "/metrics", "/version"])
async def test_a_redirect_to_another_origin_is_refused_and_the_secret_stays(path: str) -> None:
    async with header_recorder() as (elsewhere, seen):
        script = Script(redirect={path: f"{elsewhere}/steal{path}"})
        with pytest.raises(PreflightError) as caught:
            await run_preflight(script, headers={"X-Api-Key": SECRET})
        assert str(caught.value) == (
            f"the server redirected {path} to {elsewhere}/steal{path}: loadgen does not "
            "follow redirects to another origin; point --base-url at the server itself"
        )
        assert seen == [], "nothing at all reached the other origin"


async def test_a_redirect_within_the_origin_is_followed() -> None:
    script = Script(redirect={"/v1/models": "/v1/models/"})
    info = await run_preflight(script, headers={"X-Api-Key": SECRET})
    assert info.model == "m"
