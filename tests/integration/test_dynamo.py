"""Against a real Dynamo 1.4.2 frontend and its GPU-free mocker worker (aggregated):
loadgen's default command and `--endpoint chat` complete with no error, the extensions the
frontend refuses by name are dropped and recorded, and `--engine auto` names Dynamo.

Small points (conc 1..4, isl 128, osl 32, 8 requests each): the cluster starts in ~4 s,
each run takes ~7 s on two cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.metrics.engines import engine_by_names
from loadgen.metrics.server import parse_metrics
from loadgen.results.jsonl import read_jsonl
from tests.support.dynamo_cluster import DynamoCluster

pytestmark = pytest.mark.dynamo

SMALL = ("--isl", "128", "--osl", "32", "--num-prompts", "8", "--warmup-per-conc", "0")


def run(cluster: DynamoCluster, results: Path, *args: str) -> tuple[dict[str, Any], str]:
    done = cluster.run_loadgen([*SMALL, "--results", str(results), *args])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr
    return orjson.loads((results / "run.json").read_bytes()), done.stderr


def assert_no_errors(results: Path, run_file: dict[str, Any], prompts: int = 8) -> None:
    assert run_file["points"]
    for entry in run_file["points"]:
        assert entry["complete"] and entry["error_rate"] == 0.0
        records = read_jsonl(results / f"requests_conc_{entry['conc']}.jsonl")
        assert len(records) == prompts
        for record in records:
            assert record.ok, record.error_detail
            assert record.completion_tokens == 32 == sum(record.chunk_tokens)


def one_line(stderr: str, needle: str) -> str:
    (line,) = [line for line in stderr.splitlines() if needle in line]
    return line


def test_the_default_command_completes(dynamo_agg: DynamoCluster, tmp_path: Path) -> None:
    """Completions with default options: Dynamo refuses add_special_tokens and
    return_token_ids by name; both are dropped, said once, recorded, and the counts come
    from usage."""
    run_file, stderr = run(dynamo_agg, tmp_path / "r", "--conc", "1..4")
    assert [p["conc"] for p in run_file["points"]] == [1, 2, 4]
    assert_no_errors(tmp_path / "r", run_file)
    server = run_file["server"]
    assert set(server["dropped_options"]) == {"add_special_tokens", "return_token_ids"}
    assert server["options"]["omit"] == ["add_special_tokens"]
    assert server["token_source"] == "usage"
    line = one_line(stderr, "refused")
    assert "add_special_tokens, return_token_ids by name" in line
    # without add_special_tokens the server tokenizes the prompt by its own default: with
    # this model directory's add_bos_token false, its count is loadgen's
    for record in read_jsonl(tmp_path / "r" / "requests_conc_4.jsonl"):
        assert record.prompt_tokens == record.input_len
    # Dynamo recognised by its own series, and its frontend's figures read from them
    assert server["engine"] == "dynamo"
    assert one_line(stderr, "loadgen: engine ").startswith("loadgen: engine dynamo (")
    assert "dynamo_frontend_*" in server["engine_reason"]
    point = orjson.loads((tmp_path / "r" / "conc_4.json").read_bytes())
    assert point["frontend_requests"] == 8 and point["frontend_mean_ttft_ms"] > 0


def test_the_chat_endpoint_completes(dynamo_agg: DynamoCluster, tmp_path: Path) -> None:
    run_file, stderr = run(dynamo_agg, tmp_path / "r", "--conc", "1,4", "--endpoint", "chat")
    assert_no_errors(tmp_path / "r", run_file)
    server = run_file["server"]
    assert set(server["dropped_options"]) == {"return_token_ids"}  # chat has no BOS option
    assert server["options"]["omit"] == [] and server["token_source"] == "usage"
    assert server["engine"] == "dynamo"
    assert "return_token_ids by name" in one_line(stderr, "refused")


def test_the_workers_engine_is_read_beside_the_frontend(
    dynamo_agg: DynamoCluster, tmp_path: Path
) -> None:
    """With the worker's system port among --server-metrics, its engine's series (the
    mocker's vllm:*) are read and the reason names the frontend too."""
    (worker,) = dynamo_agg.worker_metrics
    frontend = dynamo_agg.url + "/metrics"
    run_file, _ = run(
        dynamo_agg,
        tmp_path / "r",
        "--conc",
        "2",
        "--server-metrics",
        frontend,
        "--server-metrics",
        worker,
    )
    assert_no_errors(tmp_path / "r", run_file)
    server = run_file["server"]
    assert server["engine"] == "vllm" and "Dynamo frontend" in server["engine_reason"]
    point = orjson.loads((tmp_path / "r" / "conc_2.json").read_bytes())
    assert point["server_mean_ttft_ms"] > 0 and point["frontend_mean_ttft_ms"] > 0


def test_the_live_series_are_the_captured_ones(dynamo_agg: DynamoCluster) -> None:
    """The fixtures the parser tests read (tests/fixtures/dynamo_1.4.2/) still describe
    these processes: the frontend's names are Dynamo's, the worker's vLLM's."""
    frontend = parse_metrics(dynamo_agg.get(dynamo_agg.url + "/metrics").decode())
    worker = parse_metrics(dynamo_agg.get(dynamo_agg.worker_metrics[0]).decode())
    assert engine_by_names(frontend.samples).name == "dynamo"  # type: ignore[union-attr]
    assert engine_by_names(worker.samples).name == "vllm"  # type: ignore[union-attr]


def test_the_readmes_vllm_style_command_completes(
    dynamo_agg: DynamoCluster, tmp_path: Path
) -> None:
    """The README's main command (vLLM bench serve's flags), at a small scale, with the
    model name the frontend serves."""
    results = tmp_path / "results"
    done = dynamo_agg.run_loadgen(
        [
            *("--model", "deepseek-ai/DeepSeek-V4-Pro", "--served-model-name", dynamo_agg.model),
            *("--backend", "vllm", "--dataset-name", "random"),
            *("--random-input-len", "128", "--random-output-len", "32"),
            *("--random-range-ratio", "0.8", "--num-prompts", "8", "--max-concurrency", "4"),
            *("--request-rate", "inf", "--ignore-eos", "--save-result", "--num-warmups", "2"),
            *("--percentile-metrics", "ttft,tpot,itl,e2el", "--result-dir", str(results)),
            *("--result-filename", "dsv4_conc4.json", "--use-chat-template", "--dsv4"),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    saved = orjson.loads((results / "dsv4_conc4.json").read_bytes())
    assert saved["completed"] == 8 and saved["failed"] == 0
    assert "add_special_tokens, return_token_ids by name" in one_line(done.stderr, "refused")
