"""`scripts/dynamo_env.py run`, the foreground cluster a `--serve-cmd` lane launches: the
real frontend and workers answer through its relay on the host's loopback, and when one
of its processes dies it exits 1 with one line naming it and stops the others, so the
loadgen that launched it sees its server exit (a dead cluster is not hidden behind a
relay that still accepts connections). ~20 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from tests.support.dynamo_cluster import dynamo_env
from tests.support.paths import ROOT
from tests.support.procs import free_port

pytestmark = pytest.mark.dynamo


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_a_worker_that_dies_ends_the_run(dynamo_python: str, tmp_path: Path) -> None:
    port = free_port()
    work = tmp_path / "cluster"
    argv = [sys.executable, "scripts/dynamo_env.py", "run", "--port", str(port)]
    process = subprocess.Popen(
        [*argv, "--work-dir", str(work), "--layout", "1p1d"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not answers(f"http://127.0.0.1:{port}/v1/models"):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        # the decode worker's system port, relayed to the next port but one
        assert answers(f"http://127.0.0.1:{port + 2}/metrics")
        state = orjson.loads((work / dynamo_env.STATE).read_bytes())
        decode = next(w["pid"] for w in state["workers"] if w["role"] == "decode")
        os.killpg(decode, signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=60)
    assert process.returncode == 1, stderr
    assert f"the decode worker 1 (pid {decode}) exited while serving" in stderr
    assert not [pid for pid in state["pids"] if dynamo_env.running(pid)]
    assert not answers(f"http://127.0.0.1:{port}/v1/models")
