"""The vLLM `bench serve` / InferenceX compatibility flags' table entries
(config/fields.py), their parsers and vLLM's defaults; config/compat.py maps the values
onto loadgen's own settings."""

from __future__ import annotations

import math
from pathlib import Path

from loadgen.config.fields import Field, flag
from loadgen.config.parsers import (
    VLLM_PERCENTILE_METRICS,
    SpecError,
    parse_conc,
    parse_percentiles,
)

GROUP = "vLLM bench serve / InferenceX compatibility"
BACKENDS = ("vllm", "openai", "openai-chat")
DATASET_NAMES = ("random", "sharegpt", "custom", "speed_bench")
# vLLM 0.32 benchmarks/datasets.py SpeedBench: DIR/<subset>.jsonl
SPEED_BENCH_SUBSETS = (
    "qualitative",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
)
SPEED_BENCH_OUTPUT_LEN = 4096  # vLLM's --speed-bench-output-len default
# vLLM 0.32's --random-input-len/--random-output-len defaults (--dataset-name random)
RANDOM_INPUT_LEN, RANDOM_OUTPUT_LEN = 1024, 128


def parse_goodput_pair(text: str) -> list[tuple[str, float]]:
    """vLLM's `KEY:VALUE` SLO (milliseconds); a comma-joined list is accepted too."""
    pairs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition(":")
        try:
            limit = float(value)
        except ValueError:
            limit = math.nan
        if not sep or not math.isfinite(limit):
            raise SpecError(f"--goodput {part!r}: expected METRIC:MILLISECONDS, e.g. ttft:2000")
        pairs.append((name.strip().lower(), limit))
    return pairs


def parse_key_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise SpecError(f"--metadata {text!r}: expected KEY=VALUE")
    return name.strip(), value.strip()


def parse_metric_names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [n for n in names if n not in VLLM_PERCENTILE_METRICS]
    if not names or unknown:
        raise SpecError(
            f"--percentile-metrics: {','.join(unknown) or '(none)'} not reported; "
            f"allowed: {', '.join(VLLM_PERCENTILE_METRICS)}"
        )
    return names


