"""The real `loadgen` command in a child process, as the hostile-server tests run it
(tests/client/test_hostile_cli.py, test_http_hardening.py): its exit status and its
stderr lines; one that does not end within `limit_s` (a hang guard) fails the test."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

RUN = (
    "--conc",
    "2",
    "--isl",
    "48",
    "--osl",
    "4",
    "--prompts-per-conc",
    "2",
    "--warmup-per-conc",
    "0",
    "--no-progress",
)


async def loadgen(
    *args: str, env: dict[str, str] | None = None, limit_s: float = 90
) -> tuple[int, list[str]]:
    """Run the real CLI in a child process: (exit status, stderr lines)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadgen",
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        _, err = await asyncio.wait_for(process.communicate(), limit_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"loadgen {' '.join(args)} did not end within {limit_s} s") from None
    assert process.returncode is not None
    return process.returncode, err.decode().strip().splitlines()


def one_line(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    assert lines[0].startswith("loadgen: error: ") and "Traceback" not in lines[0]
    return lines[0]
