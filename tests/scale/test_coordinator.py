"""--coordinator: shards as real `loadgen` processes meeting over real sockets (loopback),
against one real simulator (`loadgen sim`): the merged result set shard 0 writes, the
stops that fan out, and the refusals before any request.

The simulator draws each request's tokens from the request's own seed
(tests/scale/test_workers.py), so the coordinated shards must reproduce one process's
requests and chunk token counts exactly, and shard 0's merge must equal `loadgen merge`
of the same shards' directories.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.results.jsonl import read_jsonl
from loadgen.run.embedded_sim import embedded_simulator
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.scale.coordinator import STOP_BOUND_S
from tests.support.coordinator import (
    MERGE_IDENTITY,
    SAME_AS_ONE,
    SHARDS,
    SIM,
    TOKEN,
    Shards,
    error_lines,
    finish,
    free_port,
    merge_cli,
    point,
    shard_argv,
    stopped_at_ns,
    wait_measuring,
)
from tests.support.session_figures import SAME, generated_trace


@pytest.fixture
async def sim_url(tmp_path: Path) -> AsyncIterator[str]:
    async with embedded_simulator(SIM, log_path=tmp_path / "sim.log") as url:
        yield url


@pytest.fixture
def shards() -> Iterator[Shards]:
    started = Shards()
    try:
        yield started
    finally:
        started.stop_all()


async def test_four_coordinated_shards_equal_their_merge_and_one_process(
    tmp_path: Path, sim_url: str, shards: Shards, tokenizer: Tokenizer
) -> None:
    port = free_port()
    dirs = [tmp_path / f"shard{i}" for i in range(SHARDS)]
    load = ("--conc", "1,4", "--osl", "40", "--prompts-per-conc", "3", "--warmup-per-conc", "1")
    procs = [
        shards.start(shard_argv(sim_url, d, i, SHARDS, port, *load, "--coordinator-token", TOKEN))
        for i, d in enumerate(dirs)
    ]
    for proc in procs:
        code, err = finish(proc)
        assert code == 0, err
    merged = dirs[0] / "merged"
    assert (merged / "run.json").is_file()
    by_cli = tmp_path / "by_cli"
    cli = merge_cli(dirs, by_cli)
    assert cli.returncode == 0, cli.stderr
    one = tmp_path / "one"
    spec = RunSpec.flat(
        conc=(1, 4),
        isl=64,
        osl=40,
        prompts_per_conc=3,
        warmup_per_conc=1,
        base_url=sim_url,
        results_dir=one,
        progress=False,
    )
    await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    for conc in (1, 4):
        result, records = point(merged, conc)
        cli_result, cli_records = point(by_cli, conc)
        whole, whole_records = point(one, conc)
        # shard 0's merge is `loadgen merge` of the same shards: every figure, every record
        assert records == cli_records
        differ = {k for k in result if result[k] != cli_result[k]} - set(MERGE_IDENTITY)
        assert not differ, {k: (result[k], cli_result[k]) for k in differ}
        # and the same requests as one process with the same seed
        assert records == whole_records
        for key in SAME_AS_ONE:
            assert result[key] == whole[key], (conc, key)
        assert result["shards_merged"] == SHARDS and result["complete"] is True
    run = orjson.loads((merged / "run.json").read_bytes())
    assert [m["shard"] for m in run["merged_from"]] == list(range(SHARDS))
    own = orjson.loads((dirs[1] / "run.json").read_bytes())
    assert own["settings"]["shard_source"] == "flag"
    assert "coordinator_token" not in own["settings"]  # the secret is never written down
    assert TOKEN.encode() not in b"".join(p.read_bytes() for p in dirs[0].rglob("*.json"))


def long_point(url: str, results: Path, index: int, port: int) -> list[str]:
    """A point long enough to stop in its middle (~10 s of requests per shard)."""
    return shard_argv(
        url,
        results,
        index,
        SHARDS,
        port,
        "--conc",
        "8",
        "--osl",
        "200",
        "--prompts-per-conc",
        "40",
        "--warmup-per-conc",
        "0",
        "--coordinator-token",
        TOKEN,
    )


def test_a_killed_shard_stops_the_point_on_every_shard(
    tmp_path: Path, sim_url: str, shards: Shards
) -> None:
    port = free_port()
    dirs = [tmp_path / f"shard{i}" for i in range(SHARDS)]
    procs = [shards.start(long_point(sim_url, d, i, port)) for i, d in enumerate(dirs)]
    wait_measuring(dirs[2], 8)
    time.sleep(0.5)  # a few records measured everywhere
    killed_ns = time.monotonic_ns()
    procs[2].kill()
    outcomes = {i: finish(p) for i, p in enumerate(procs) if i != 2}
    spread = {i: (stopped_at_ns(dirs[i], 8) - killed_ns) / 1e9 for i in outcomes}
    print(f"stop fan-out after the kill: {spread}")
    for i, (code, err) in outcomes.items():
        assert code == 1, err
        lines = error_lines(err)
        assert len(lines) == 1 and "shard 2 stopped the run" in lines[0], err
        assert 0 < spread[i] < STOP_BOUND_S, spread
        result, _ = point(dirs[i], 8)
        assert result["complete"] is False and result["stop_reason"] == "shard_stopped"
        assert "shard 2" in result["stop_detail"]
        assert any(r.ok for r in read_jsonl(dirs[i] / "requests_conc_8.jsonl"))
    assert "shard(s) [2] never handed in their results" in outcomes[0][1]


def test_an_interrupted_shard_stops_the_point_and_its_records_are_merged(
    tmp_path: Path, sim_url: str, shards: Shards
) -> None:
    port = free_port()
    dirs = [tmp_path / f"shard{i}" for i in range(SHARDS)]
    procs = [shards.start(long_point(sim_url, d, i, port)) for i, d in enumerate(dirs)]
    wait_measuring(dirs[1], 8)
    time.sleep(0.5)
    procs[1].send_signal(signal.SIGTERM)
    outcomes = [finish(p) for p in procs]
    assert outcomes[1][0] == 130, outcomes[1][1]
    assert all(code == 1 for code, _ in outcomes[:1] + outcomes[2:]), outcomes
    merged, merged_records = point(dirs[0] / "merged", 8)
    own = [point(d, 8)[1] for d in dirs]
    # every record any shard measured is in the merged set, nothing else
    assert merged_records == {k: v for records in own for k, v in records.items()}
    assert merged["complete"] is False
    assert "shard 1" in merged["stop_detail"]


def test_a_killed_coordinator_stops_every_shard_with_one_line(
    tmp_path: Path, sim_url: str, shards: Shards
) -> None:
    port = free_port()
    dirs = [tmp_path / f"shard{i}" for i in range(SHARDS)]
    procs = [shards.start(long_point(sim_url, d, i, port)) for i, d in enumerate(dirs)]
    wait_measuring(dirs[0], 8)
    time.sleep(0.5)
    procs[0].kill()
    for i in range(1, SHARDS):
        code, err = finish(procs[i])
        lines = error_lines(err)
        assert code == 1 and len(lines) == 1, err
        assert "the coordinator (shard 0 at 127.0.0.1:" in lines[0] and "is gone" in lines[0]
        result, _ = point(dirs[i], 8)
        assert result["stop_reason"] == "coordinator_lost"


class CountingListener:
    """Where the refused shards' --base-url points: a plain TCP listener that counts the
    connections made to it. A stand-in for the server, because what is checked is that
    nothing at all reached it (the real simulator does not count refused connects)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.accepted = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[CountingListener]:
    counting = CountingListener()
    try:
        yield counting
    finally:
        counting.close()


