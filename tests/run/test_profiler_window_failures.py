"""How a profiler window's start failed decides what the point says (run/features/
profiler_window.py over client/server_profiler.py): a start the real simulator refuses
(409, a session already open, as vLLM answers) opened nothing, so the point is not
profiled and no stop is sent; a start with no answer may have opened the window, so the
point is profiled but claims no trace file as written. The stop's long wait is said
before it begins."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from loadgen.client.server_profiler import STOP_TIMEOUT_S, HttpProfiler
from loadgen.results.point import ProfileState
from loadgen.run.features.profiler_window import ProfilerWindow
from tests.support.procs import free_port, start_sim, stop


@pytest.fixture
async def silent_server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A listener that reads each request and never answers. A stand-in: no real server
    (vLLM or the simulator) can be made to leave /start_profile unanswered on demand."""
    asked = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        asked.set()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", asked
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_refused_start_is_not_a_profiled_point_and_sends_no_stop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = tmp_path / "traces"
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log", "--profiler-dir", str(traces))
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            # someone else's session is open: the server refuses ours (409)
            async with session.post(f"{base}/start_profile", json={"profile_prefix": "theirs"}):
                pass
            window = ProfilerWindow(HttpProfiler(session, base), "r1", 4)
            await window.before_measure()
            await window.close()
            state = window.state
            # their session is still open: loadgen's window did not close it
            async with session.post(f"{base}/stop_profile") as response:
                assert response.status == 200
    finally:
        stop(sim)
    assert state.profiled is False and state.profile_trace is None, state
    assert state.profile_prefix is None
    assert state.profile_error is not None
    assert state.profile_error.startswith("start: POST /start_profile answered HTTP 409")
    assert [path.name.split("_")[0] for path in traces.iterdir()] == ["theirs"]
    err = capsys.readouterr().err
    assert "no window opened, the point is measured unprofiled" in err, err
    assert "wrote its trace files" not in err and "closing the profiler window" not in err


async def test_an_unanswered_start_is_profiled_but_claims_no_trace(
    silent_server: tuple[str, asyncio.Event], capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = silent_server
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.5)) as session:
        window = ProfilerWindow(HttpProfiler(session, base), "r1", 4)
        await window.before_measure()
    state = window.state
    assert state.profiled is True and state.profile_prefix == "loadgen-r1-c4", state
    assert state.profile_trace is None  # no file claimed as written
    assert state.profile_error is not None
    assert state.profile_error.startswith("start: POST /start_profile: ")
    assert "may have been written" in state.profile_error
    assert "may have opened the window" in capsys.readouterr().err


async def test_the_stop_says_its_wait_before_it_waits(
    silent_server: tuple[str, asyncio.Event], capsys: pytest.CaptureFixture[str]
) -> None:
    base, asked = silent_server
    async with aiohttp.ClientSession() as session:
        profiler = HttpProfiler(session, base)
        stopping = asyncio.create_task(profiler.stop())
        await asyncio.wait_for(asked.wait(), 10)  # the server holds the stop unanswered
        err = capsys.readouterr().err
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
    assert "the server writes its trace before it answers" in err, err
    assert f"loadgen waits up to {STOP_TIMEOUT_S:.0f} s" in err


def test_combined_keeps_a_refused_starts_error() -> None:
    refused = ProfileState(profile_error="start: refused")
    assert ProfileState.combined([refused, ProfileState()]).profile_error == "start: refused"
