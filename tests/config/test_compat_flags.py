"""vLLM `bench serve` / InferenceX flags: what each becomes in the RunSpec, and conflicts."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.config.args import build_parser, spec_from_argv, spec_from_options
from loadgen.config.compat import GROUP
from loadgen.config.spec import SpecError, VllmResultOptions

# benchmarks/benchmark_lib.sh run_benchmark_serving in InferenceX, --base-url -> --sim
INFERENCEX = (
    "--model deepseek-ai/DeepSeek-V4-Pro --backend vllm --sim --dataset-name random "
    "--random-input-len 8192 --random-output-len 1024 --random-range-ratio 0.8 "
    "--num-prompts 640 --max-concurrency 64 --request-rate inf --ignore-eos --save-result "
    "--num-warmups 128 --percentile-metrics ttft,tpot,itl,e2el --result-dir {dir} "
    "--result-filename dsv4_8k1k_conc64.json --use-chat-template --dsv4 --trust-remote-code"
)


def test_inferencex_command_line(tmp_path: Path) -> None:
    spec = spec_from_argv(shlex.split(INFERENCEX.format(dir=tmp_path)), env={})
    assert (spec.load.conc, spec.workload.isl, spec.workload.osl, spec.workload.range_ratio) == (
        (64,),
        8192,
        1024,
        0.8,
    )
    assert (spec.load.measured_requests(64), spec.load.warmup_requests(64)) == (640, 128)
    assert spec.load.request_rate is None  # inf: closed loop at the concurrency
    assert (spec.workload.encoder, spec.workload.thinking, spec.target.endpoint) == (
        "dsv4",
        "thinking",
        "completions",
    )
    assert spec.output.results_dir == tmp_path and spec.sim
    assert spec.sim_args[:2] == ("--model", "deepseek-ai/DeepSeek-V4-Pro")  # sim serves it
    assert spec.output.vllm_result == VllmResultOptions(
        result_dir=tmp_path,
        filename="dsv4_8k1k_conc64",
        model_id="deepseek-ai/DeepSeek-V4-Pro",
        tokenizer_id="deepseek-ai/DeepSeek-V4-Pro",
    )
    assert {90.0, 99.0, 99.9} <= set(spec.scoring.percentiles)
    assert [n for n in spec.output.ignored_flags if "--trust-remote-code" in n]


def test_vllm_flags_map_to_loadgen_flags() -> None:
    spec = spec_from_argv(
        [
            "--host",
            "10.0.0.5",
            "--port",
            "8001",
            "--max-concurrency",
            "4",
            "8,16",
            "--input-len",
            "100",
            "--output-len",
            "20",
            "--header",
            "x-a=1",
            "X-B:2=3",
            "--goodput",
            "ttft:2000",
            "tpot:50",
            "--metric-percentiles",
            "25,50",
            "--disable-tqdm",
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "org/M",
            "--served-model-name",
            "m",
            "--metadata",
            "tp=8",
            "--save-detailed",
            "--label",
            "L",
            "--percentile-metrics",
            "ttft,client_queue_time",
            "--request-rate",
            "12.5",
        ],
        env={},
    )
    assert spec.target.base_url == "http://10.0.0.5:8001" and spec.load.conc == (4, 8, 16)
    assert (spec.workload.isl, spec.workload.osl, spec.workload.encoder) == (
        100,
        20,
        "raw",
    )  # untemplated, as vLLM
    assert spec.target.headers == (("x-a", "1"), ("X-B", "2=3"))
    assert spec.scoring.slos_ms == {"ttft": 2000.0, "tpot": 50.0} and not spec.output.progress
    assert {25.0, 50.0, 90.0} <= set(spec.scoring.percentiles)
    assert (spec.target.endpoint, spec.target.model, spec.load.request_rate) == ("chat", "m", 12.5)
    assert spec.output.vllm_result is not None and spec.output.vllm_result.detailed
    assert (spec.output.vllm_result.model_id, spec.output.vllm_result.label) == ("org/M", "L")
    assert spec.output.vllm_result.metadata == (("tp", "8"),)
    assert spec.output.vllm_result.percentile_metrics == ("ttft", "client_queue_time")
    assert spec.output.vllm_result.metric_percentiles == (25.0, 50.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--conc", "4", "--max-concurrency", "8"], "--conc and --max-concurrency"),
        (["--conc", "4", "--isl", "64", "--random-input-len", "65"], "--isl and --random-input"),
        (["--conc", "4", "--slo", "ttft=1s", "--goodput", "ttft:1"], "give one"),
        (["--conc", "4", "--goodput", "latency:5"], "ttft, tpot, e2el"),
        (["--conc", "4", "--goodput", "ttft=5"], "METRIC:MILLISECONDS"),
        (["--conc", "4", "--dataset-name", "sharegpt"], "needs --dataset-path"),
        (["--conc", "4", "--encoder", "raw", "--dsv4"], "drop --encoder raw"),
        (["--conc", "4", "--percentile-metrics", "ttft,foo"], "foo not reported"),
        (["--conc", "4", "--save-result", "--result-filename", "a/b"], "a file name"),
        (["--conc", "4", "--request-rate", "fast"], "requests/s or inf"),
        (["--conc", "4", "--endpoint", "/v1/embeddings"], "allowed: completions, chat"),
        (["--isl", "64"], "--conc is required"),
    ],
)
def test_conflicts_and_bad_values_are_one_line(argv: list[str], message: str) -> None:
    base = ["--base-url", "http://127.0.0.1:9", "--osl", "16"]
    if "--isl" not in argv and "--random-input-len" not in argv:
        base += ["--isl", "64"]
    with pytest.raises(SpecError, match=message):
        spec_from_argv([*base, *argv], env={})


def test_same_value_twice_is_fine_and_random_dataset_refuses_a_path(tmp_path: Path) -> None:
    spec = spec_from_argv(
        [
            "--sim",
            "--conc",
            "4",
            "--max-concurrency",
            "4",
            "--isl",
            "64",
            "--random-input-len",
            "64",
            "--osl",
            "8",
        ],
        env={},
    )
    assert spec.load.conc == (4,) and spec.workload.isl == 64
    spec = spec_from_argv(["--sim", "--conc", "4", "--dataset-name", "random"], env={})
    assert (spec.workload.isl, spec.workload.osl, spec.workload.encoder) == (
        1024,
        128,
        "raw",
    )  # vLLM's defaults
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    with pytest.raises(SpecError, match="drop --dataset-path"):
        spec_from_argv(
            [
                "--sim",
                "--conc",
                "4",
                "--osl",
                "8",
                "--dataset-name",
                "random",
                "--dataset-path",
                str(data),
            ],
            env={},
        )
    spec = spec_from_argv(
        [
            "--sim",
            "--conc",
            "4",
            "--osl",
            "8",
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(data),
        ],
        env={},
    )
    assert (
        spec.workload.isl,
        spec.workload.dataset,
        spec.workload.dataset_format,
        spec.workload.encoder,
    ) == (
        None,
        data,
        "jsonl",
        "dsv4",
    )  # custom: templated, as vLLM applies the chat template


def test_sidecar_options_take_the_same_aliases(tmp_path: Path) -> None:
    spec = spec_from_options(
        {
            "base_url": "http://127.0.0.1:9",
            "max_concurrency": [2, 4],
            "random_input_len": 64,
            "random_output_len": 8,
            "goodput": ["ttft:100", "e2el:900"],
            "server_metrics": ["http://127.0.0.1:9/metrics"],
            "results_dir": str(tmp_path),
        }
    )
    assert spec.load.conc == (2, 4) and spec.scoring.slos_ms == {"ttft": 100.0, "e2el": 900.0}
    assert spec.telemetry.server_metrics == ("http://127.0.0.1:9/metrics",)


def test_help_keeps_the_aliases_in_their_own_group() -> None:
    groups = {
        g.title: [a.option_strings[0] for a in g._group_actions]
        for g in build_parser()._action_groups
    }
    assert "--max-concurrency" in groups[GROUP] and "--conc" not in groups[GROUP]
    assert "--random-range-ratio" in groups[GROUP] and "--range-ratio" in groups["workload"]
    text = subprocess.run(
        [sys.executable, "-m", "loadgen", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    text = " ".join(text.split())
    assert GROUP in text and "as InferenceX's" in text


@pytest.mark.parametrize(
    "option",
    [
        "host",
        "port",
        "served-model-name",
        "dataset_path",
        "result_dir",
        "server_metrics",
        "gpu_metrics",
        "gpu-power-csv",
    ],
)
def test_sidecar_refuses_aliases_of_what_it_sets_itself(option: str, tmp_path: Path) -> None:
    from loadgen.sidecar.options import spec_for
    from loadgen.sidecar.settings import ServiceConfig

    config = ServiceConfig(target="http://127.0.0.1:9", model="m", data_dir=tmp_path)
    with pytest.raises(SpecError, match="not accepted over the API"):
        spec_for(config, {"conc": "2", "isl": 64, "osl": 8, option: "x"}, tmp_path)
    assert (
        spec_for(
            config,
            {"max_concurrency": [2], "random_input_len": 64, "osl": 8, "save_result": True},
            tmp_path,
        ).output.vllm_result
        is not None
    )
