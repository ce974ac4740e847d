"""examples/pd-ratio-dynamo.yaml end to end on this machine: three lanes, each launching
(--serve-cmd) a real Dynamo 1.4.2 frontend with mocker workers at 1P1D, 2P1D and 1P2D,
the same workload; compare and the report show each lane's TTFT parts and role figures
per concurrency and say which ratio wins; every Dynamo process is stopped.

About two minutes: each cluster starts in ~10 s, each lane's two points take a few
seconds. The example's fixed ports (18000-18003) must be free."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.dynamo_cluster import dynamo_env
from tests.support.paths import ROOT

pytestmark = pytest.mark.dynamo

EXAMPLE = ROOT / "examples" / "pd-ratio-dynamo.yaml"
LANES = {"1p1d": (1, 1), "2p1d": (2, 1), "1p2d": (1, 2)}
CONCS = (1, 4)


def read(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def test_the_pd_ratio_example_runs_end_to_end(dynamo_python: str, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    # the lanes' `python` is this one (the bundled tokenizer is in its environment)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "loadgen", "--config", str(EXAMPLE), "--results", str(root)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    lanes = read(root / "lanes.json")["lanes"]
    assert [(lane["name"], lane["state"]) for lane in lanes] == [
        (name, "succeeded") for name in LANES
    ]
    for name, (prefills, decodes) in LANES.items():
        run = read(root / name / "run.json")
        assert run["launched_server"]["exit_status"] is not None
        assert f"--layout {name}" in " ".join(run["launched_server"]["command"])
        # every process the lane's cluster had is gone (the script's own stop line)
        log = (root / name / "server.log").read_text()
        stopped = re.search(r"stopped pids \[([\d, ]+)\]", log)
        assert stopped is not None, log[-2000:]
        pids = [int(p) for p in stopped[1].split(",")]
        assert len(pids) == 2 + prefills + decodes  # namespace holder, frontend, workers
        assert not [pid for pid in pids if dynamo_env.running(pid)]
        for conc in CONCS:
            point = read(root / name / f"conc_{conc}.json")
            assert point["complete"] and point["failed"] == 0
            roles = {row["role"]: len(row["urls"]) for row in point["server_metrics_by_role"]}
            assert roles == {"frontend": 1, "prefill": prefills, "decode": decodes}
            parts = point["ttft_parts"]
            # what the real mocker's series allow (docs/results.md): the frontend's part
            # (chat: preprocess + route), the rest null with the series each lacks
            assert 0 < parts["frontend_ms"]["mean_ms"] < parts["client_mean_ttft_ms"]
            for part in ("prefill_queue_ms", "prefill_ms", "kv_transfer_ms"):
                assert parts[part]["mean_ms"] is None and "series" in parts[part]["reason"]
    compared = read(root / "compare.json")["disaggregated"]
    assert compared["runs"] == list(LANES)
    assert len(compared["lanes"]) == len(LANES) * len(CONCS)
    for conc in CONCS:
        winners = [w for w in compared["winners"] if w["conc"] == conc]
        assert [w["quantity"] for w in winners] == ["throughput", "mean TTFT"]
        for w in winners:
            assert w["run"] in (None, *LANES) and w["sentence"] in done.stdout
    page = (root / "report.html").read_text()
    assert '<h2 id="disagg">' in page and page.count('<table class="ttft-parts"') == len(CONCS)
