"""--reset-prefix-cache against the real simulator over real sockets: the same prompts
sent twice hit the prefix cache the second time unless the cache is reset before the
point; each point records its cache_state; a server without the endpoint stops the run
before the first point; a reset refused while requests run is retried (docs/results.md,
`cache_state`; docs/failure-behaviour.md)."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from loadgen.results.jsonl import read_jsonl
from loadgen.sim import SimConfig, running_simulator
from tests.support.procs import free_port, one_error_line, point, run_loadgen, start_sim, stop
from tests.support.recording_proxy import recording_proxy
from tests.support.sim_helpers import metric, parse_metrics

HITS = "vllm:prefix_cache_hits_total"
# 8 requests of 48 prompt tokens (3 blocks of 16: 2 of them can hit), no warmup
POINT = [
    "--conc",
    "2",
    "--prompts-per-conc",
    "4",
    "--warmup-per-conc",
    "0",
    "--isl",
    "48",
    "--osl",
    "8",
    "--encoder",
    "raw",
    "--no-progress",
]
RESET = b"POST /reset_prefix_cache"


def _server_hits(base_url: str) -> float:
    import urllib.request

    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        return metric(parse_metrics(response.read().decode()), HITS)


def _cached(results: Path, conc: int = 2) -> list[int | None]:
    return [r.cached_tokens for r in read_jsonl(results / f"requests_conc_{conc}.jsonl")]


def test_same_prompts_twice_hit_the_cache_unless_it_is_reset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")  # `loadgen sim` reads it, as vLLM does
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    sim = start_sim(port, tmp_path / "sim.log", "--enable-prompt-tokens-details")
    try:
        runs: dict[str, tuple[float, list[int | None], dict[str, Any]]] = {}
        for name, extra in (("first", []), ("again", []), ("reset", ["--reset-prefix-cache"])):
            before = _server_hits(base)  # same seed every time: the same prompts
            done = run_loadgen(
                ["--base-url", base, *POINT, *extra, "--results", str(tmp_path / name)]
            )
            assert done.returncode == 0, done.stderr
            runs[name] = (
                _server_hits(base) - before,
                _cached(tmp_path / name),
                point(tmp_path / name, 2),
            )
    finally:
        stop(sim)
    first, again, reset = runs["first"], runs["again"], runs["reset"]
    assert first[2]["cache_state"] == again[2]["cache_state"] == "uncontrolled"
    assert first[2]["cache_reset_detail"] is None
    assert all(c == 0 for c in first[1]), first  # a fresh server
    # The second time the same prompts hit every full block they can (2 of 3 blocks).
    assert all(c == 32 for c in again[1]), again
    # With the flag: the server forgot them before the point, nothing hits.
    assert reset[2]["cache_state"] == "reset" and reset[2]["cache_reset_detail"] is None
    assert all(c == 0 for c in reset[1]), reset
    # The server's own counter agrees: both runs' preflight probe (before the reset)
    # hits alike; the measured requests' 8 x 32 tokens only without the reset.
    assert again[0] - reset[0] == 32 * 8, (again[0], reset[0])


def test_without_dev_mode_the_run_stops_before_the_first_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log")
    results = tmp_path / "results"
    try:
        done = run_loadgen(
            [
                "--base-url",
                f"http://127.0.0.1:{port}",
                *POINT,
                "--reset-prefix-cache",
                "--results",
                str(results),
            ]
        )
    finally:
        stop(sim)
    assert done.returncode == 1, done.stderr  # ServerError
    line = one_error_line(done.stderr)
    assert "POST /reset_prefix_cache" in line and "VLLM_SERVER_DEV_MODE=1" in line, line
    assert not list(results.glob("conc_*")) and not (results / "run.json").exists()


async def _loadgen(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadgen",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode is not None
    return process.returncode, err.decode()


async def _hold(base_url: str, tokens: int) -> float:
    """One long stream of another client: it holds KV blocks until it ends (the time)."""
    body = {"prompt": "busy " * 40, "max_tokens": tokens, "ignore_eos": True, "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(base_url + "/v1/completions", json=body) as response,
    ):
        assert response.status == 200
        await response.read()
    return time.time()


async def _until_running(base_url: str) -> None:
    """The other client's stream holds its blocks once the server runs it (a handshake
    on the server's own gauge, not a sleep)."""
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(base_url + "/metrics") as response:
                text = await response.text()
            if metric(parse_metrics(text), "vllm:num_requests_running") >= 1:
                return
            await asyncio.sleep(0.01)


