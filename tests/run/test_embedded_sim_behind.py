"""A `--sim` run whose simulator fell behind its step schedule says so.

A starved simulator sends the steps it missed back to back (ITL p50 can read 0); the
figures then describe an overloaded simulator. The test starves a real embedded
simulator by stopping its process (SIGSTOP) in the middle of a stream.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from loadgen.run.embedded_sim import behind_warning, embedded_simulator


def simulator_pid(port: str) -> int:
    """This process's child serving `port` (the embedded simulator)."""
    me = os.getpid()
    for task in Path(f"/proc/{me}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if b"sim" in cmdline and port.encode() in cmdline:
                return int(child)
    raise AssertionError("no simulator child process")


async def test_a_starved_simulator_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "simulator.log"
    async with (
        embedded_simulator(("--step-fixed-ms", "2", "--spec-tokens", "0"), log_path=log) as url,
        aiohttp.ClientSession() as session,
    ):
        pid = simulator_pid(url.rsplit(":", 1)[1])
        async with session.get(url + "/v1/models") as response:
            model = (await response.json())["data"][0]["id"]
        body = {
            "model": model,
            "prompt": "hello",
            "max_tokens": 300,
            "stream": True,
            "ignore_eos": True,
        }
        async with session.post(url + "/v1/completions", json=body) as response:
            await response.content.readline()  # streaming has begun
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(0.3)
            finally:
                os.kill(pid, signal.SIGCONT)
            await response.read()
    err = capsys.readouterr().err
    assert "loadgen: WARNING: the simulator fell behind its step schedule" in err, err
    assert str(log) in err and "ITL/TTFT describe an overloaded simulator" in err


def test_behind_warning_reads_the_simulator_log() -> None:
    clean = b"loadgen sim: serving m at http://127.0.0.1:1\nloadgen sim: stopped\n"
    assert behind_warning(clean, None) is None
    late = clean + (
        b"loadgen sim: 66 ms behind its step schedule (CPU-starved?): sends\n"
        b"loadgen sim: 291 ms behind its step schedule (CPU-starved?): sends\n"
    )
    warning = behind_warning(late, Path("r/simulator.log"))
    assert warning is not None
    assert "by up to 291 ms (2 warnings in r/simulator.log)" in warning


def test_behind_warning_counts_one_warning_in_the_singular() -> None:
    once = b"loadgen sim: 66 ms behind its step schedule (CPU-starved?): sends\n"
    warning = behind_warning(once, Path("r/simulator.log"))
    assert warning is not None
    assert "by up to 66 ms (1 warning in r/simulator.log)" in warning
