"""`loadgen --metrics-port`: live Prometheus metrics from a real CLI process during a sweep."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SIM_ARGS = "--step-fixed-ms 3 --spin-us 0 --model metrics-test"


def _ok_requests(text: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == "loadgen_requests":
            return sum(
                s.value
                for s in family.samples
                if s.name == "loadgen_requests_total"
                and s.labels["outcome"] == "ok"
                and s.labels["model_name"] == "metrics-test"
            )
    return 0.0


def test_live_metrics_served_during_the_sweep(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--sim",
            "--conc",
            "2",
            "--isl",
            "48",
            "--osl",
            "400",
            "--prompts-per-conc",
            "4",
            "--warmup-per-conc",
            "0",
            "--results",
            str(tmp_path),
            "--no-progress",
            "--metrics-port",
            "0",
            "--sim-args",
            SIM_ARGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"live metrics at (http://127\.0\.0\.1:\d+/metrics)", line)
        assert match, line
        seen = 0.0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and seen < 1 and process.poll() is None:
            with urllib.request.urlopen(match.group(1), timeout=5) as response:
                seen = _ok_requests(response.read().decode())
            time.sleep(0.05)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert seen >= 1, "no finished request was visible on /metrics while the sweep ran"
    assert process.returncode == 0, stderr


def test_taken_metrics_port_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadgen",
                "--sim",
                "--conc",
                "1",
                "--isl",
                "48",
                "--osl",
                "8",
                "--results",
                str(tmp_path),
                "--no-progress",
                "--metrics-port",
                str(port),
                "--sim-args",
                SIM_ARGS,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--metrics-port {port}" in lines[0], done.stderr
    assert not (tmp_path / "run.json").exists()  # nothing started


def test_a_shard_with_workers_serves_one_labelled_set_of_series(tmp_path: Path) -> None:
    """--shard 1/2 --workers 2: one /metrics for both workers' requests, every series
    labelled shard="1" (the dashboard sums shards with `sum by (le)`)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--sim",
            "--conc",
            "4",
            "--isl",
            "48",
            "--osl",
            "300",
            "--prompts-per-conc",
            "3",
            "--warmup-per-conc",
            "0",
            "--results",
            str(tmp_path),
            "--no-progress",
            "--metrics-port",
            "0",
            "--shard",
            "1/2",
            "--workers",
            "2",
            "--sim-args",
            SIM_ARGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"live metrics at (http://127\.0\.0\.1:\d+/metrics)", line)
        assert match, line
        text, seen = "", 0.0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and seen < 3 and process.poll() is None:
            with urllib.request.urlopen(match.group(1), timeout=5) as response:
                text = response.read().decode()
            seen = _ok_requests(text)
            time.sleep(0.05)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert seen >= 3, "the requests of both workers never showed on /metrics"
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert samples and all(s.labels.get("shard") == "1" for s in samples)
    assert process.returncode == 0, stderr
