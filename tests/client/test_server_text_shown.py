"""What a server says, shown in our lines (issue 47, low items): the profiler directory
its /server_info names cannot start a line of its own or send terminal escapes; a
"cannot reach" line always says why, even when the exception's text is empty (a
timeout's).

Real sockets throughout: the simulator (its --profiler-dir named with an escape and a
forged line, as a real directory can be), and a listener that accepts and never
answers (a hung server is exactly that)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.client.cache_reset import HttpCacheReset
from loadgen.client.http_session import open_session
from loadgen.client.server_profiler import HttpProfiler
from loadgen.errors import ServerError
from tests.support.procs import free_port, point, run_loadgen, start_sim, stop

FORGED = "loadgen: error: forged"


def test_a_profiler_directory_with_escapes_and_line_breaks_stays_in_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")  # /server_info: the trace directory
    traces = tmp_path / f"tr\x1b[2Jaces\n{FORGED}"
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log", "--profiler-dir", str(traces))
    try:
        done = run_loadgen(
            ["--base-url", f"http://127.0.0.1:{port}", "--conc", "1", "--prompts-per-conc",
             "2", "--warmup-per-conc", "0", "--isl", "32", "--osl", "8", "--encoder", "raw",
             "--no-progress", "--profile-conc", "1", "--results", str(tmp_path / "r")]
        )  # fmt: skip
    finally:
        stop(sim)
    assert done.returncode == 0, done.stderr
    assert len(list(traces.iterdir())) == 1  # the server did write there
    assert "\x1b" not in done.stderr
    assert not any(line.startswith(FORGED) for line in done.stderr.splitlines()), done.stderr
    assert f"trace files in {tmp_path}/traces\\n{FORGED}" in done.stderr, done.stderr
    trace = point(tmp_path / "r", 1)["profile_trace"]
    assert "\x1b" not in trace and "\n" not in trace and trace.endswith(f"\\n{FORGED}")


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A listener that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("feature", ["profiler", "cache_reset"])
def test_cannot_reach_says_why_when_the_exception_says_nothing(
    feature: str, silent_server: str
) -> None:
    async def check() -> str:
        async with open_session(timeout_s=0.3) as session:
            control: HttpProfiler | HttpCacheReset = (
                HttpProfiler(session, silent_server)
                if feature == "profiler"
                else HttpCacheReset(session, [silent_server], timeout_s=1.0)
            )
            with pytest.raises(ServerError) as raised:
                await control.check()
        return str(raised.value)

    line = asyncio.run(check())
    head, _, why = line.partition(f"cannot reach {silent_server}: ")
    assert head and why.strip(), line  # the reason after the colon is never empty
    assert "Timeout" in why, line
