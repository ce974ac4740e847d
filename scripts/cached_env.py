"""What the test-only environments (vllm_cpu.py, dynamo_env.py) share: where their cache
lives, one build step run and timed, a lock around a build, the interpreter a venv is made
from, and whether a process group still lives. Standard library only; loaded by path
beside them (they are run as scripts and loaded by path from the tests)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path


class PrepareError(RuntimeError):
    """An environment could not be built; the message says which step and why."""


def cache_root(explicit: str | None, env_var: str, name: str) -> Path:
    """`explicit`, else $`env_var`, else ${XDG_CACHE_HOME:-~/.cache}/loadgen/`name`."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    if env := os.environ.get(env_var):
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser().resolve() / "loadgen" / name


def run_step(
    argv: Sequence[str],
    *,
    what: str,
    log: Callable[[str], None],
    env: Mapping[str, str] | None = None,
) -> float:
    """Run one build command, returning its duration; its output goes to our stderr."""
    log(f"{what}: {shlex.join(argv)}")
    started = time.perf_counter()
    result = subprocess.run(
        argv,
        env=dict(env) if env is not None else None,
        check=False,
        stdout=sys.stderr,
        stderr=sys.stderr,
    )
    if result.returncode != 0:
        raise PrepareError(f"{what} failed (exit {result.returncode}): {shlex.join(argv)}")
    return round(time.perf_counter() - started, 1)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialize concurrent `prepare` runs (two pytest sessions) on one cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def base_python() -> str:
    # A venv made from inside another venv would chain to it; use the real interpreter.
    return getattr(sys, "_base_executable", None) or sys.executable


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
