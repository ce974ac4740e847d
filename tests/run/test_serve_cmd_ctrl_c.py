"""Ctrl-C while loadgen stops the server it launched (--serve-cmd): real processes, real
signals.

The CLI runs as `python -m loadgen` and gets SIGINT from here, as a terminal's Ctrl-C.
The launched server is tests/support/stubborn_server.py: `loadgen sim` under a parent
that ignores SIGINT and SIGTERM, with a child that left the group by setsid(). It is a
wrapper because the case it stands for, a vLLM stuck in its shutdown holding its GPUs and
port, cannot be made to happen on demand with the real server. Each next signal is sent
after the line it must follow has appeared on stderr; no assertion is on a duration.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from tests.support.paths import ROOT
from tests.support.procs import lines_in

STUBBORN = ROOT / "tests" / "support" / "stubborn_server.py"
PY = shlex.quote(sys.executable)
SIM = "--step-fixed-ms 5 --spin-us 0 --seed 7"
LINE_WAIT_S = 120.0
STOPPING = "loadgen: stopping the launched server (pid "
TIMED_SIGTERM = "is still running 30 s after SIGINT: SIGTERM sent"
TIMED_SIGKILL = "is still running 15 s after SIGTERM: SIGKILL sent"
HURRIED = "loadgen: interrupted while stopping the launched server (pid "
LEFT = "of the launched server left its process group; it is stopped with it"
LATE = "late.pid"


def live_processes(pgid: int) -> list[int]:
    """The group's processes that are not zombies (a zombie holds no port, memory or GPU;
    one left to init is reaped when init gets to it)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def shell_status(returncode: int) -> int:
    """The status a shell reports: a process ended by signal N is 128 + N (a Ctrl-C that
    lands as the interpreter exits ends it so, as the shell shows the same 130)."""
    return 128 - returncode if returncode < 0 else returncode


class Run:
    """`python -m loadgen` with its stderr read as it comes, and the server's pid files."""

    def __init__(self, process: subprocess.Popen[str], tmp: Path) -> None:
        self.process = process
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(process.stderr or ()))
        self.reader.start()
        self.pidfile = tmp / "server.pid"
        self.escapefile = tmp / "escaped.pid"
        self.results = tmp / "results"

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str) -> str:
        deadline = time.monotonic() + LINE_WAIT_S
        while True:
            ended = not self.reader.is_alive()  # before the look: no line can come after
            line = next((line for line in list(self.lines) if text in line), None)
            if line is not None:
                return line
            assert not ended, f"no line with {text!r}: {self.stderr}"
            assert time.monotonic() < deadline, f"no line with {text!r}: {self.stderr}"
            time.sleep(0.02)

    def ctrl_c(self) -> None:
        self.process.send_signal(signal.SIGINT)  # nothing once it has exited

    @property
    def pgid(self) -> int:
        return int(self.pidfile.read_text().split()[0])

    @property
    def escaped(self) -> int:
        return int(self.escapefile.read_text())


@contextmanager
def loadgen_run(tmp: Path, *flags: str, ready: bool = True, late: bool = False) -> Iterator[Run]:
    """The run against a stubborn launched server (one that never gets ready unless
    `ready`; that starts a process in a session of its own on SIGINT if `late`);
    whatever it leaves is killed after."""
    command = (
        f"{PY} {shlex.quote(str(STUBBORN))} {tmp / 'server.pid'} --escape "
        f"{tmp / 'escaped.pid'} {'' if ready else '--never-ready'} "
        f"{f'--escape-on-sigint {tmp / LATE}' if late else ''} -- --port {{port}} {SIM}"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "--serve-cmd", command,
         "--conc", "2", "--isl", "48", "--encoder", "raw", "--warmup-per-conc", "0",
         "--no-progress", "--results", str(tmp / "results"), *flags],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    run = Run(process, tmp)
    try:
        yield run
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
        run.reader.join(timeout=60)
        if process.stderr is not None:
            process.stderr.close()
        if run.pidfile.exists():  # what the code before the fix left running
            for pid in live_processes(run.pgid):
                os.kill(pid, signal.SIGKILL)
        for escapefile in (run.escapefile, tmp / LATE):
            if escapefile.exists() and alive(pid := int(escapefile.read_text())):
                os.kill(pid, signal.SIGKILL)


def assert_stopped_cleanly(run: Run, *, began: bool = True) -> None:
    """Exit 130 as the shell sees it, no traceback, and nothing of the server left; and,
    once the run `began` (run.json is written then), SIGKILL recorded as what stopped it."""
    run.process.wait(timeout=LINE_WAIT_S)
    run.reader.join(timeout=LINE_WAIT_S)
    stderr = run.stderr
    assert shell_status(run.process.returncode) == 130, stderr
    assert "Traceback" not in stderr and "Event loop is closed" not in stderr, stderr
    assert stderr.count(STOPPING) == 1, stderr
    assert live_processes(run.pgid) == [], stderr
    assert not alive(run.escaped), stderr  # it had left the group: found, stopped, said
    if not began:
        assert not (run.results / "run.json").exists()
        return
    launched = orjson.loads((run.results / "run.json").read_bytes())["launched_server"]
    assert launched["pid"] == run.pgid and launched["stopped_by"] == "SIGKILL"


