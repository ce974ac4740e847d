"""End to end against the simulator: a vLLM/InferenceX command line, datasets without --isl,
--server-metrics over several servers, and result files readable by the rest of a team."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen import cli
from loadgen.client import server_metrics
from loadgen.client.server_metrics import MetricsUrlError
from loadgen.config.args import spec_from_argv
from loadgen.orchestrate.measure import measure
from loadgen.sim.config import SimConfig
from loadgen.sim.server import running_simulator
from loadgen.tokenizer import encode
from tests.support.inferencex import check_power_window, inferencex_derivations

FAST_SIM = "--step-fixed-ms 2 --decode-token-us 20 --prefill-token-us 2 --seed 7"
# InferenceX benchmark_lib.sh's command, --base-url replaced by --sim, smaller numbers
INFERENCEX = (
    "--model deepseek-ai/DeepSeek-V4-Pro --backend vllm --sim --dataset-name random "
    "--random-input-len 256 --random-output-len 24 --random-range-ratio 0.8 --num-prompts 9 "
    "--max-concurrency {conc} --request-rate inf --ignore-eos --save-result --num-warmups 4 "
    "--percentile-metrics ttft,tpot,itl,e2el --result-dir {dir} --result-filename "
    "dsv4_conc.json --use-chat-template --dsv4 --trust-remote-code"
)


@pytest.fixture
def umask_027() -> Iterator[None]:
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def load(path: Path) -> dict[str, Any]:
    return dict(orjson.loads(path.read_bytes()))


def test_inferencex_command_runs_unchanged(
    tmp_path: Path, umask_027: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = shlex.split(INFERENCEX.format(conc=4, dir=tmp_path))
    code = cli.main([*argv, "--sim-args", FAST_SIM, "--num-gpus", "8"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count("--trust-remote-code is accepted and ignored") == 1
    bmk, own = load(tmp_path / "dsv4_conc.json"), load(tmp_path / "conc_4.json")
    assert (bmk["model_id"], bmk["max_concurrency"], bmk["num_prompts"]) == (
        "deepseek-ai/DeepSeek-V4-Pro",
        4,
        9,
    )
    assert bmk["completed"] == own["completed"] == 9 and bmk["spec_decode_num_drafts"] > 0
    check_power_window(bmk)
    derived = inferencex_derivations(bmk, num_gpus=8)  # TP=8: what process_result divides by
    assert derived["tput_per_gpu"] == pytest.approx(own["total_token_throughput_per_gpu"])
    assert derived["p99_ttft"] == pytest.approx(own["p99_ttft_ms"] / 1000)
    # InferenceX's median interactivity is 1000 / median TPOT; loadgen's own field is the
    # median of per-request 1000 / TPOT, which can differ (even counts, a request whose
    # chunks all arrived in one read under load). The derivation must match the former.
    assert derived["median_intvty"] == pytest.approx(1000.0 / own["median_tpot_ms"])
    lens = [int(n) for n in own["input_lens"]]
    assert min(lens) >= int(256 * 0.8) and max(lens) <= 256  # InferenceX's range ratio
    # every result file follows the umask (0640 here), none is private to its writer
    files = [p for p in tmp_path.iterdir() if p.is_file()]
    assert {
        "conc_4.json",
        "dsv4_conc.json",
        "sweep.csv",
        "sweep.png",
        "run.json",
        "requests_conc_4.jsonl",
    } <= {p.name for p in files}
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path.name


def test_a_list_of_concurrencies_writes_one_file_per_point(tmp_path: Path) -> None:
    argv = shlex.split(INFERENCEX.format(conc="2 3", dir=tmp_path))
    assert cli.main([*argv, "--sim-args", FAST_SIM, "--disable-tqdm"]) == 0
    for conc in (2, 3):
        bmk = load(tmp_path / f"dsv4_conc_conc{conc}.json")
        assert bmk["max_concurrency"] == conc and bmk["completed"] == 9
        assert stat.S_IMODE((tmp_path / f"dsv4_conc_conc{conc}.json").stat().st_mode) == (
            0o666 & ~_umask()
        )
    assert not (tmp_path / "dsv4_conc.json").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sharegpt_file(path: Path, tokenizer: Tokenizer) -> list[tuple[int, int]]:
    """Six conversations of different lengths, one too short for vLLM's pruning; returns
    (prompt tokens, answer tokens) of the kept ones."""
    words = [" alpha", " beta", " gamma", " delta"]
    entries, kept = [], []
    for n in (2, 8, 16, 32, 48, 64):
        prompt = "hello" + "".join(words[i % 4] for i in range(n))
        answer = "sure" + "".join(words[(i + 1) % 4] for i in range(n // 2 + 4))
        entries.append(
            {
                "id": str(n),
                "conversations": [
                    {"from": "human", "value": prompt},
                    {"from": "gpt", "value": answer},
                ],
            }
        )
        tokens = (len(encode(tokenizer, prompt)), len(encode(tokenizer, answer)))
        if tokens[0] >= 4:
            kept.append(tokens)
    entries.append({"id": "one-turn", "conversations": [{"from": "human", "value": "x"}]})
    path.write_bytes(orjson.dumps(entries))
    return kept


async def test_sharegpt_without_isl_or_osl(tmp_path: Path, tokenizer: Tokenizer) -> None:
    data = tmp_path / "sharegpt.json"
    kept = sharegpt_file(data, tokenizer)
    spec = spec_from_argv(
        [
            "--sim",
            "--sim-args",
            FAST_SIM,
            "--max-concurrency",
            "2",
            "--num-prompts",
            "10",
            "--num-warmups",
            "0",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            str(data),
            "--results",
            str(tmp_path / "r"),
            "--no-progress",
        ],
        env={},
    )
    assert (spec.workload.isl, spec.workload.osl, spec.workload.encoder) == (
        None,
        None,
        "raw",
    )  # as vLLM sends it
    outcome = await measure(spec, tokenizer=tokenizer)
    result = outcome.points[0].result.to_json()  # as the file spells it
    assert outcome.exit_code == 0 and result["completed"] == 10
    pairs = set(zip(result["input_lens"], result["output_lens"], strict=True))
    assert pairs <= set(kept) and len(pairs) == len(kept)  # every kept one, nothing else
    assert result["input_len"] is None and result["output_len"] is None


async def test_messages_dataset_needs_osl(tmp_path: Path, tokenizer: Tokenizer) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi there"}]}\n')
    spec = spec_from_argv(
        [
            "--sim",
            "--conc",
            "1",
            "--dataset",
            str(data),
            "--results",
            str(tmp_path / "r"),
            "--no-progress",
        ],
        env={},
    )
    with pytest.raises(Exception, match="--osl is required with --dataset"):
        await measure(spec, tokenizer=tokenizer)


async def test_server_metrics_sums_urls_and_keeps_each(
    tmp_path: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two simulators stand for two workers: the target does the work, the other idles.
    The sums equal the busy one's figures, and each URL keeps its own."""
    monkeypatch.setattr(server_metrics, "WATCH_INTERVAL_S", 0.1)
    config = SimConfig(
        step_fixed_ms=2.0, decode_token_us=2.0, prefill_token_us=0.1, spin_us=0.0, spec_tokens=2
    )
    async with (
        running_simulator(config, tokenizer=tokenizer) as busy_sim,
        running_simulator(config, tokenizer=tokenizer) as idle_sim,
    ):
        spec = spec_from_argv(
            [
                "--base-url",
                busy_sim.base_url,
                "--conc",
                "4",
                "--isl",
                "64",
                "--osl",
                "200",
                "--prompts-per-conc",
                "3",
                "--warmup-per-conc",
                "0",
                "--results",
                str(tmp_path),
                "--no-progress",
                "--server-metrics",
                busy_sim.base_url + "/metrics",
                "--server-metrics",
                idle_sim.base_url,
            ],
            env={},
        )
        outcome = await measure(spec, tokenizer=tokenizer)
    result = outcome.points[0].result.to_json()  # as the file spells it
    busy, quiet = result["server_metrics_by_url"]
    assert quiet["url"] == idle_sim.base_url + "/metrics" and quiet["scraped"]
    assert quiet["server_acceptance_length"] is None and quiet["requests_running_max"] == 0
    assert busy["scraped"] and busy["gauge_samples"] >= 2 and busy["requests_running_max"] > 0
    assert 0 < busy["kv_cache_usage_max"] <= 1
    assert busy["server_spec_decode_drafts"] == result["server_spec_decode_drafts"] > 0
    assert busy["server_acceptance_length"] == result["server_acceptance_length"]
    assert busy["server_requests"] == result["server_requests"] == 12
    assert load(tmp_path / "conc_4.json")["server_metrics_by_url"][0]["url"] == busy["url"]


async def test_a_dead_metrics_url_stops_the_run_in_preflight(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    spec = spec_from_argv(
        [
            "--sim",
            "--sim-args",
            FAST_SIM,
            "--conc",
            "1",
            "--isl",
            "64",
            "--osl",
            "4",
            "--results",
            str(tmp_path),
            "--no-progress",
            "--server-metrics",
            "http://127.0.0.1:9/metrics",
        ],
        env={},
    )
    with pytest.raises(MetricsUrlError, match=r"1 of 1 URLs .*127\.0\.0\.1:9/metrics"):
        await measure(spec, tokenizer=tokenizer)
    assert not (tmp_path / "conc_1.json").exists()
