"""`loadgen --sim`: the simulator as a child process on a free loopback port.

A child process rather than a thread of this one: the simulator's engine loop and the
client's stamping loop would otherwise share one GIL, and a simulator step holding the
GIL would delay the client's arrival stamps by up to the interpreter's switch interval
(5 ms), i.e. the simulator's own work would show up as client-side latency. As a
process it runs on the other core (when there is one) and the client measures only what
crosses the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import IO

import aiohttp

from loadgen.client.http_session import open_session
from loadgen.config.spec import RunSpec
from loadgen.errors import SetupError
from loadgen.results.point import SimulatorHealth
from loadgen.run.shapes import load_shape
from loadgen.wording import counted

HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
HEALTH_POLL_S = 5.0  # each poll: a simulator that accepts but never answers is not up
# The simulator's own log line when its engine runs late (loadgen/sim/engine.py).
BEHIND_LINE = re.compile(rb"loadgen sim: (\d+) ms behind its step schedule")
MTP_DRAFT_TOKENS = 2  # as the DeepSeek-V4 MTP recipes


class SimulatorError(SetupError):
    """The embedded simulator did not come up; str() is the line to show."""


def sim_stream_interval(sim_args: Sequence[str]) -> int | None:
    """Engine steps per stream chunk of the embedded simulator run with `sim_args`.

    The one server whose stream interval loadgen can know: vLLM reports its
    --stream-interval in neither /metrics nor /version. None when the arguments do not
    parse (the simulator would not have started).
    """
    from loadgen.sim.config import ConfigError
    from loadgen.sim.parser import build_parser

    try:
        args, _ = build_parser().parse_known_args(list(sim_args))
    except ConfigError:
        return None
    return int(args.stream_interval)


def sim_model(sim_args: Sequence[str]) -> str:
    """The model name the embedded simulator run with `sim_args` serves."""
    from loadgen.sim.parser import build_parser

    return str(build_parser().parse_known_args(list(sim_args))[0].model)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def simulator_argv(port: int, extra: Sequence[str]) -> list[str]:
    """`--sim-args` come last, so they override these defaults (argparse: last one wins).

    No pre-step busy-wait: it delays the loopback delivery of chunks already written
    (receive-lag p99 at conc 64: 4.4 ms with the 1 ms spin, 0.8 ms without), and the
    embedded simulator always shares the machine with the client measuring it.
    """
    # --speculative-config sets K itself and refuses the --spec-tokens shorthand beside it.
    speculative = any(arg.startswith("--speculative-config") for arg in extra)
    k = [] if speculative else ["--spec-tokens", str(MTP_DRAFT_TOKENS)]
    return [
        sys.executable,
        "-m",
        "loadgen",
        "sim",
        "--host",
        HOST,
        "--port",
        str(port),
        *k,
        "--spin-us",
        "0",
        *extra,
    ]


async def _wait_healthy(base_url: str, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    deadline = perf_counter() + START_TIMEOUT_S
    async with open_session(timeout_s=HEALTH_POLL_S, max_connections=1) as session:
        while perf_counter() < deadline:
            if process.poll() is not None:
                log.seek(0)
                err = log.read().decode(errors="replace")
                last = err.strip().splitlines()[-1:] or ["(no output)"]
                raise SimulatorError(
                    f"the embedded simulator exited with status {process.returncode}: {last[0]}"
                )
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(base_url + "/health") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise SimulatorError(
        f"the embedded simulator did not answer /health within {START_TIMEOUT_S:.0f} s"
    )


def _spawn(
    argv: list[str],
    log_path: Path | None,
    cpus: frozenset[int] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    # The file outlives this function: the context manager below closes it.
    if log_path is not None:
        log: IO[bytes] = open(log_path, "w+b")  # noqa: SIM115
    else:
        log = tempfile.TemporaryFile()  # noqa: SIM115
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,  # None: loadgen's own
        start_new_session=True,  # Ctrl-C goes to loadgen, which stops the child itself
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    return process, log


class SimulatorLog:
    """The running simulator's log, read from where a point's measured phase began: how
    late it ran during that phase (its 'behind its step schedule' lines). The simulator
    writes each line as it happens (stderr is line-buffered), so the file is current."""

    def __init__(self, log: IO[bytes]) -> None:
        self._log = log
        self._final: bytes | None = None  # the whole log once the simulator has stopped

    def mark(self) -> int:
        """Where the log ends now."""
        if self._final is not None:
            return len(self._final)
        return os.fstat(self._log.fileno()).st_size

    def freeze(self, whole: bytes) -> None:
        """The simulator stopped and its file is closing: keep what it wrote, for a point
        finalized after that (a run stopped by Ctrl-C or an error unwinds the simulator
        first)."""
        self._final = whole

    def _since(self, mark: int) -> bytes:
        if self._final is not None:
            return self._final[mark:]
        return os.pread(self._log.fileno(), max(0, self.mark() - mark), mark)

    def lateness_since(self, mark: int) -> SimulatorHealth:
        """The simulator's lateness warnings written since `mark`: how many, the worst."""
        late = [int(ms) for ms in BEHIND_LINE.findall(self._since(mark))]
        return SimulatorHealth(
            simulator_behind_warnings=len(late), simulator_behind_max_ms=max(late) if late else None
        )


