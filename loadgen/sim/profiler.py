"""--profiler-dir DIR: vLLM 0.32's profiler routes over the simulator's engine steps.

As in vLLM (client/server_profiler.py says where that was read), `POST /start_profile`
and `POST /stop_profile` exist only when the server has a profiler; the start takes an
optional JSON body (`profile_prefix`, `delay_iterations`, `max_iterations`, strict
types; a second start while a session is open is 409), the stop answers 200 once the
trace is written, and also when nothing was started. The trace is one JSON file per
window, `<prefix>_sim_engine.<unix ms>.trace.json` (no prefix: `sim_engine.<ms>...`):
each engine step profiled, its start and end (perf_counter_ns) and the X-Request-Id of
every request in its batch, so a test can tell which requests ran inside the window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from loadgen.sim.validate import ApiError, bad_request

_PREFIX_CHARS = frozenset("._-")


def check_profile_prefix(prefix: Any) -> str | None:
    """vLLM's validate_profile_prefix: 1-128 ASCII of [A-Za-z0-9._-], alphanumeric first."""
    if prefix is None:
        return None
    if (
        not isinstance(prefix, str)
        or not 1 <= len(prefix) <= 128
        or not prefix.isascii()
        or not prefix[0].isalnum()
        or any(not (c.isalnum() or c in _PREFIX_CHARS) for c in prefix[1:])
    ):
        raise bad_request(
            "profile_prefix must be 1-128 ASCII characters, start with a letter or number, "
            "and contain only letters, numbers, '.', '_', or '-'"
        )
    return prefix


def _iterations(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if value is None:
        return 0  # the config's default: start now, no limit
    if not isinstance(value, int) or isinstance(value, bool):  # pydantic strict mode
        raise bad_request(f"{name}: an integer", name, value)
    if value < 0:
        raise bad_request(f"{name} must be greater than or equal to 0", name, value)
    return value


class SimProfiler:
    """One profiling session at a time; its steps, written as a file at the stop."""

    def __init__(self, directory: str | Path, wall: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory).expanduser().absolute()  # as vLLM makes it
        self.wall = wall
        self.active = False
        self.prefix: str | None = None
        self.delay = self.limit = self.seen = 0
        self.steps: list[dict[str, Any]] = []

    def start(self, body: Any) -> None:
        """POST /start_profile's body (None: no body): ApiError 400 or 409."""
        if body is not None and not isinstance(body, dict):
            raise bad_request("the body must be a JSON object")
        fields = body or {}
        prefix = check_profile_prefix(fields.get("profile_prefix"))
        delay = _iterations(fields, "delay_iterations")
        limit = _iterations(fields, "max_iterations")
        if self.active:
            raise ApiError(
                409,
                "A profiling session is already active. Call /stop_profile before "
                "starting another session.",
                "ConflictError",
            )
        self.active, self.prefix, self.delay, self.limit = True, prefix, delay, limit
        self.seen, self.steps = 0, []

    def step(self, start_ns: int, end_ns: int, request_ids: Sequence[str | None]) -> None:
        """An engine step while the session is open: kept once past the delay, up to
        the limit (0: none), as vLLM's worker profiler counts its iterations."""
        self.seen += 1
        if self.seen <= self.delay or (self.limit and len(self.steps) >= self.limit):
            return
        self.steps.append({"start_ns": start_ns, "end_ns": end_ns, "requests": list(request_ids)})

    def stop(self) -> Path | None:
        """POST /stop_profile: the session's trace file, or None when none was open."""
        if not self.active:
            return None
        self.active = False
        name = f"sim_engine.{int(self.wall() * 1000)}.trace.json"
        path = self.directory / (f"{self.prefix}_{name}" if self.prefix else name)
        self.directory.mkdir(parents=True, exist_ok=True)
        trace = {"profile_prefix": self.prefix, "steps": self.steps}
        path.write_bytes(orjson.dumps(trace))
        self.steps = []
        return path