def measuring(run: Run) -> None:
    """Until the run has measured two requests."""
    jsonl = run.results / "requests_conc_2.jsonl"
    deadline = time.monotonic() + LINE_WAIT_S
    while lines_in(jsonl) < 2:
        assert time.monotonic() < deadline and run.process.poll() is None, run.stderr
        time.sleep(0.02)


def waiting_for_the_server(run: Run) -> None:
    """Until the server (one that never gets ready) has started its processes."""
    run.wait_for("loadgen: launched the server (pid ")
    deadline = time.monotonic() + LINE_WAIT_S
    while not (run.pidfile.exists() and run.escapefile.exists()):
        assert time.monotonic() < deadline and run.process.poll() is None, run.stderr
        time.sleep(0.02)


def test_one_ctrl_c_says_each_step_of_the_stop_and_ends_a_stubborn_server(
    tmp_path: Path,
) -> None:
    """SIGINT and SIGTERM are ignored: the stop escalates on its own, said as it goes."""
    with loadgen_run(tmp_path, "--osl", "300", "--prompts-per-conc", "50") as run:
        measuring(run)
        run.ctrl_c()
        line = run.wait_for(STOPPING)
        assert f"(pid {run.pgid}): SIGINT sent to its process group and to the processes " in (line)
        assert f"{run.escaped} (python)" in line  # the setsid() child, found and named
        assert "SIGTERM in 30 s, SIGKILL 15 s later; Ctrl-C again kills it now" in line
        run.wait_for(TIMED_SIGTERM)
        run.wait_for(TIMED_SIGKILL)
        assert_stopped_cleanly(run)
        assert HURRIED not in run.stderr


@pytest.mark.parametrize(
    ("phase", "presses"),
    [("startup", 2), ("startup", 5), ("points", 2), ("points", 3), ("points", 5)],
)
def test_ctrl_c_again_kills_a_stubborn_server_at_once_without_a_traceback(
    tmp_path: Path, phase: str, presses: int
) -> None:
    startup = phase == "startup"
    with loadgen_run(
        tmp_path, "--osl", "300", "--prompts-per-conc", "50", ready=not startup
    ) as run:
        (waiting_for_the_server if startup else measuring)(run)
        run.ctrl_c()
        run.wait_for(STOPPING)
        run.ctrl_c()
        line = run.wait_for(HURRIED)
        assert f"(pid {run.pgid}): killed now, SIGKILL sent to its process group" in line
        for _ in range(presses - 2):  # into the stop's last steps and the loop's teardown
            time.sleep(0.05)
            run.ctrl_c()
        assert_stopped_cleanly(run, began=not startup)
        assert TIMED_SIGTERM not in run.stderr  # never waited out


@pytest.mark.parametrize("presses", [1, 4])
def test_ctrl_c_while_a_finished_run_stops_its_server_kills_it_at_once(
    tmp_path: Path, presses: int
) -> None:
    """The run ended on its own; the stop is under way when Ctrl-C comes."""
    with loadgen_run(tmp_path, "--osl", "8", "--prompts-per-conc", "2") as run:
        line = run.wait_for(STOPPING)
        assert "answers at" in run.stderr  # the points ran: this is the run's own stop
        assert line.rstrip().endswith("SIGKILL 15 s later; Ctrl-C kills it now")
        run.ctrl_c()
        run.wait_for(HURRIED)
        for _ in range(presses - 1):
            time.sleep(0.05)
            run.ctrl_c()
        assert_stopped_cleanly(run)
        point = orjson.loads((run.results / "conc_2.json").read_bytes())
        assert point["complete"] is True and point["completed"] == 4  # before the stop


def test_sigterm_during_the_stop_kills_at_once_as_ctrl_c_does(tmp_path: Path) -> None:
    """A process manager's SIGTERM, twice: the second escalates as a second Ctrl-C."""
    with loadgen_run(tmp_path, "--osl", "300", "--prompts-per-conc", "50") as run:
        measuring(run)
        run.process.send_signal(signal.SIGTERM)
        run.wait_for(STOPPING)
        run.process.send_signal(signal.SIGTERM)
        run.wait_for(HURRIED)
        assert_stopped_cleanly(run)


def test_a_process_that_leaves_the_group_during_the_stop_is_found_said_and_stopped(
    tmp_path: Path,
) -> None:
    """The server starts a setsid() child as it is being stopped: killpg() cannot reach
    it, and once its parent is gone no ppid leads to it; loadgen names it and ends it."""
    with loadgen_run(tmp_path, "--osl", "300", "--prompts-per-conc", "50", late=True) as run:
        measuring(run)
        run.ctrl_c()
        run.wait_for(STOPPING)
        found = run.wait_for(LEFT)
        late = int((tmp_path / LATE).read_text())
        assert found.startswith(f"loadgen: process {late} (python) {LEFT}")
        run.ctrl_c()
        assert f"{late} (python)" in run.wait_for(HURRIED)  # SIGKILL reaches it too
        assert_stopped_cleanly(run)
        assert not alive(late)
