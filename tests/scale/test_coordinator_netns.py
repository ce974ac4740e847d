"""--coordinator across separate network stacks: each shard, the simulator (`loadgen sim`)
and the link relay in a network namespace of its own, on a bridge in yet another, the
coordinator and the server reached by address (never loopback), links of 2 ms and
20 ms one way with jitter, each shard's wall clock offset on purpose (the coordinator's
barrier reads no wall clock; the merge of one machine's shards reads CLOCK_MONOTONIC).

Needs root (CI runs as root); skips with one line where namespaces cannot be created.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.coordinator import (
    MERGE_IDENTITY,
    SAME_AS_ONE,
    SIM,
    TOKEN,
    Shards,
    error_lines,
    finish,
    merge_cli,
    point,
    stopped_at_ns,
    wait_measuring,
)
from tests.support.netns import Network, cannot_create, netem_available

SHARDS = 4
SIM_PORT = 8000
COORD_PORT = 29517
WALL_OFFSETS_S = (0.0, 3.7, -2.2, 41.0)  # each shard's wall clock, off by this much
# loadgen with its wall clock moved: time.time and time.time_ns read `offset` seconds off
LAUNCH = (
    "import os, sys, time; off = int(float(os.environ['LG_WALL_OFFSET_S']) * 1e9); "
    "ns = time.time_ns; time.time_ns = lambda: ns() + off; "
    "wall = time.time; time.time = lambda: wall() + off / 1e9; "
    "from loadgen.cli import main; sys.exit(main(sys.argv[1:]))"
)

_why = cannot_create()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")


def wait_listening(net: Network, where: str, address: str, port: int) -> None:
    probe = f"import socket; socket.create_connection(({address!r}, {port}), 1).close()"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = subprocess.run(net.argv(where, [sys.executable, "-c", probe]), capture_output=True)
        if done.returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens at {address}:{port} (seen from {where})")


class Lab:
    """The machines, the simulator and (without netem) the relay, for one link delay."""

    def __init__(self, net: Network, shards: Shards, delay_ms: float) -> None:
        self.net, self.shards, self.delay_ms = net, shards, delay_ms
        jitter_ms = delay_ms / 4
        sim, s0 = net.nodes["sim"], net.nodes["s0"]
        if netem_available():
            for name in net.nodes:
                net.delay(name, delay_ms, jitter_ms)
            self.server, self.coordinator = sim, s0
        else:  # this kernel: the relay carries the delay
            relay = net.nodes["relay"]
            shards.start(
                net.relay_argv(
                    delay_ms,
                    jitter_ms,
                    [
                        f"{relay}:{SIM_PORT}={sim}:{SIM_PORT}",
                        f"{relay}:{COORD_PORT}={s0}:{COORD_PORT}",
                    ],
                )
            )
            self.server, self.coordinator = relay, relay
            wait_listening(net, "s1", relay, SIM_PORT)

    @property
    def url(self) -> str:
        return f"http://{self.server}:{SIM_PORT}"

    def shard(
        self, index: int, results: Path, *extra: str, count: int = SHARDS
    ) -> subprocess.Popen[str]:
        # shard 0 listens at its own address; the others reach it over the link
        coordinator = self.net.nodes["s0"] if index == 0 else self.coordinator
        argv = [
            sys.executable,
            "-c",
            LAUNCH,
            "--base-url",
            self.url,
            "--isl",
            "64",
            "--no-progress",
            "--results",
            str(results),
            "--shard",
            f"{index}/{count}",
            "--coordinator",
            f"{coordinator}:{COORD_PORT}",
            "--coordinator-token",
            TOKEN,
            *extra,
        ]
        return self.shards.start(
            self.net.argv(f"s{index}", argv), {"LG_WALL_OFFSET_S": str(WALL_OFFSETS_S[index])}
        )


@pytest.fixture(scope="module")
def net() -> Iterator[Network]:
    network = Network()
    sim_proc: subprocess.Popen[bytes] | None = None
    try:
        network.create()
        network.add("relay", 2)
        network.add("sim", 10)
        for i in range(SHARDS):
            network.add(f"s{i}", 20 + i)
        sim_proc = subprocess.Popen(
            network.argv(
                "sim",
                [
                    sys.executable,
                    "-m",
                    "loadgen",
                    "sim",
                    "--host",
                    "0.0.0.0",
                    "--port",
                    str(SIM_PORT),
                    *SIM,
                ],
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(network, "sim", network.nodes["sim"], SIM_PORT)
        yield network
    finally:
        if sim_proc is not None:
            sim_proc.kill()
            sim_proc.wait(timeout=30)
        network.destroy()


@pytest.fixture
def shards() -> Iterator[Shards]:
    started = Shards()
    try:
        yield started
    finally:
        started.stop_all()


# 6 requests a slot: a shard's measured phase outlasts the start skew a busy machine adds
# behind 20 ms links (3 did not, once: the merge refused a point whose shards missed)
SMALL = ("--conc", "1,4", "--osl", "40", "--prompts-per-conc", "6", "--warmup-per-conc", "1")


@pytest.mark.parametrize("delay_ms", [2.0, 20.0])
def test_four_shards_in_four_namespaces_equal_their_merge_and_one_process(
    tmp_path: Path, net: Network, shards: Shards, delay_ms: float
) -> None:
    lab = Lab(net, shards, delay_ms)
    dirs = [tmp_path / f"shard{i}" for i in range(SHARDS)]
    procs = [lab.shard(i, d, *SMALL) for i, d in enumerate(dirs)]
    for proc in procs:
        code, err = finish(proc, 240)
        assert code == 0, err
    merged = dirs[0] / "merged"
    cli = merge_cli(dirs, tmp_path / "by_cli")
    assert cli.returncode == 0, cli.stderr
    one = tmp_path / "one"
    whole_run = shards.start(
        net.argv(
            "s1",
            [
                sys.executable,
                "-m",
                "loadgen",
                "--base-url",
                lab.url,
                "--isl",
                "64",
                "--no-progress",
                "--results",
                str(one),
                *SMALL,
            ],
        )
    )
    code, err = finish(whole_run, 240)
    assert code == 0, err
    for conc in (1, 4):
        result, records = point(merged, conc)
        cli_result, cli_records = point(tmp_path / "by_cli", conc)
        whole, whole_records = point(one, conc)
        assert records == cli_records == whole_records
        differ = {k for k in result if result[k] != cli_result[k]} - set(MERGE_IDENTITY)
        assert not differ, {k: (result[k], cli_result[k]) for k in differ}
        for key in SAME_AS_ONE:
            assert result[key] == whole[key], (conc, key)
        assert result["complete"] is True and result["shards_merged"] == SHARDS
    # the links were as slow as asked: every shard's TTFT carries the round trip
    for i in range(1, SHARDS):
        own, _ = point(dirs[i], 4)
        assert own["p50_ttft_ms"] >= 2 * delay_ms * 0.75, (i, own["p50_ttft_ms"])


LONG = ("--conc", "8", "--osl", "200", "--prompts-per-conc", "30", "--warmup-per-conc", "0")


def test_across_namespaces_a_killed_shard_stops_every_shard_within_the_bound(
    tmp_path: Path, net: Network, shards: Shards
) -> None:
    from loadgen.scale.coordinator import STOP_BOUND_S

    lab = Lab(net, shards, 20.0)
    dirs = [tmp_path / f"shard{i}" for i in range(SHARDS)]
    procs = [lab.shard(i, d, *LONG) for i, d in enumerate(dirs)]
    wait_measuring(dirs[3], 8, timeout=120)
    time.sleep(0.5)
    killed_ns = time.monotonic_ns()
    procs[3].kill()
    spread = {}
    for i in range(3):
        code, err = finish(procs[i], 120)
        lines = error_lines(err)
        assert code == 1 and len(lines) == 1 and "shard 3 stopped the run" in lines[0], err
        spread[i] = (stopped_at_ns(dirs[i], 8) - killed_ns) / 1e9
        result, records = point(dirs[i], 8)
        assert result["stop_reason"] == "shard_stopped" and records
    print(f"stop fan-out across 20 ms links: {spread}")
    assert all(0 < s < STOP_BOUND_S for s in spread.values()), spread


def test_across_namespaces_a_killed_coordinator_is_one_line_on_every_shard(
    tmp_path: Path, net: Network, shards: Shards
) -> None:
    lab = Lab(net, shards, 20.0)
    dirs = [tmp_path / f"shard{i}" for i in range(SHARDS)]
    procs = [lab.shard(i, d, *LONG) for i, d in enumerate(dirs)]
    wait_measuring(dirs[0], 8, timeout=120)
    time.sleep(0.5)
    procs[0].kill()
    for i in range(1, SHARDS):
        code, err = finish(procs[i], 120)
        lines = error_lines(err)
        assert code == 1 and len(lines) == 1 and "is gone" in lines[0], err
        assert point(dirs[i], 8)[0]["stop_reason"] == "coordinator_lost"


def test_across_namespaces_a_shard_that_never_arrives_stops_the_others_before_any_request(
    tmp_path: Path, net: Network, shards: Shards
) -> None:
    lab = Lab(net, shards, 20.0)
    procs = [
        lab.shard(i, tmp_path / f"shard{i}", *SMALL, "--coordinator-wait", "6")
        for i in range(SHARDS - 1)
    ]
    for i, proc in enumerate(procs):
        code, err = finish(proc, 120)
        lines = error_lines(err)
        assert code == 1 and len(lines) == 1, err
        assert "shard(s) [3] never joined within 6 s" in lines[0], lines
        assert not (tmp_path / f"shard{i}" / "run.json").exists()


def test_across_namespaces_a_shard_with_other_settings_is_refused(
    tmp_path: Path, net: Network, shards: Shards
) -> None:
    lab = Lab(net, shards, 20.0)
    procs = [
        lab.shard(i, tmp_path / f"shard{i}", *SMALL, *(("--osl", "41") if i == 2 else ()))
        for i in range(SHARDS)
    ]
    outcomes = [finish(p, 120) for p in procs]
    code, err = outcomes[2]
    assert code == 2 and "osl 41 (shard 0: 40)" in error_lines(err)[0], err
    for i in (0, 1, 3):
        code, err = outcomes[i]
        assert code == 1 and "shard 2 stopped the run: refused" in error_lines(err)[0], err
    for i in range(SHARDS):
        assert not (tmp_path / f"shard{i}" / "run.json").exists()
    settings = [p for p in tmp_path.rglob("run.json")]
    assert settings == [], [orjson.loads(p.read_bytes()) for p in settings]