COMPAT_DESCRIPTION = (
    "Each flag means what it means to `vllm bench serve` (vLLM 0.32) or "
    "InferenceX's benchmark_serving.py, translated to the loadgen flag named."
)
COMPAT_FIELDS: tuple[Field, ...] = (
    flag(
        "--max-concurrency",
        nargs="+",
        action="extend",
        type=parse_conc,
        metavar="N",
        help="= --conc: one value or a list (4 8 16, or 4,8,16), one point each (default: none)",
    ),
    flag(
        "--num-prompts",
        type=int,
        metavar="N",
        help="measured requests per point (instead of conc x --prompts-per-conc) (default: none)",
        fills="num_prompts",
    ),
    flag(
        "--num-warmups",
        type=int,
        metavar="N",
        help="warmup requests per point (instead of conc x --warmup-per-conc) (default: none)",
        fills="num_warmups",
    ),
    flag(
        "--random-input-len",
        "--input-len",
        type=int,
        metavar="TOKENS",
        dest="random_input_len",
        help="= --isl (default: none)",
    ),
    flag(
        "--random-output-len",
        "--output-len",
        "--sharegpt-output-len",
        type=int,
        metavar="TOKENS",
        dest="random_output_len",
        help="= --osl (default: none)",
    ),
    flag(
        "--random-range-ratio",
        type=float,
        metavar="R",
        help="= --range-ratio: lengths uniform in [R*L, L], as InferenceX's "
        "benchmark_serving.py (vLLM 0.32 samples [(1-R)*L, (1+R)*L]) (default: none)",
    ),
    flag(
        "--dataset-name",
        choices=DATASET_NAMES,
        help="random: synthesized prompts (lengths default to vLLM's 1024 in, 128 "
        "out); sharegpt: ShareGPT JSON; custom: JSONL "
        "({prompt} or {messages} per line) from --dataset-path; speed_bench: "
        "NVIDIA SPEED-Bench, --dataset-path DIR holding <subset>.jsonl (rows of "
        "messages and category), each first message rendered by --encoder "
        "(default: none)",
    ),
    flag(
        "--speed-bench-dataset-subset",
        choices=SPEED_BENCH_SUBSETS,
        default="qualitative",
        help="SPEED-Bench subset: reads DIR/<subset>.jsonl",
    ),
    flag(
        "--speed-bench-category",
        metavar="NAME",
        help="only SPEED-Bench rows of this category, e.g. coding (InferenceX's "
        "golden AL set) (default: all categories)",
    ),
    flag(
        "--speed-bench-output-len",
        type=int,
        metavar="TOKENS",
        help=f"= --osl with --dataset-name speed_bench (default: "
        f"{SPEED_BENCH_OUTPUT_LEN}, as vLLM)",
    ),
    flag("--dataset-path", type=Path, metavar="FILE", help="= --dataset (default: none)"),
    flag(
        "--backend",
        choices=BACKENDS,
        help="openai-chat = --endpoint chat; vllm, openai = completions; also the "
        "result file's `backend` (default: vllm)",
    ),
    flag("--host", help="with --port: --base-url http://HOST:PORT (default: none)"),
    flag("--port", type=int, help="see --host (default: none)"),
    flag(
        "--served-model-name",
        metavar="NAME",
        help="the model name in requests, when --model is the model id written "
        "to results (default: none)",
    ),
    flag("--ignore-eos", action="store_true", help="accepted: loadgen always sends ignore_eos"),
    flag(
        "--use-chat-template",
        action="store_true",
        help="= --encoder dsv4 (loadgen's chat template is DeepSeek-V4's). Without "
        "it or --dsv4, --dataset-name random|sharegpt and --random-input-len send "
        "untemplated prompts as vLLM does (--encoder raw)",
    ),
    flag(
        "--dsv4",
        action="store_true",
        help="= --encoder dsv4 --thinking thinking, as InferenceX (implies --use-chat-template)",
    ),
    flag(
        "--percentile-metrics",
        type=parse_metric_names,
        metavar="M,...",
        help="metrics with percentiles in the --save-result file, from "
        f"{','.join(VLLM_PERCENTILE_METRICS)} (default: ttft,tpot,itl,e2el, as "
        "InferenceX; vLLM's is ttft,tpot,itl)",
    ),
    flag(
        "--metric-percentiles",
        type=parse_percentiles,
        metavar="P,...",
        help="their percentiles, also added to --percentiles (default: 90,99,99.9, "
        "as InferenceX; vLLM's is 99)",
    ),
    flag(
        "--goodput",
        nargs="+",
        action="extend",
        type=parse_goodput_pair,
        metavar="M:MS",
        help="= --slo, vLLM syntax in ms: --goodput ttft:2000 tpot:50 (default: none)",
    ),
    flag(
        "--save-result",
        action="store_true",
        help="also write each point as vLLM `bench serve --save-result` JSON",
    ),
    flag(
        "--save-detailed",
        action="store_true",
        help="add its per-request lists (input_lens, output_lens, ttfts, itls, "
        "start_times, errors)",
    ),
    flag(
        "--result-dir",
        type=Path,
        metavar="DIR",
        help="directory of the --save-result files, and --results when that is "
        "not given (default: none)",
    ),
    flag(
        "--result-filename",
        metavar="NAME",
        help="NAME.json (one concurrency) or NAME_conc<N>.json per point; implies "
        "--save-result (default: vLLM's {label}-{rate}qps-concurrency{N}-{model}-"
        "{date}.json)",
    ),
    flag("--label", help="the result file's label and name prefix (default: none)"),
    flag(
        "--metadata",
        nargs="+",
        action="extend",
        type=parse_key_value,
        metavar="K=V",
        help="KEY=VALUE pairs written into the --save-result file (default: none)",
    ),
    flag("--disable-tqdm", action="store_true", help="= --no-progress"),
    flag(
        "--trust-remote-code",
        action="store_true",
        help="accepted and ignored: loadgen runs no model code",
    ),
    flag(
        "--tokenizer-mode",
        metavar="MODE",
        help="accepted and ignored: loadgen's tokenizer is HF `tokenizers` (default: none)",
    ),
)
