"""vLLM `bench serve` / InferenceX `benchmark_serving.py` flags, mapped onto loadgen's own.

People arrive with a working `vllm bench serve` command line; each flag here means what it
means there (vLLM 0.32; where InferenceX's script differs, InferenceX, and the help says
so) and is translated into loadgen's flags before the RunSpec is built. A flag that is
accepted but changes nothing is listed in `RunSpec.ignored_flags`, which the CLI prints
once. Giving a loadgen flag and its alias with different values is an error, never a
silent choice.
"""

from __future__ import annotations

import argparse
from typing import Any

from loadgen.config.compat_flags import GROUP as GROUP
from loadgen.config.compat_flags import RANDOM_INPUT_LEN, RANDOM_OUTPUT_LEN, SPEED_BENCH_OUTPUT_LEN
from loadgen.config.output import VllmResultOptions
from loadgen.config.parsers import SpecError
from loadgen.config.workload import SpeedBenchOptions


def _merge(args: argparse.Namespace, dest: str, alias: str, flags: str) -> None:
    """Take the alias's value into `dest`; both given with different values is an error."""
    value = getattr(args, alias)
    if value is None:
        return
    current = getattr(args, dest)
    if current is not None and current != value:
        raise SpecError(
            f"{flags}: both given with different values ({current} vs {value}); give one"
        )
    setattr(args, dest, value)


def _flatten(lists: list[Any] | None) -> list[Any]:
    return [item for part in lists or () for item in part]


def apply_compat(args: argparse.Namespace) -> dict[str, Any]:
    """Fold the aliases into loadgen's own dests (in place); returns the RunSpec settings
    that only the compatibility flags set (beyond the ones their entries fill)."""
    if args.max_concurrency is not None:
        conc = tuple(_flatten(args.max_concurrency))
        if len(set(conc)) != len(conc):
            raise SpecError(f"--max-concurrency {conc}: a concurrency appears twice")
        args.max_concurrency = conc
    _merge(args, "conc", "max_concurrency", "--conc and --max-concurrency")
    _merge(args, "isl", "random_input_len", "--isl and --random-input-len")
    _merge(args, "osl", "random_output_len", "--osl and --random-output-len")
    _merge(args, "range_ratio", "random_range_ratio", "--range-ratio and --random-range-ratio")
    _merge(args, "dataset", "dataset_path", "--dataset and --dataset-path")
    _merge(args, "osl", "speed_bench_output_len", "--osl and --speed-bench-output-len")
    if args.dataset_name == "speed_bench" and args.osl is None:
        args.osl = SPEED_BENCH_OUTPUT_LEN
    if args.dataset_name == "random":  # vLLM 0.32's --random-input-len/--random-output-len
        args.isl = RANDOM_INPUT_LEN if args.isl is None else args.isl
        args.osl = RANDOM_OUTPUT_LEN if args.osl is None else args.osl
    _apply_target(args)
    _apply_prompt_format(args)
    if args.goodput:
        if args.slo:
            raise SpecError("--slo and --goodput: give one (they set the same SLOs)")
        args.slo = _goodput_slos(_flatten(args.goodput))
    if args.disable_tqdm:
        args.no_progress = True
    if args.results is None and args.result_dir is not None:
        args.results = args.result_dir
    return {
        # the format --dataset-name names (args.py reconciles it with --dataset-format);
        # vLLM prunes ShareGPT by length only under its own flag
        "dataset_format": _dataset_format(args),
        "sharegpt_limits": args.dataset_name == "sharegpt",
        "vllm_result": _vllm_result(args),
        "speed_bench": _speed_bench(args),
        "ignored_flags": _ignored(args),
    }


def _apply_target(args: argparse.Namespace) -> None:
    given = args.host is not None or args.port is not None
    if given and args.base_url is None and not args.sim:
        args.base_url = f"http://{args.host or '127.0.0.1'}:{args.port or 8000}"
    if args.backend == "openai-chat":
        if args.endpoint not in (None, "chat"):
            raise SpecError(
                "--backend openai-chat sends to /v1/chat/completions: drop "
                f"--endpoint {args.endpoint} or use --backend vllm"
            )
        args.endpoint = "chat"
    args.model_id = args.model
    if args.served_model_name is not None:
        args.model = args.served_model_name


