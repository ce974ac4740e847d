"""A Hugging Face Hub for the tokenizer tests: huggingface_hub reads HF_HOME /
HF_HUB_OFFLINE / HF_ENDPOINT when it is imported, so each case runs in a fresh
interpreter with its own environment, against a local aiohttp server speaking the two
calls hf_hub_download makes (HEAD, then GET of .../resolve/...)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = "deepseek-ai/DeepSeek-V4-Pro"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
LOAD = (
    "import sys; from loadgen.tokenizer import encode, load_tokenizer, "
    "resolve_tokenizer_path; print(resolve_tokenizer_path(sys.argv[1])); "
    "print(encode(load_tokenizer(sys.argv[1]), 'Hello, 世界'))"
)
HELLO_IDS = "[19923, 14, 223, 3427]"


def hub_env(home: Path, endpoint: str, *, offline: bool) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {
        **env,
        "HF_HOME": str(home),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "1" if offline else "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


async def python(code: str, arg: str, env: dict[str, str]) -> tuple[int, str, str]:
    import asyncio
    import sys

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        arg,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


class FakeHub:
    """The Hub's resolve endpoint for one repository holding one file."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.requests: list[str] = []

    async def resolve(self, request: Any) -> Any:
        import hashlib

        from aiohttp import web

        self.requests.append(f"{request.method} {request.path}")
        repo = f"{request.match_info['org']}/{request.match_info['name']}"
        if repo != REPO:
            return web.Response(status=404, headers={"X-Error-Code": "RepoNotFound"})
        body = self.files.get(request.match_info["file"])
        if body is None:
            return web.Response(status=404, headers={"X-Error-Code": "EntryNotFound"})
        return web.Response(
            body=body,
            headers={"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha256(body).hexdigest()}"'},
        )

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/{org}/{name}/resolve/{rev}/{file}", self.resolve)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()


def closed_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"  # nobody listens once closed


async def failed_load_line(env: dict[str, str]) -> str:
    """The last line a load of REPO that must fail writes to stderr."""
    code, _out, err = await python(LOAD, REPO, env)
    assert code != 0
    return err.strip().splitlines()[-1]


# huggingface_hub waits between its retries with time.sleep (utils/_http.py, 1+2+4+8+8 s
# in 2.5). In the child that loads, each wait is recorded instead of slept and printed at
# exit: the library's own backoff still runs, every retry against the real closed port,
# without ~23 s of sleeping. Should the library stop calling time.sleep, the waits come
# back (slow, not wrong) and the test's count of them fails, saying so.
RECORD_WAITS = (
    "import atexit, time; waits = []; time.sleep = waits.append; "
    "atexit.register(lambda: print('waits', *waits))\n"
)


async def failed_load_waits(env: dict[str, str]) -> tuple[str, list[float]]:
    """The last stderr line of a load of REPO that must fail, and the waits the Hub client
    asked for on its way there (RECORD_WAITS)."""
    code, out, err = await python(RECORD_WAITS + LOAD, REPO, env)
    assert code != 0
    [waits] = [line for line in out.splitlines() if line.startswith("waits")]
    return err.strip().splitlines()[-1], [float(w) for w in waits.split()[1:]]
