"""Engine steps reconstructed from loadgen's kernel receive stamps, checked against the
simulator's own step log, over real sockets: `loadgen sim --step-log` in its own process
(one engine, then four behind one frontend), `loadgen` in another, the figures read
from the point file it wrote. Then a sweep-file pair that differs only in the
simulator's prefill chunk budget: compare shows what the flag did to the steps.

Bounds (the accuracy bench, bench/steps_accuracy.py, gives the figures on a quieter
machine): on this shared 2-core machine the simulator can lose the CPU in the middle of
one step's writes, which splits that step in two clusters; so step time p50 within 10%
of the log's (as sent), steps observed within 15%, prefill steps found with recall and
precision >= 0.75, and four engines counted exactly or not at all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import yaml

from loadgen.metrics.arrays import PointArrays, is_completed
from loadgen.metrics.steps import cluster
from loadgen.results.jsonl import read_jsonl
from loadgen.sim.steplog import read_step_log
from tests.support.chromium_cdp import find_chromium, open_page
from tests.support.procs import free_port, run_loadgen

pytestmark = pytest.mark.timeout(600)

STEP_MODEL = ["--step-fixed-ms", "12", "--spin-us", "1000", "--no-enable-prefix-caching"]
WORKLOAD = ("--isl", "64", "--osl", "64", "--encoder", "raw", "--no-progress")
MATCH_NS = 2_000_000


def pinned(which: int) -> Callable[[], None]:
    """A child's CPU: the simulator and the client each on a CPU of their own (the first
    and the last this test may use), as bench/steps_accuracy.py runs them: sharing one,
    the client's reads land inside the simulator's writes of a step and spread them as
    far as the four engines' steps lie apart (the figures are then null)."""
    cpus = sorted(os.sched_getaffinity(0))
    return lambda: os.sched_setaffinity(0, {cpus[which]})