SLOW = SimConfig(model="sim-model", spec_tokens=0, step_fixed_ms=3.0, spin_us=0.0, dev_mode=True)


async def test_a_reset_refused_while_requests_run_is_retried(tmp_path: Path) -> None:
    """Another client's request holds blocks: the simulator answers success: false, and
    loadgen asks again until it is free, then measures against an emptied cache."""
    async with (
        running_simulator(SLOW, host="127.0.0.1", port=0) as sim,
        recording_proxy("127.0.0.1", sim.port) as wire,
    ):
        busy = asyncio.create_task(_hold(sim.base_url, 30000))  # minutes of decode steps
        await _until_running(sim.base_url)
        run = asyncio.create_task(
            _loadgen(
                "--base-url",
                f"http://127.0.0.1:{wire.port}",
                *POINT,
                "--reset-prefix-cache",
                "--results",
                str(tmp_path),
            )
        )
        # the endpoint check and the point's first reset were both refused (still busy)
        # and a retry after them, refused as well
        while wire.sent.count(RESET) < 3:
            assert not run.done() and not busy.done()
            await asyncio.sleep(0.05)
        refused = wire.sent.count(RESET)
        assert not (tmp_path / "requests_conc_2.jsonl").exists() or not _cached(tmp_path)
        busy.cancel()  # the other client goes away: its blocks are freed
        freed = time.time()
        code, err = await run
    assert code == 0, err
    result = point(tmp_path, 2)
    assert result["cache_state"] == "reset" and result["complete"], result
    assert wire.sent.count(RESET) > refused >= 2, (refused, wire.sent.count(RESET))
    started = min(r.sent_unix for r in read_jsonl(tmp_path / "requests_conc_2.jsonl"))
    assert started >= freed, (started, freed)  # measured only once the reset went through


async def test_a_reset_still_refused_at_its_deadline_is_recorded(tmp_path: Path) -> None:
    """Past --reset-timeout the point runs anyway, its file saying why it is not reset;
    a 2xx with success: false is never taken for a reset."""
    async with running_simulator(SLOW, host="127.0.0.1", port=0) as sim:
        busy = asyncio.create_task(_hold(sim.base_url, 30000))
        await _until_running(sim.base_url)
        code, err = await _loadgen(
            "--base-url",
            sim.base_url,
            *POINT,
            "--reset-prefix-cache",
            "--reset-timeout",
            "0.5",
            "--results",
            str(tmp_path),
        )
        still_busy = not busy.done()
        busy.cancel()
    assert code == 0, err
    assert still_busy
    result = point(tmp_path, 2)
    assert result["cache_state"] == "reset_failed" and result["complete"], result
    assert "success: false" in result["cache_reset_detail"], result
    assert "still refused after 0.5 s" in result["cache_reset_detail"]
    assert "prefix cache not reset" in err


async def test_reset_after_warmup_comes_between_warmup_and_measured_requests(
    tmp_path: Path,
) -> None:
    """Before the warmup by default; after it with --reset-after-warmup (the wire order)."""
    fast = SimConfig(model="sim-model", spec_tokens=0, step_fixed_ms=1.0, dev_mode=True)
    order: dict[str, list[str]] = {}
    for name, extra in (("before", ()), ("after", ("--reset-after-warmup",))):
        async with (
            running_simulator(fast, host="127.0.0.1", port=0) as sim,
            recording_proxy("127.0.0.1", sim.port) as wire,
        ):
            code, err = await _loadgen(
                "--base-url",
                f"http://127.0.0.1:{wire.port}",
                *POINT[:4],
                "--warmup-per-conc",
                "1",
                *POINT[6:],
                "--reset-prefix-cache",
                *extra,
                "--results",
                str(tmp_path / name),
            )
            assert code == 0, err
            sent = _wire_order(bytes(wire.sent))
            order[name] = sent[sent.index("reset") :]  # after the preflight's probe
        assert point(tmp_path / name, 2)["cache_state"] == "reset"
    # the endpoint check, then the point's own reset; w: warmup, m: measured
    assert order["before"] == ["reset", "reset", *["w"] * 2, *["m"] * 8], order
    assert order["after"] == ["reset", *["w"] * 2, "reset", *["m"] * 8], order