OTHER_VERSION = (
    "import sys, loadgen; loadgen.__version__ = '0.0.0-other'; "
    "from loadgen.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.parametrize("case", ["token", "version", "settings"])
def test_a_wrong_token_version_or_settings_is_refused_before_any_request(
    tmp_path: Path, shards: Shards, listener: CountingListener, case: str
) -> None:
    port = free_port()
    load = ("--conc", "2", "--osl", "8", "--prompts-per-conc", "1", "--coordinator-wait", "5")
    good = shard_argv(listener.url, tmp_path / "s0", 0, 2, port, *load)
    bad = shard_argv(listener.url, tmp_path / "s1", 1, 2, port, *load)
    bad_env = {"LOADGEN_COORDINATOR_TOKEN": TOKEN}
    if case == "token":
        bad_env = {"LOADGEN_COORDINATOR_TOKEN": "not-the-secret"}
    elif case == "version":
        bad = [sys.executable, "-c", OTHER_VERSION, *bad[3:]]
    else:
        bad = [*bad, "--osl", "9"]  # the last --osl wins
    first = shards.start(good, {"LOADGEN_COORDINATOR_TOKEN": TOKEN})
    second = shards.start(bad, bad_env)
    code, err = finish(second, 60)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1, err
    expected = {
        "token": "closed the connection without answering",
        "version": "runs loadgen 0.0.0-other",
        "settings": "osl 9 (shard 0: 8)",
    }[case]
    assert expected in lines[0], lines
    code, err = finish(first, 60)
    lines = error_lines(err)
    assert code == 1 and len(lines) == 1, err
    if case == "token":  # an unproven connection is not a shard: shard 0 waits it out
        assert "never joined within 5 s" in lines[0], lines
    else:
        assert "shard 1 stopped the run: refused" in lines[0], lines
    assert listener.accepted == 0  # no shard sent anything to the server
    assert not (tmp_path / "s0" / "run.json").exists()
    assert not (tmp_path / "s1" / "run.json").exists()


SESSION_SIM = tuple(
    [
        "--enable-prompt-tokens-details",
        "--block-size",
        "64",
        "--max-num-batched-tokens",
        "65536",
        "--spec-tokens",
        "0",
        "--step-fixed-ms",
        "1",
        "--spin-us",
        "0",
    ]
)


def session_argv(url: str, results: Path, trace: Path) -> list[str]:
    return [
        "--base-url",
        url,
        "--results",
        str(results),
        "--no-progress",
        "--seed",
        "9",
        "--conc",
        "4",
        "--dataset",
        str(trace),
        "--idle-cap-tree",
        "1",
    ]


async def test_coordinated_shards_replay_sessions_as_one_process(
    tmp_path: Path, shards: Shards, tokenizer: Tokenizer
) -> None:
    from collections import defaultdict

    from loadgen.config.args import spec_from_argv
    from loadgen.scale.sweep import run_sweep

    trace = generated_trace(tmp_path / "gen.jsonl")
    async with embedded_simulator(SESSION_SIM, log_path=tmp_path / "one.log") as url:
        spec = spec_from_argv(session_argv(url, tmp_path / "one", trace))
        assert (await run_sweep(spec, SweepOptions(tokenizer=tokenizer))).exit_code == 0
    one = orjson.loads((tmp_path / "one" / "conc_4.json").read_bytes())
    one_records = read_jsonl(tmp_path / "one" / "requests_conc_4.jsonl")
    port = free_port()
    dirs = [tmp_path / f"shard{i}" for i in range(2)]
    async with embedded_simulator(SESSION_SIM, log_path=tmp_path / "shards.log") as url:
        procs = [
            shards.start(
                [
                    sys.executable,
                    "-m",
                    "loadgen",
                    *session_argv(url, d, trace),
                    "--shard",
                    f"{i}/2",
                    "--coordinator",
                    f"127.0.0.1:{port}",
                    "--coordinator-token",
                    TOKEN,
                ]
            )
            for i, d in enumerate(dirs)
        ]
        for proc in procs:
            code, err = finish(proc)
            assert code == 0, err
    merged = orjson.loads((dirs[0] / "merged" / "conc_4.json").read_bytes())
    records = read_jsonl(dirs[0] / "merged" / "requests_conc_4.jsonl")
    assert one["replay_primers"] > 0 and one["subagent_session_ids"] > 0
    assert {k: merged[k] for k in SAME} == {k: one[k] for k in SAME}
    assert merged["server_prefix_cache_hits"] == merged["theoretical_cached_tokens"] > 0
    # each tree (and its subagents) on one shard, both shards used
    shard_of: dict[str, set[int]] = defaultdict(set)
    for i, d in enumerate(dirs):
        for record in read_jsonl(d / "requests_conc_4.jsonl"):
            assert record.tree_id is not None
            shard_of[record.tree_id.split(":", 1)[1]].add(i)
    assert all(len(found) == 1 for found in shard_of.values())
    assert {i for found in shard_of.values() for i in found} == {0, 1}

    def turns(found: list[Any]) -> dict[tuple[str, int], int]:
        return {
            ((r.session_id or "").split(":", 1)[1], r.turn_index or 0): r.input_len for r in found
        }

    assert turns(records) == turns(one_records)
