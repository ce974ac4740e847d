"""The `loadgen sim` argument parser and the SimConfig it builds from the flags."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from loadgen.sim.config import ConfigError, FaultConfig, SimConfig
from loadgen.sim.flags import (
    engine_flags,
    fault_flags,
    output_flags,
    pd_flags,
    power_flags,
    thinking_flags,
)
from loadgen.sim.power import PowerConfig
from loadgen.sim.speculative import (
    Speculative,
    acceptance_length_to_rates,
    conditional_rates,
    parse_speculative_config,
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so errors stay one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    d = SimConfig()
    p = _Parser(
        prog="loadgen sim",
        description="A vLLM 0.32-compatible OpenAI server with a batching-engine model "
        "(continuous batching, chunked prefill, MTP speculative decoding). No GPU needed.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Step time = step-fixed-ms + prompt tokens x prefill-token-us + decode tokens "
        "(1, or K+1 with MTP, per decoding request) x decode-token-us + sequences x seq-us. "
        "The defaults resemble a DeepSeek-V4-class deployment, scaled down in time: MTP "
        "(K=2, acceptance 0.8,0.6) gains ~75% per user at concurrency 4, breaks even near 60 "
        "and loses ~10% from 128 on; a concurrency-512 MTP decode step takes 126 ms. What a "
        "sweep costs (10 prompts + 2 warmup per conc): --isl 1024 --osl 256 over 4..64 about "
        "1.5 min, over 4..512 about 8 min; the headline --isl 8192 --osl 1024 over 4..512 "
        "about 45 min (conc 4 ~25 s, 128 ~5 min, 512 ~21 min: the KV cache holds 113 such "
        "requests, so output levels off near 5k tok/s). `loadgen --sim` prints its estimate "
        "per point before it starts; --step-fixed-ms, --decode-token-us and "
        "--prefill-token-us scale it.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind")
    p.add_argument("--port", type=int, default=8000, help="port to bind (0 = any free port)")
    p.add_argument("--model", default=d.model, help="served model name")
    p.add_argument(
        "--model-path",
        default=None,
        help="reported as /v1/models 'root', where vLLM puts the path it loaded "
        "the model from (default: /models/<--model>)",
    )
    engine_flags(p, d)
    output_flags(p, d)
    thinking_flags(p, d)
    fault_flags(p)
    power_flags(p, d.power)
    pd_flags(p, d)
    return p


def _speculative(args: argparse.Namespace) -> Speculative:
    """--speculative-config, or the --spec-tokens/--acceptance shorthands (never both)."""
    if args.speculative_config is None:
        k = args.spec_tokens if args.spec_tokens is not None else SimConfig().spec_tokens
        acceptance = args.acceptance if args.acceptance is not None else ()
        return Speculative("mtp", k, "standard", acceptance)
    if args.spec_tokens is not None or args.acceptance is not None:
        raise ConfigError("give --speculative-config or --spec-tokens/--acceptance, not both")
    return parse_speculative_config(args.speculative_config)


def server_dev_mode(env: Mapping[str, str]) -> bool:
    """VLLM_SERVER_DEV_MODE as vLLM reads it: an integer, on when not 0."""
    text = env.get("VLLM_SERVER_DEV_MODE", "0").strip() or "0"
    try:
        return bool(int(text))
    except ValueError:
        raise ConfigError(
            f"VLLM_SERVER_DEV_MODE={text!r}: 0 or 1 (an integer, as vLLM reads it)"
        ) from None


def _reasoning_acceptance(length: float | None, spec: Speculative) -> tuple[float, ...] | None:
    """--reasoning-acceptance-length: vLLM's synthetic schedule at the run's K, as the
    simulator draws it (conditional per position); None: the answer's acceptance."""
    if length is None:
        return None
    if spec.spec_tokens < 1:
        raise ConfigError("--reasoning-acceptance-length needs speculative decoding (K >= 1)")
    if length > spec.spec_tokens + 1:
        raise ConfigError(
            f"--reasoning-acceptance-length {length}: at most K+1 = {spec.spec_tokens + 1}"
        )
    return conditional_rates(acceptance_length_to_rates(length, spec.spec_tokens))


def config_from_args(args: argparse.Namespace) -> SimConfig:
    spec = _speculative(args)
    faults = FaultConfig(
        error_500=args.fault_500,
        abort=args.fault_abort,
        malformed=args.fault_malformed,
        stall=args.fault_stall,
        stall_seconds=args.stall_seconds,
        max_waiting=args.max_waiting,
        lossy_spec=args.fault_lossy_spec,
    )
    return SimConfig(
        model=args.model,
        model_path=args.model_path,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        step_fixed_ms=args.step_fixed_ms,
        decode_token_us=args.decode_token_us,
        prefill_token_us=args.prefill_token_us,
        seq_us=args.seq_us,
        spec_tokens=spec.spec_tokens,
        acceptance=spec.acceptance,
        spec_method=spec.method,
        rejection_sample_method=spec.rejection_sample_method,
        stream_interval=args.stream_interval,
        reasoning_parser=args.reasoning_parser,
        # the efforts not named keep their default means
        reasoning_lengths=tuple(
            {**dict(SimConfig().reasoning_lengths), **dict(args.reasoning_lengths)}.items()
        ),
        reasoning_acceptance=_reasoning_acceptance(args.reasoning_acceptance_length, spec),
        merge_steps_prob=args.merge_steps_prob,
        seed=args.seed,
        eos_prob=args.eos_prob,
        byte_fragment_fraction=args.byte_fragment_fraction,
        kv_cache_tokens=args.kv_cache_tokens,
        tokenizer=args.tokenizer,
        add_bos=args.add_bos,
        trace_path=args.trace_path,
        profiler_dir=args.profiler_dir,
        step_log_path=args.step_log_path,
        data_parallel_size=args.data_parallel_size,
        faults=faults,
        spin_us=args.spin_us,
        reject_params=args.reject_params,
        enable_prefix_caching=args.enable_prefix_caching,
        block_size=args.block_size,
        prefix_cache_blocks=args.prefix_cache_blocks,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        per_request_spec_decode_metrics=args.per_request_spec_decode_metrics,
        enable_per_request_metrics=args.enable_per_request_metrics,
        engine=args.engine,
        dev_mode=server_dev_mode(os.environ),
        answers=args.answers,
        answer_rate=args.answer_rate,
        pd=args.pd,
        kv_bandwidth_gbps=args.kv_bandwidth_gbps,
        kv_bytes_per_token=args.kv_bytes_per_token,
        kv_latency_ms=args.kv_latency_ms,
        frontend_ms=args.frontend_ms,
        power=PowerConfig(
            num_gpus=args.num_gpus,
            idle_watts=args.gpu_idle_watts,
            joules_per_token=args.gpu_joules_per_token,
            joules_per_prefill_token=args.gpu_joules_per_prefill_token,
            average_s=args.gpu_power_average,
        ),
    )