def _wire_order(sent: bytes) -> list[str]:
    """The reset POSTs and the requests with an X-Request-Id in the order they went
    out: `w` a warmup request, `m` any other."""
    seen = []
    for found in re.finditer(rb"POST (/reset_prefix_cache|/v1/completions)", sent):
        if found[1] == b"/reset_prefix_cache":
            seen.append("reset")
            continue
        head = sent[found.start() : sent.index(b"\r\n\r\n", found.start())]
        request_id = re.search(rb"(?i)\r\nx-request-id: *([^\r]+)", head)
        if request_id is not None:
            seen.append("w" if re.search(rb"-c2-w\d+$", request_id[1]) else "m")
    return seen


def test_the_reset_options_need_the_flag() -> None:
    done = run_loadgen(["--sim", *POINT, "--reset-after-warmup"])
    assert done.returncode == 2
    assert "--reset-after-warmup: add --reset-prefix-cache" in one_error_line(done.stderr)
    done = run_loadgen(["--sim", *POINT, "--reset-prefix-cache", "--reset-timeout", "inf"])
    assert done.returncode == 2
    assert "--reset-timeout" in one_error_line(done.stderr)


def test_sweep_file_lanes_differ_in_cache_state_and_compare_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per lane, as every option (`target:` section); compare warns that they differ."""
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"base_url: http://127.0.0.1:{port}\n"
        "conc: [2]\nprompts_per_conc: 4\nwarmup_per_conc: 0\nisl: 48\nosl: 8\n"
        "encoder: raw\n"
        "lanes:\n"
        "  - name: warm\n"
        "  - name: cold\n"
        "    target:\n"
        "      reset_prefix_cache: true\n"
    )
    try:
        done = run_loadgen(
            ["--config", str(sweep), "--results", str(tmp_path / "out"), "--no-progress"]
        )
    finally:
        stop(sim)
    assert done.returncode == 0, done.stderr
    lanes = {p.name: p for p in (tmp_path / "out").iterdir() if p.is_dir()}
    assert point(lanes["warm"], 2)["cache_state"] == "uncontrolled"
    assert point(lanes["cold"], 2)["cache_state"] == "reset"
    shown = run_loadgen(["compare", str(lanes["warm"]), str(lanes["cold"])])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout + shown.stderr
    assert "cache_state uncontrolled, while reset elsewhere" in text, text
    assert "cache_state reset, while uncontrolled elsewhere" in text, text
    assert orjson.loads((lanes["cold"] / "run.json").read_bytes())["settings"]["reset_prefix_cache"]


def test_worker_processes_measure_after_the_parents_reset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--workers 2: the parent resets between the workers' warmup and their measured
    requests (scale/pool.py), so their prompts find nothing from the run before."""
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    sim = start_sim(port, tmp_path / "sim.log", "--enable-prompt-tokens-details")
    common = ["--base-url", base, *POINT, "--workers", "2"]
    try:
        first = run_loadgen([*common, "--results", str(tmp_path / "first")])
        again = run_loadgen([*common, "--results", str(tmp_path / "again")])
        flags = ["--reset-prefix-cache", "--reset-after-warmup"]
        reset = run_loadgen([*common, *flags, "--results", str(tmp_path / "reset")])
    finally:
        stop(sim)
    for done in (first, again, reset):
        assert done.returncode == 0, done.stderr
    assert all(c == 32 for c in _cached(tmp_path / "again"))
    assert all(c == 0 for c in _cached(tmp_path / "reset"))
    assert point(tmp_path / "reset", 2)["cache_state"] == "reset"
    assert point(tmp_path / "again", 2)["cache_state"] == "uncontrolled"


def test_the_embedded_simulator_serves_the_reset_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--sim: loadgen starts its simulator in dev mode for a run that resets it."""
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    sim = ["--sim", "--sim-args", "--spec-tokens 0"]
    done = run_loadgen([*sim, *POINT, "--reset-prefix-cache", "--results", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    assert point(tmp_path, 2)["cache_state"] == "reset"