def _apply_prompt_format(args: argparse.Namespace) -> None:
    """--dsv4 / --use-chat-template pick loadgen's DeepSeek-V4 encoder; a vLLM-style
    random or ShareGPT workload without either is sent untemplated, as vLLM sends it."""
    if args.dsv4 or args.use_chat_template:
        if args.encoder not in (None, "dsv4"):
            raise SpecError(
                f"--{'dsv4' if args.dsv4 else 'use-chat-template'} applies the "
                f"DeepSeek-V4 template: drop --encoder {args.encoder}"
            )
        args.encoder = "dsv4"
        if args.dsv4:
            if args.thinking not in (None, "thinking"):
                raise SpecError(
                    "--dsv4 encodes in thinking mode, as InferenceX: drop "
                    f"--thinking {args.thinking}"
                )
            args.thinking = "thinking"
        return
    vllm_style = args.dataset_name in ("random", "sharegpt") or args.random_input_len is not None
    if vllm_style and args.encoder is None:
        args.encoder = "raw"


def _dataset_format(args: argparse.Namespace) -> str:
    name = args.dataset_name
    if name == "random" and args.dataset is not None:
        raise SpecError(
            "--dataset-name random synthesizes prompts: drop --dataset-path, or "
            "use --dataset-name sharegpt or custom"
        )
    if name in ("sharegpt", "custom") and args.dataset is None:
        raise SpecError(f"--dataset-name {name} needs --dataset-path FILE")
    if name == "speed_bench" and args.dataset is None:
        raise SpecError(
            "--dataset-name speed_bench needs --dataset-path DIR (the directory "
            "of SPEED-Bench's <subset>.jsonl files)"
        )
    return {"sharegpt": "sharegpt", "custom": "jsonl", "speed_bench": "speed_bench"}.get(
        name or "", "auto"
    )


def _speed_bench(args: argparse.Namespace) -> SpeedBenchOptions | None:
    if args.dataset_name != "speed_bench":
        if args.speed_bench_category is not None:
            raise SpecError("--speed-bench-category applies to --dataset-name speed_bench")
        return None
    return SpeedBenchOptions(
        subset=args.speed_bench_dataset_subset, category=args.speed_bench_category
    )


def _goodput_slos(pairs: list[tuple[str, float]]) -> dict[str, float]:
    slos = {}
    for name, limit in pairs:
        if name not in ("ttft", "tpot", "itl", "e2el"):
            raise SpecError(f"--goodput {name}:{limit:g}: metric must be ttft, tpot, e2el (or itl)")
        if limit <= 0:
            raise SpecError(f"--goodput {name}: the limit must be > 0 ms")
        slos[name] = limit
    return slos


def _vllm_result(args: argparse.Namespace) -> VllmResultOptions | None:
    wanted = args.save_result or args.save_detailed or args.result_filename is not None
    if not wanted:
        return None
    filename = args.result_filename
    if filename is not None and filename.endswith(".json"):
        filename = filename[: -len(".json")]  # InferenceX passes NAME.json
    defaults = VllmResultOptions()
    return VllmResultOptions(
        result_dir=args.result_dir,
        filename=filename,
        detailed=args.save_detailed,
        percentile_metrics=args.percentile_metrics or defaults.percentile_metrics,
        metric_percentiles=args.metric_percentiles or defaults.metric_percentiles,
        label=args.label,
        metadata=tuple(args.metadata or ()),
        model_id=args.model_id,
        tokenizer_id=args.tokenizer or args.model_id,
        backend=args.backend or "vllm",
    )


def _ignored(args: argparse.Namespace) -> tuple[str, ...]:
    notes = []
    if args.trust_remote_code:
        notes.append("--trust-remote-code is accepted and ignored: loadgen runs no model code")
    if args.tokenizer_mode is not None:
        notes.append(
            f"--tokenizer-mode {args.tokenizer_mode} is accepted and ignored: loadgen "
            "counts tokens with HF `tokenizers` (--tokenizer)"
        )
    if args.sim and (args.host is not None or args.port is not None):
        notes.append("--host/--port are ignored with --sim: the simulator gets a free port")
    if args.label is not None and not (args.save_result or args.result_filename):
        notes.append("--label is ignored without --save-result")
    if args.metadata and not (args.save_result or args.result_filename):
        notes.append("--metadata is ignored without --save-result")
    return tuple(notes)
