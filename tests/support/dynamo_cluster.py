"""A real Dynamo 1.4.2 frontend with mocker workers for the integration tests, built on
scripts/dynamo_env.py (the venv cached under ~/.cache/loadgen/dynamo-1.4.2).

The cluster lives in a network namespace of its own (see the script): loadgen runs in it
(`run_loadgen`, a subprocess that enters the namespace before it starts), and the test's
own reads of its URLs go through `get`. Every process the cluster started is stopped by
its process group: by the fixture's teardown, at interpreter exit, and, through
PR_SET_PDEATHSIG, by the kernel when the test process itself is killed.
"""

from __future__ import annotations

import atexit
import ctypes
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.support.paths import load_script

dynamo_env = load_script("dynamo_env")


def die_with_parent() -> None:
    # Runs in the child between fork and exec: if the test process is killed outright (no
    # teardown, no atexit), the kernel sends the process SIGTERM.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


@dataclass
class DynamoCluster:
    url: str  # the frontend's, inside the namespace
    model: str
    netns_holder: int
    worker_metrics: tuple[str, ...]  # each worker's system port /metrics
    roles: tuple[str, ...]  # each worker's role (worker, prefill, decode), as worker_metrics
    pids: tuple[int, ...]
    work_dir: Path
    startup_s: float
    stopped: bool = field(default=False)

    def get(self, url: str) -> bytes:
        def read() -> bytes:
            with urllib.request.urlopen(url, timeout=30) as response:
                return bytes(response.read())

        data: bytes = dynamo_env.in_netns(self.netns_holder, read)
        return data

    def run_loadgen(
        self, args: Sequence[str], timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """`python -m loadgen --base-url <frontend> ARGS` inside the cluster's namespace."""
        enter = dynamo_env.enter_netns(self.netns_holder)
        return subprocess.run(
            [sys.executable, "-m", "loadgen", "--base-url", self.url, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            preexec_fn=enter,
        )

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            dynamo_env.stop_all(self.pids)

    def role_args(self) -> list[str]:
        """`--server-metrics ROLE=URL` for the frontend and each worker."""
        pairs = [
            ("frontend", self.url + "/metrics"),
            *zip(self.roles, self.worker_metrics, strict=True),
        ]
        return [arg for role, url in pairs for arg in ("--server-metrics", f"{role}={url}")]


def start(
    python: str,
    work_dir: Path,
    *,
    workers: int = 1,
    layout: str | None = None,
    mocker_args: Sequence[str] = (),
    frontend_args: Sequence[str] = (),
) -> DynamoCluster:
    tokenizer = dynamo_env.bundled_tokenizer()
    state: dict[str, Any] = dynamo_env.start_cluster(
        python=python,
        work_dir=work_dir,
        tokenizer_json=tokenizer,
        workers=workers,
        layout=layout,
        mocker_args=mocker_args,
        frontend_args=frontend_args,
        timeout_s=120.0,
        preexec_fn=die_with_parent,
    )
    cluster = DynamoCluster(
        url=state["url"],
        model=state["model"],
        netns_holder=state["netns_holder"],
        worker_metrics=tuple(w["metrics_url"] for w in state["workers"]),
        roles=tuple(w["role"] for w in state["workers"]),
        pids=tuple(state["pids"]),
        work_dir=work_dir,
        startup_s=state["startup_s"],
    )
    atexit.register(cluster.stop)
    return cluster


def skip_dynamo(reason: str) -> NoReturn:
    """Skip, and say so on stderr: a skipped Dynamo suite is not coverage."""
    print(f"\nSKIPPING the Dynamo integration tests: {reason}", file=sys.stderr)
    pytest.skip(reason)