def measured(
    tmp: Path,
    dp: int,
    conc: int,
    sim_args: tuple[str, ...] = (),
    workload: tuple[str, ...] = WORKLOAD,
) -> tuple[dict[str, Any], PointArrays, list[Any]]:
    """One point against `loadgen sim --data-parallel-size dp` (and `sim_args`); the
    point file, the completed records' arrays and the simulator's step log (written as
    it stops)."""
    port, log = free_port(), tmp / "steps.jsonl"
    sim_argv = [sys.executable, "-m", "loadgen", "sim", "--port", str(port), *sim_args]
    sim = subprocess.Popen(
        [*sim_argv, "--step-log", str(log), "--data-parallel-size", str(dp), *STEP_MODEL],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pinned(-1),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                break
            except OSError:
                assert sim.poll() is None and time.monotonic() < deadline, "no simulator"
                time.sleep(0.1)
        results = tmp / "results"
        url = f"http://127.0.0.1:{port}"
        point_args = ["--prompts-per-conc", "2", "--warmup-per-conc", "0", "--results"]
        done = run_loadgen(
            ["--base-url", url, "--conc", str(conc), *workload, *point_args, str(results)],
            preexec_fn=pinned(0),
        )
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        sim.send_signal(signal.SIGTERM)  # the step log is written as it stops
        sim.wait(timeout=30)
    point = orjson.loads((results / f"conc_{conc}.json").read_bytes())
    records = sorted(
        (r for r in read_jsonl(results / f"requests_conc_{conc}.jsonl") if is_completed(r)),
        key=lambda r: r.request_id,
    )
    return point, PointArrays.build(records), read_step_log(log)


def logged_steps(log: list[Any], arrays: PointArrays) -> dict[str, Any]:
    """The logged steps that sent chunks in the point, their time as the client can see
    it (from the engine's previous step's first write, or from its own start after
    idle, to its own first write), and whether each finished a prefill."""
    previous: dict[int, int] = {}
    rows = []
    for step in sorted(log, key=lambda s: (s["engine"], s["step"])):
        began = max(previous.get(step["engine"], step["start_ns"]), step["start_ns"])
        previous[step["engine"]] = step["sent_ns"]
        rows.append((step, step["sent_ns"] - began))
    lo, hi = int(arrays.chunk_ns.min()) - MATCH_NS, int(arrays.chunk_ns.max())
    kept = [(s, d) for s, d in rows if s["chunks"] and lo <= s["sent_ns"] <= hi]
    return {
        "sent": np.array([s["sent_ns"] for s, _ in kept], dtype=np.int64),
        "ms": np.array([d / 1e6 for _, d in kept]),
        "prefill": np.array([bool(s["prefill_done"]) for s, _ in kept]),
        "engines": {s["engine"] for s, _ in kept},
    }


def figures(what: str, point: dict[str, Any], truth: dict[str, Any]) -> str:
    """The measured step figures beside the log's, for the test's output."""
    true_p50 = float(np.percentile(truth["ms"], 50)) if truth["ms"].size else float("nan")
    return (
        f"steps, {what}: p50 {point['steps_time_p50_ms']} ms measured, {true_p50:.2f} ms "
        f"logged; {point['steps_observed']} observed, {truth['sent'].size} logged; "
        f"engines {point['steps_engines']}; note {point['steps_note']}"
    )


def prefill_recall_precision(arrays: PointArrays, truth: dict[str, Any]) -> tuple[float, float]:
    """Recall: the logged prefill steps with a cluster holding a first chunk that starts
    within MATCH_NS after the step's write; precision: such clusters that start within
    MATCH_NS after a logged prefill step. Not the nearest cluster alone: the simulator
    writes a new stream's head before its first chunk, and that chunk can arrive ~50 µs
    after the step's other chunks, a cluster of its own in the same step (1 run in 3
    here, at 91af1bb too: recall 2 of 6 by the nearest cluster, 6 of 6 by the step)."""
    clusters, _ = cluster(arrays, group_engines=True)
    estimated = np.zeros(clusters.start_ns.size, dtype=np.bool_)
    estimated[clusters.cluster[arrays.first]] = True
    starts = clusters.start_ns[estimated]
    sent = truth["sent"][truth["prefill"]]
    after = starts[None, :] - sent[:, None]  # logged prefill step x estimated cluster
    near = (after >= 0) & (after <= MATCH_NS)
    return float(near.any(axis=1).mean()), float(near.any(axis=0).mean())


# the simulator losing the CPU mid-step splits the step (CI, the other worker busy: 79
# steps observed for 65 logged): the bounds hold for this machine with nothing beside it
@pytest.mark.exclusive
def test_one_engine_matches_the_simulators_step_log(tmp_path: Path) -> None:
    """Subject: the steps' figures measured from chunk timing against the simulator's
    own step log (p50 within 10 %, count within 15 %); both printed, run alone."""
    point, arrays, log = measured(tmp_path, 1, 8)
    truth = logged_steps(log, arrays)
    print(figures("1 engine", point, truth))
    assert point["steps_stamps"] == "kernel" and point["steps_note"] is None, point
    assert point["steps_engines"] == 1 and point["steps_stream_interval"] == 1
    true_p50 = float(np.percentile(truth["ms"], 50))
    assert point["steps_time_p50_ms"] == pytest.approx(true_p50, rel=0.1), true_p50
    assert point["steps_observed"] == pytest.approx(truth["sent"].size, rel=0.15)
    recall, precision = prefill_recall_precision(arrays, truth)
    print(f"prefill completions: recall {recall:.2f}, precision {precision:.2f}")
    assert recall >= 0.75 and precision >= 0.75, (recall, precision)
    # every request's first chunk is one prefill completion in the log
    assert sum(len(s["prefill_done"]) for s in log) >= arrays.num_records


@pytest.mark.exclusive
def test_four_engines_are_counted_or_not_at_all(tmp_path: Path) -> None:
    """Four engines in one simulator process share its CPU: when it falls behind, they
    catch up together and their steps co-arrive. Then the engines cannot be counted and
    the figures must be null with the reason; otherwise the count is 4, never another."""
    point, arrays, log = measured(tmp_path, 4, 16)
    truth = logged_steps(log, arrays)
    print(figures("4 engines", point, truth))
    assert truth["engines"] == {0, 1, 2, 3}  # the balancer used every engine
    if point["steps_engines"] is None:
        assert "cannot be told apart" in point["steps_note"], point["steps_note"]
        assert point["steps_time_p50_ms"] is None
        return
    assert point["steps_engines"] == 4, point["steps_note"]
    assert point["steps_observed"] == pytest.approx(truth["sent"].size, rel=0.15)
    true_p50 = float(np.percentile(truth["ms"], 50))
    assert point["steps_time_p50_ms"] == pytest.approx(true_p50, rel=0.15), true_p50


@pytest.mark.exclusive
def test_a_stream_interval_behind_unlabelled_engines_is_not_one_engines(tmp_path: Path) -> None:
    """Two engines at --stream-interval 3 with MTP, in SGLang's dialect, whose /metrics
    label no engine: each engine's streams send in phase groups. Where the two engines'
    steps interleave, their clusters were published as one engine's: 6.7 ms steps for
    15.8, k 7 for 3 (bench/steps_accuracy.py --dp 2 --interval 3 --engines unlabelled),
    or, at 4 clusters a gap, 10.5-11.8 ms; that is null with the reason. Where they
    co-arrive (1 run in 3 here) the clusters are both engines' steps at once, the step
    times the log's, and requests per step counted every stream in flight as one
    engine's: 26.4 for 13.6. Those are null in every run."""
    sim_args = ("--engine", "sglang", "--stream-interval", "3", "--spec-tokens", "2")
    workload = ("--isl", "256", "--osl", "128", "--encoder", "raw", "--no-progress")
    point, arrays, log = measured(tmp_path, 2, 32, sim_args, workload)
    truth = logged_steps(log, arrays)
    print(figures("2 unlabelled engines, interval 3", point, truth))
    assert truth["engines"] == {0, 1}  # the balancer used both engines
    note = str(point["steps_note"])
    if point["steps_time_p50_ms"] is None:
        assert "a stream interval > 1 behind a server that does not label" in note, note
        assert point["steps_stream_interval"] is None and point["steps_observed"] is None
    else:
        true_p50 = float(np.percentile(truth["ms"], 50))
        assert point["steps_time_p50_ms"] == pytest.approx(true_p50, rel=0.15), true_p50
        assert point["steps_stream_interval"] == 3, note
        assert "requests per step not measured" in note, note
    assert point["steps_requests_per_step"] is None, note


@pytest.fixture(scope="module")
def budget_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two lanes, the simulator's --max-num-batched-tokens 8192 and 256, 2048-token
    prompts: with 256 a prompt is prefilled over 8 steps, so the step that finishes it is
    short and the long ITL gaps are no longer prefill completions. The tree, and the
    sweep's console output."""
    base = tmp_path_factory.mktemp("budget")
    tree = base / "tree"
    sweep = {
        "results": str(tree),
        "conc": 8,
        "workload": {"isl": 2048, "osl": 64, "prompts-per-conc": 3, "warmup-per-conc": 0},
        "encoder": "raw",
        "no-progress": True,
        "lanes": [
            {
                "name": f"chunk-{budget}",
                "target": {
                    "sim": True,
                    "sim-args": f"--max-num-batched-tokens {budget} --step-fixed-ms 12 "
                    "--prefill-token-us 20 --no-enable-prefix-caching",
                },
            }
            for budget in (8192, 256)
        ],
    }
    path = base / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    done = run_loadgen(["--config", str(path)], timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    return tree, done.stdout


def lanes(tree: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    whole, chunked = (
        orjson.loads((tree / lane / "conc_8.json").read_bytes())
        for lane in ("chunk-8192", "chunk-256")
    )
    return whole, chunked


def test_a_prefill_chunk_budget_shows_in_compare(budget_pair: tuple[Path, str]) -> None:
    tree, stdout = budget_pair
    whole, chunked = lanes(tree)
    # a whole 2048-token prefill costs ~41 ms more than a decode step; a 256 chunk ~5 ms
    assert whole["steps_prefill_time_p50_ms"] > 2 * chunked["steps_prefill_time_p50_ms"]
    assert whole["steps_stall_share"] > chunked["steps_stall_share"] + 0.2
    shown = run_loadgen(["compare", str(tree)])
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("steps chunk-8192"))
    expected = (
        f"prefill steps {whole['steps_prefill_time_p50_ms']:.1f} -> "
        f"{chunked['steps_prefill_time_p50_ms']:.1f} ms, stall share "
        f"{whole['steps_stall_share']:.0%} -> {chunked['steps_stall_share']:.0%}"
    )
    assert expected in line, line
    assert "conc 8 steps:" in stdout  # the console line of each point


STEPS_JS = """(() => {
  const section = document.getElementById('s-steps');
  return {
    sections: [...document.querySelectorAll('h2')].map(h => h.textContent),
    images: [...section.querySelectorAll('img')].map(i => (
        {alt: i.alt, complete: i.complete, width: i.naturalWidth,
         shownWidth: i.getBoundingClientRect().width})),
    rows: [...section.querySelectorAll('tr[data-run]')].map(r => ({
        run: r.dataset.run,
        prefill: r.querySelector('[data-field=steps_prefill_time_p50_ms]').dataset.value,
        stall: r.querySelector('[data-field=steps_stall_share]').dataset.value})),
  };
})()"""


async def test_the_report_shows_the_steps_in_chromium(
    budget_pair: tuple[Path, str], tmp_path: Path
) -> None:
    binary = find_chromium()
    assert binary is not None, "scripts/ensure-chromium installs Debian's chromium"
    tree, _ = budget_pair
    report = tmp_path / "report.html"
    lanes_dirs = [str(tree / "chunk-8192"), str(tree / "chunk-256")]
    done = run_loadgen(["report", *lanes_dirs, "-o", str(report)])
    assert done.returncode == 0, done.stderr
    page = await open_page(binary, report.resolve().as_uri(), tmp_path / "r.png", STEPS_JS)
    assert page.errors == [], page.errors
    shown = page.evaluated
    assert "Engine steps (from the arrivals)" in shown["sections"]
    [figure] = shown["images"]
    assert figure["alt"] == "engine step time and the ITL tail on prefill steps"
    assert figure["complete"] and figure["width"] > 0 and figure["shownWidth"] > 0
    whole, chunked = lanes(tree)
    assert shown["rows"] == [
        {
            "run": lane,
            "prefill": repr(point["steps_prefill_time_p50_ms"]),
            "stall": repr(point["steps_stall_share"]),
        }
        for lane, point in (("chunk-8192", whole), ("chunk-256", chunked))
    ]
