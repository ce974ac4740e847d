"""Run option values (dest -> value, as argparse gives them) -> a validated RunSpec: the
one function argv, sweep-file lanes and the sidecar's options all end in."""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.config.compat import apply_compat
from loadgen.config.golden import golden_fields
from loadgen.config.load_args import load_fields, stages_conc
from loadgen.config.objectives import find_max_fields
from loadgen.config.parsers import SpecError, check_api_key
from loadgen.config.session_args import dataset_format, session_fields
from loadgen.config.spec import RunSpec
from loadgen.config.table import run_defaults
from loadgen.config.target_flags import parse_http_client


def default_results_dir(now: float | None = None) -> Path:
    """./results/<timestamp>, with -2, -3, ... when a run started in the same second."""
    base = Path("results") / time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def spec_from_values(values: Mapping[str, Any], env: Mapping[str, str]) -> RunSpec:
    """The run the values describe; options not among them take their defaults."""
    return _spec(argparse.Namespace(**{**run_defaults(), **values}), env)


def _spec(args: argparse.Namespace, env: Mapping[str, str]) -> RunSpec:
    compat = apply_compat(args)
    args.conc = stages_conc(args)
    if args.conc is None:
        raise SpecError("--conc is required (or --max-concurrency), e.g. --conc 4..512")
    if args.sim and args.base_url:
        raise SpecError("--sim and --base-url exclude each other: --sim measures the simulator")
    try:
        sim_args = tuple(shlex.split(args.sim_args))
    except ValueError as exc:
        raise SpecError(f"--sim-args {args.sim_args!r}: {exc}") from None
    taken = [a for a in sim_args if a.split("=")[0] in ("--host", "--port")]
    if taken:
        raise SpecError(f"--sim-args: {taken[0]} is chosen by loadgen (a free loopback port)")
    if args.sim and args.model and not any(a.split("=")[0] == "--model" for a in sim_args):
        sim_args = ("--model", args.model, *sim_args)  # the simulator serves the name asked for
    if args.resume is not None and args.results is not None and args.results != args.resume:
        raise SpecError(
            f"--resume {args.resume} continues the run in that directory; "
            f"drop --results {args.results}"
        )
    results = args.resume or args.results or default_results_dir()
    fmt = dataset_format(args, compat.pop("dataset_format"))
    return RunSpec.flat(
        conc=args.conc,
        base_url=args.base_url,
        model=args.model,
        endpoint=args.endpoint or "completions",
        encoder=args.encoder or "dsv4",
        thinking=args.thinking or "thinking",
        reasoning_effort=args.reasoning_effort,
        prompts_per_conc=args.prompts_per_conc,
        warmup_per_conc=args.warmup_per_conc,
        duration_s=args.duration,
        range_ratio=1.0 if args.range_ratio is None else args.range_ratio,
        dataset=args.dataset,
        request_rate=args.request_rate,
        burstiness=args.burstiness,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        num_gpus=args.num_gpus,
        spec_tokens=args.spec_tokens,
        **find_max_fields(args),
        request_timeout_s=args.request_timeout,
        http_timeout_s=args.http_timeout,
        stream_idle_timeout_s=args.stream_idle_timeout,
        results_dir=results,
        tokenizer=args.tokenizer,
        api_key=_api_key(args.api_key or env.get("OPENAI_API_KEY")),
        headers=tuple(args.header),
        sim=args.sim,
        sim_args=sim_args,
        progress=not args.no_progress,
        server_metrics=tuple(args.server_metrics),
        gpu_metrics=tuple(args.gpu_metrics),
        gpu_metrics_interval_s=args.gpu_metrics_interval,
        gpu_power_csv=args.gpu_power_csv,
        extra_body=args.extra_body,
        workers=args.workers,
        cpu_affinity=tuple(args.cpu_affinity),
        shard_index=args.shard[0],
        shard_count=args.shard[1],
        shard_sync=args.shard_sync,
        server_pid=args.server_pid,
        trials=args.trials,
        resume=args.resume is not None,
        overwrite=args.overwrite,
        http_client=parse_http_client(args.http_client),
        aiperf_artifacts=args.aiperf_artifacts,
        **compat,
        **session_fields(args, fmt),
        **golden_fields(args, args.thinking or "thinking", args.spec_tokens),
        **load_fields(args),
    )


def _api_key(key: str | None) -> str | None:
    """Surrounding whitespace stripped (a secret file's newline); empty means none."""
    if key is None:
        return None
    return check_api_key(key) or None
