"""A sweep file whose two lanes each launch a real vLLM CPU server (--serve-cmd), run end
to end from one `loadgen --config` command: examples/stp-vs-spec-vllm-cpu.yaml, as the
example says to run it. Both servers start, are measured and stop; `loadgen compare`
prints the crossover line the result files imply; run.json holds both commands and
versions; no process of either server's group is left (checked by its pid)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.run.server_processes import server_processes
from tests.support.paths import ROOT
from tests.support.vllm_servers import SPEC_TOKENS, VllmEnv, vllm_cpu

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(2400)]

EXAMPLE = ROOT / "examples" / "stp-vs-spec-vllm-cpu.yaml"
CONCS = (1, 4)


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(path.read_bytes())
    return data


def group_gone(pgid: int) -> bool:
    """No live process of the group is left. A zombie does not count: vLLM's engine
    process, reparented to init when the server exits, stays one until init reaps it,
    holding no GPU, port or memory; loadgen's stop counts it gone too (CI rehearsal: the
    group still answered killpg(0) just after the run, and was empty a moment later)."""
    live = server_processes(pgid, "no-such-mark")  # the group's members, zombies left out
    if live is not None:
        return not live
    try:  # no /proc to read: the group as the kernel sees it
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_two_lanes_each_launch_real_vllm_and_compare_prints_the_crossover(
    vllm_env: VllmEnv, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # caches and TMPDIR of this test's own, at a short path: vLLM's engine sockets live in
    # TMPDIR, and a socket's path must fit in 107 characters
    work = Path(tempfile.mkdtemp(prefix="lgserve"))
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    env = {
        **vllm_cpu.server_env(work),
        "SERVE_PYTHON": vllm_env.python,
        "TINY_MODEL": str(vllm_env.model),
    }
    root = tmp_path / "tree"
    argv = [sys.executable, "-m", "loadgen", "--config", str(EXAMPLE), "--results", str(root)]
    argv += ["--tokenizer", str(vllm_env.model)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=2000)
    print(f"$ {' '.join(argv)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
    lanes = read(root / "lanes.json")["lanes"]
    for lane in lanes:
        log = root / lane["name"] / "server.log"
        if lane["state"] != "succeeded" and log.exists():
            print(f"--- {log}\n{log.read_text()[-4000:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(lane["name"], lane["state"]) for lane in lanes] == [
        ("stp", "succeeded"),
        ("draft", "succeeded"),
    ]
    pids = []
    for name in ("stp", "draft"):
        run = read(root / name / "run.json")
        launched = run["launched_server"]
        command = " ".join(launched["command"])
        assert "vllm.entrypoints.openai.api_server" in command
        assert ("draft_model" in command) == (name == "draft")
        assert f"--port {launched['port']}" in command  # {port} substituted
        assert launched["version"] and launched["version"] == run["server"]["version"]
        assert launched["startup_s"] > 0 and launched["exit_status"] is not None
        assert launched["stopped_by"] in ("SIGINT", "SIGTERM", "SIGKILL")
        assert (run["server"]["spec_decoding"] is True) is (name == "draft")
        pids.append(launched["pid"])
        for conc in CONCS:
            point = read(root / name / f"conc_{conc}.json")
            assert point["complete"] is True and point["completed"] == 2 * conc, point
    # draft == target: every draft token is accepted, by the server's own counters
    draft = read(root / "draft" / "conc_1.json")
    assert draft["server_acceptance_length"] == pytest.approx(SPEC_TOKENS + 1)
    assert all(group_gone(pid) for pid in pids), pids
    with pytest.raises(ProcessLookupError):
        os.killpg(pids[0], 0)
    compared = subprocess.run(
        [sys.executable, "-m", "loadgen", "compare", str(root / "stp"), str(root / "draft")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(compared.stdout)
    assert compared.returncode == 0, compared.stderr
    ratios = [
        read(root / "draft" / f"conc_{c}.json")["output_throughput"]
        / read(root / "stp" / f"conc_{c}.json")["output_throughput"]
        for c in CONCS
    ]
    if (ratios[0] >= 1) != (ratios[1] >= 1):
        ahead = "draft" if ratios[0] > 1 else "stp"
        behind = "stp" if ahead == "draft" else "draft"
        expected = f"crossover: {ahead} is ahead up to conc 1, {behind} from conc 4 on"
    else:
        ahead = "draft" if ratios[0] >= 1 else "stp"
        expected = f"no crossover: {ahead} is ahead at every common concurrency"
    assert expected in compared.stdout, (ratios, compared.stdout)
