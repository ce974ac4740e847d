"""--profile-conc against real vLLM 0.32 (CPU) started with a torch profiler config
(tests/support/vllm_servers.py, configuration `plain`: --profiler-config with
torch_profiler_dir below the pool's directory, VLLM_SERVER_DEV_MODE=1 so /server_info
says where): a sweep conc 1,2 profiling conc 2 leaves one trace set, named for conc 2's
window, in the directory the note names, written after conc 1 finished."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from tests.support.vllm_runs import run_loadgen
from tests.support.vllm_servers import PROFILER_DIR, VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

TRACE = re.compile(r"\.pt\.trace\.json(\.gz)?$")


def test_a_profiler_window_traces_only_the_chosen_point(
    vllm_plain: VllmServer, tmp_path: Path
) -> None:
    traces = vllm_plain.work_dir / PROFILER_DIR
    before = set(traces.iterdir()) if traces.exists() else set()
    results = tmp_path / "results"
    done = run_loadgen(
        vllm_plain,
        results,
        "--conc",
        "1,2",
        "--prompts-per-conc",
        "2",
        "--warmup-per-conc",
        "1",
        "--isl",
        "32",
        "--osl",
        "16",
        "--profile-conc",
        "2",
        "--http-timeout",
        "120",  # vLLM's /server_info collects its environment first: seconds on 2 cores
    )
    assert done.returncode == 0, done.stderr
    run_id = orjson.loads((results / "run.json").read_bytes())["run_id"]
    prefix = f"loadgen-{run_id}-c2"
    profiled = orjson.loads((results / "conc_2.json").read_bytes())
    plain = orjson.loads((results / "conc_1.json").read_bytes())
    assert profiled["profiled"] is True and profiled["profile_error"] is None, profiled
    assert profiled["profile_trace"] == f"{prefix}_* in {traces}"
    assert plain["profiled"] is False
    assert f"the server writes its trace files in {traces}" in done.stderr

    new = sorted(set(traces.iterdir()) - before)
    assert new, f"no trace written in {traces}"
    # One window's files only, each named for conc 2's window: one engine-worker trace
    # (and the frontend's, vLLM's default with the torch profiler)
    assert all(f.name.startswith(prefix + "_") for f in new), new
    workers = [f for f in new if TRACE.search(f.name) and "async_llm" not in f.name]
    assert len(workers) == 1, new
    assert all(f.stat().st_size > 0 for f in new)
    # written once conc 1 was over: after its point file
    finished = (results / "conc_1.json").stat().st_mtime_ns
    assert min(f.stat().st_mtime_ns for f in new) > finished
