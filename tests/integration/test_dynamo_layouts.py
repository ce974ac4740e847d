"""The other layouts of a real Dynamo 1.4.2 deployment, GPU-free mocker workers behind the
real frontend: prefill/decode at 1P1D and 2P1D (`--disaggregation-mode prefill` /
`decode`, the KV transfer simulated at 10 GB/s, 100 kB a token) and one data-parallel
worker (`--data-parallel-size 2`). In each: the default command and `--endpoint chat`
complete with no error, and with a `--server-metrics ROLE=URL` per role the point has each
role's figures and its `ttft_parts`, each part a number or null with its reason.

Each layout's cluster is started once for the module (dynamo_layout, module-scoped and
parametrized: pytest runs one layout's tests together). Measured: the module with
tests/integration/test_dynamo.py, 72 s on this 2-core machine (each cluster ready in
~4-6 s, stopped in under a second, each run 3-6 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.results.jsonl import read_jsonl
from tests.support.dynamo_cluster import DynamoCluster, die_with_parent, dynamo_env

pytestmark = pytest.mark.dynamo

OSL = 16
SMALL = ("--isl", "256", "--osl", str(OSL), "--num-prompts", "6", "--warmup-per-conc", "0")
PARTS = ("frontend_ms", "prefill_queue_ms", "prefill_ms", "kv_transfer_ms", "decode_first_ms")


def run(cluster: DynamoCluster, results: Path, *args: str) -> tuple[dict[str, Any], str]:
    done = cluster.run_loadgen([*SMALL, "--results", str(results), *args])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr
    return orjson.loads((results / "run.json").read_bytes()), done.stderr


def assert_no_errors(results: Path, run_file: dict[str, Any]) -> None:
    assert run_file["points"]
    for entry in run_file["points"]:
        assert entry["complete"] and entry["error_rate"] == 0.0
        records = read_jsonl(results / f"requests_conc_{entry['conc']}.jsonl")
        assert len(records) == 6
        for record in records:
            assert record.ok, record.error_detail
            assert record.completion_tokens == OSL == sum(record.chunk_tokens)


def test_the_default_command_completes(dynamo_layout: DynamoCluster, tmp_path: Path) -> None:
    run_file, _ = run(dynamo_layout, tmp_path / "r", "--conc", "1..4")
    assert [p["conc"] for p in run_file["points"]] == [1, 2, 4]
    assert_no_errors(tmp_path / "r", run_file)
    assert run_file["server"]["engine"] == "dynamo"
    assert set(run_file["server"]["dropped_options"]) == {"add_special_tokens", "return_token_ids"}


def test_the_chat_endpoint_completes(dynamo_layout: DynamoCluster, tmp_path: Path) -> None:
    run_file, _ = run(dynamo_layout, tmp_path / "r", "--conc", "1,4", "--endpoint", "chat")
    assert_no_errors(tmp_path / "r", run_file)
    assert run_file["server"]["engine"] == "dynamo"


def test_each_role_is_read(dynamo_layout: DynamoCluster, tmp_path: Path) -> None:
    """`--server-metrics` per role. A fresh mocker serves its vllm:* series only from its
    first request on (measured: a fresh decode worker serves none), so this test does not
    lean on the ones before it: `--engine vllm` (auto-detection at preflight would see the
    frontend's series alone; behind a Dynamo frontend the workers' engine is the user's
    to name) and one warm-up request, so the series exist before the point (a series
    missing before it gives no delta)."""
    cluster = dynamo_layout
    run_file, _ = run(
        cluster,
        tmp_path / "r",
        *("--conc", "2", "--warmup-per-conc", "1", "--engine", "vllm"),
        *cluster.role_args(),
    )
    assert_no_errors(tmp_path / "r", run_file)
    point = orjson.loads((tmp_path / "r" / "conc_2.json").read_bytes())
    by_role = {row["role"]: row for row in point["server_metrics_by_role"]}
    assert set(by_role) == {"frontend", *cluster.roles}
    assert all(row["scraped"] for row in by_role.values())
    # the workers that run the engine's loop (decode, or the aggregated/data-parallel
    # worker) count every request of the point in their vllm:* TTFT histogram
    engine_role = "decode" if "decode" in cluster.roles else "worker"
    assert by_role[engine_role]["server_requests"] == 6
    assert by_role[engine_role]["server_mean_ttft_ms"] > 0
    if "prefill" in cluster.roles:
        # Dynamo 1.4.2's prefill mocker serves no vllm:* series at all (its requests are
        # only in dynamo_component_requests_total): its engine figures are unknown
        assert by_role["prefill"]["server_requests"] is None
    parts = point["ttft_parts"]
    if "prefill" not in cluster.roles:
        assert parts is None  # an aggregated (data-parallel) worker: no TTFT to take apart
        return
    for name in PARTS:
        part = parts[name]
        assert part["mean_ms"] is None or part["mean_ms"] >= 0, (name, part)
        if part["mean_ms"] is None:
            assert part["reason"], (name, part)
    # what the real series allow: no prefill queue, prefill time or KV transfer
    # histogram on either worker (no vllm:request_*_time_seconds on the prefill
    # mocker, no vllm:nixl_xfer_time_seconds on the decode one)
    assert parts["kv_transfer_ms"]["mean_ms"] is None
    assert "nixl_xfer_time_seconds" in parts["kv_transfer_ms"]["reason"]
    assert parts["prefill_ms"]["mean_ms"] is None
    assert parts["decode_first_ms"]["mean_ms"] is None
    assert parts["adds_up"] is None and parts["verdict"].startswith("not checked")


def test_a_worker_that_exits_at_startup_is_seen_dead(dynamo_python: str, tmp_path: Path) -> None:
    """A mocker refusing its arguments exits at once: the start says which pid exited
    (its zombie leader reaped, not mistaken for a live group until the deadline) and
    leaves no process behind."""
    with pytest.raises(RuntimeError, match=r"^Dynamo pid\(s\) \[\d+.*\] exited") as error:
        dynamo_env.start_cluster(
            python=dynamo_python,
            work_dir=tmp_path / "bad",
            tokenizer_json=dynamo_env.bundled_tokenizer(),
            layout="1p1d",
            mocker_args=["--no-such-mocker-flag"],
            timeout_s=600.0,
            preexec_fn=die_with_parent,
        )
    assert "--no-such-mocker-flag" in str(error.value)  # the worker's log tail
    state = orjson.loads((tmp_path / "bad" / dynamo_env.STATE).read_bytes())
    assert not [pid for pid in state["pids"] if dynamo_env.running(pid)]