@dataclass(frozen=True, slots=True)
class EmbeddedSimulator:
    base_url: str
    log: SimulatorLog


@contextlib.asynccontextmanager
async def embedded_simulator(
    extra_args: Sequence[str] = (),
    *,
    log_path: Path | None = None,
    cpus: frozenset[int] | None = None,
) -> AsyncIterator[str]:
    """Start `loadgen sim` in a child process; yields its base URL; stops it on exit."""
    async with started_simulator(extra_args, log_path=log_path, cpus=cpus) as sim:
        yield sim.base_url


@contextlib.asynccontextmanager
async def started_simulator(
    extra_args: Sequence[str] = (),
    *,
    log_path: Path | None = None,
    cpus: frozenset[int] | None = None,
    dev_mode: bool = False,
) -> AsyncIterator[EmbeddedSimulator]:
    """Start `loadgen sim` in a child process; yields its URL and log; stops it on exit.

    Its output goes to a file (`log_path`, else a temporary one), never to a pipe that
    nobody drains and that would block the simulator once full. `cpus` pins the child
    (the overhead benchmark keeps simulator and client on separate cores). `dev_mode`:
    it serves POST /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1, as vLLM needs), for a
    run that resets it between points.
    """
    port = free_port()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"} if dev_mode else None
    process, log = _spawn(simulator_argv(port, extra_args), log_path, cpus, env)
    base_url = f"http://{HOST}:{port}"
    sim_log = SimulatorLog(log)
    try:
        await _wait_healthy(base_url, process, log)
        yield EmbeddedSimulator(base_url, sim_log)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.seek(0)
        whole = log.read()
        sim_log.freeze(whole)
        warning = behind_warning(whole, log_path)
        log.close()
        if warning:
            print(f"loadgen: WARNING: {warning}", file=sys.stderr)


def behind_warning(log: bytes, log_path: Path | None) -> str | None:
    """One line when the simulator fell behind its step schedule, else None.

    A CPU-starved simulator (e.g. tokenizing long prompts on a busy machine) writes the
    steps it missed back to back once it runs again: chunks meant to be a step apart
    arrive together, and ITL p50 can read 0. The figures are then those of an overloaded
    simulator, not of the engine it models, and the user must be told.
    """
    late = [int(ms) for ms in BEHIND_LINE.findall(log)]
    if not late:
        return None
    where = f" in {log_path}" if log_path is not None else ""
    return (
        f"the simulator fell behind its step schedule by up to {max(late)} ms "
        f"({counted(len(late), 'warning')}{where}): short of CPU, it sent late steps back to back, "
        "so ITL/TTFT describe an overloaded simulator; give it a free core or less load"
    )


def _duration(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def sweep_estimate(spec: RunSpec, concs: Sequence[int]) -> str | None:
    """The line a --sim run prints before it starts: what the simulator's step model says
    each point (warmup included) and the sweep will take. None where the model does not
    say (sessions, datasets, an open loop)."""
    from loadgen.sim.estimate import point_seconds
    from loadgen.sim.parser import build_parser, config_from_args

    if (
        not spec.sim
        or spec.workload.isl is None
        or spec.workload.osl is None
        or spec.sessions
        or spec.workload.dataset is not None
        or not load_shape(spec).closed
    ):
        return None
    config = config_from_args(build_parser().parse_args(simulator_argv(0, spec.sim_args)[4:]))
    each = {
        conc: point_seconds(
            config, conc, spec.load.warmup_requests(conc), spec.workload.isl, spec.workload.osl
        )
        + min(
            point_seconds(
                config,
                conc,
                spec.load.measured_requests(conc),
                spec.workload.isl,
                spec.workload.osl,
            ),
            spec.load.point_duration_s if spec.load.point_duration_s is not None else math.inf,
        )
        for conc in concs
    }
    points = ", ".join(f"{conc} ~{_duration(s)}" for conc, s in each.items())
    return (
        f"the simulator's step model puts this sweep at about "
        f"{_duration(sum(each.values()))} (conc {points}); fewer --prompts-per-conc, a "
        "--duration, or a faster step model (--sim-args '--step-fixed-ms ...') shorten it"
    )
