"""The `loadgen sim` flags, in groups: the engine's step-time model and scheduling,
the output stream, the faults and the power model (each default from SimConfig)."""

from __future__ import annotations

import argparse

from loadgen.sim.config import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_LATER_ACCEPTANCE,
    DIALECT_NAMES,
    REJECTABLE_PARAMS,
    SPEC_DECODE_LEVELS,
    FaultConfig,
    SimConfig,
)
from loadgen.sim.power import PowerConfig
from loadgen.sim.thinking import REASONING_PARSERS

# `loadgen sim` is a process of its own: it may spin before a step (SimConfig.spin_us).
CLI_SPIN_US = 1000.0


def _acceptance(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--acceptance wants comma-separated probabilities like 0.8,0.6, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("--acceptance needs at least one probability")
    return values


def _reasoning_lengths(text: str) -> tuple[tuple[str, int], ...]:
    pairs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        effort, _, mean = part.partition("=")
        if effort not in ("low", "high", "max") or not mean.isdigit() or int(mean) < 1:
            raise argparse.ArgumentTypeError(
                f"--reasoning-lengths wants EFFORT=MEAN pairs like high=256,max=1024 "
                f"(efforts low, high, max; means >= 1), got {part!r}"
            )
        pairs.append((effort, int(mean)))
    return tuple(pairs)


def _reasoning_al(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value >= 1.0:
        raise argparse.ArgumentTypeError(
            f"--reasoning-acceptance-length wants a mean acceptance length >= 1, got {text!r}"
        )
    return value


def thinking_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    p.add_argument(
        "--reasoning-parser",
        choices=REASONING_PARSERS,
        default=d.reasoning_parser,
        help="as vLLM's: chat streams a thinking request's reasoning under the engine's "
        "field (vLLM `reasoning`, SGLang `reasoning_content`), the answer as content; "
        "without it the reasoning and </think> stream as content",
    )
    p.add_argument(
        "--reasoning-lengths",
        type=_reasoning_lengths,
        default=d.reasoning_lengths,
        metavar="EFFORT=MEAN,...",
        help="mean reasoning tokens before </think> per effort (geometric draws from the "
        "request's seed); a thinking request without an effort thinks at high "
        "(default: " + ",".join(f"{e}={m}" for e, m in d.reasoning_lengths) + ")",
    )
    p.add_argument(
        "--reasoning-acceptance-length",
        type=_reasoning_al,
        default=None,
        metavar="AL",
        help="the reasoning phase's mean acceptance length (vLLM's synthetic schedule at "
        "the run's K); default: the answer's acceptance",
    )


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def engine_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    _step_flags(p, d)
    _speculative_flags(p, d)
    _cache_and_metrics_flags(p, d)


def _step_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    """Scheduling limits and the step-time model."""
    p.add_argument(
        "--max-model-len",
        type=int,
        default=d.max_model_len,
        help="context length (prompt + max_tokens), reported by /v1/models",
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=d.max_num_seqs,
        help="most requests running at once (continuous batching)",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=d.max_num_batched_tokens,
        help="tokens computed per step (chunked prefill budget)",
    )
    p.add_argument(
        "--step-fixed-ms",
        type=float,
        default=d.step_fixed_ms,
        help="fixed cost of every engine step (weights read once)",
    )
    p.add_argument(
        "--decode-token-us",
        type=float,
        default=d.decode_token_us,
        help="cost per decode token computed (1, or K+1 with MTP, per request)",
    )
    p.add_argument(
        "--prefill-token-us",
        type=float,
        default=d.prefill_token_us,
        help="cost per prompt token computed in a prefill chunk",
    )
    p.add_argument(
        "--seq-us", type=float, default=d.seq_us, help="cost per scheduled sequence per step"
    )
    p.add_argument(
        "--data-parallel-size",
        type=int,
        default=d.data_parallel_size,
        help="engines behind the one frontend, each with its own step schedule and the "
        "limits above; requests go to the engine with the lowest waiting*4+running, as "
        "vLLM's internal DP load balancer (counts published every 100 ms)",
    )


def _speculative_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    p.add_argument(
        "--spec-tokens",
        type=int,
        default=None,
        help="MTP draft tokens per step K (0 disables speculative decoding; "
        f"default {d.spec_tokens}); shorthand for --speculative-config",
    )
    p.add_argument(
        "--acceptance",
        type=_acceptance,
        default=None,
        help="conditional acceptance probability per draft position "
        f"(default {','.join(map(str, DEFAULT_ACCEPTANCE))}, "
        f"{DEFAULT_LATER_ACCEPTANCE} for later positions)",
    )
    p.add_argument(
        "--speculative-config",
        default=None,
        metavar="JSON",
        help="vLLM's speculative config: method, num_speculative_tokens, "
        'rejection_sample_method ("synthetic" with synthetic_acceptance_length '
        "or unconditional synthetic_acceptance_rates, resolved as vLLM 0.32 "
        "does); replaces --spec-tokens/--acceptance",
    )


def _cache_and_metrics_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    """Step timer precision, the prefix cache and vLLM's per-request metrics."""
    p.add_argument(
        "--spin-us",
        type=float,
        default=CLI_SPIN_US,
        help="busy-wait this long before each step deadline (timer precision)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=d.enable_prefix_caching,
        help="automatic prefix caching as vLLM (on by default, as vLLM >= 0.8): "
        "hashed full blocks in an LRU pool; cached prompt tokens are not "
        "prefilled (vllm:prefix_cache_* counters count queried and hit tokens)",
    )
    p.add_argument(
        "--block-size",
        type=int,
        default=d.block_size,
        help="tokens per KV block (the prefix cache's unit)",
    )
    p.add_argument(
        "--prefix-cache-blocks",
        type=int,
        default=None,
        help="blocks the prefix-cache pool holds, least recently used evicted "
        "first (default: --kv-cache-tokens / --block-size)",
    )
    p.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="report usage.prompt_tokens_details.cached_tokens, as vLLM does with this flag",
    )
    p.add_argument(
        "--per-request-spec-decode-metrics",
        choices=SPEC_DECODE_LEVELS,
        default=d.per_request_spec_decode_metrics,
        help="each stream's final usage chunk carries metrics.speculative_decoding "
        "(acceptance histogram; detailed adds each step), as vLLM 0.32",
    )
    p.add_argument(
        "--enable-per-request-metrics",
        action="store_true",
        help="each stream's final usage chunk carries the request's queue time, "
        "TTFT from scheduling and generation time, as vLLM 0.32",
    )


def output_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    p.add_argument(
        "--engine",
        choices=DIALECT_NAMES,
        default=d.engine,
        help="the serving engine whose dialect to speak: /metrics names, types and path "
        "(TensorRT-LLM's /prometheus/metrics), SGLang's /get_server_info and sglext "
        "per-request acceptance, ATOM's /server_info (tests/fixtures/engines/)",
    )
    p.add_argument(
        "--stream-interval",
        type=int,
        default=d.stream_interval,
        help="engine steps merged into one streamed chunk",
    )
    p.add_argument(
        "--merge-steps-prob",
        type=float,
        default=d.merge_steps_prob,
        help="frontend lag model: chance that a request's step output is held "
        "and sent with its next step's event, as vLLM's frontend merges steps "
        "when it falls behind (first chunks may then carry >1 token); "
        "deterministic under --seed; the final step is never held",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help="server seed (request i without 'seed' uses seed + i)",
    )
    p.add_argument(
        "--eos-prob",
        type=float,
        default=d.eos_prob,
        help="chance per token, after min_tokens and without ignore_eos, of EOS",
    )
    p.add_argument(
        "--byte-fragment-fraction",
        type=float,
        default=d.byte_fragment_fraction,
        help="share of generated characters split over byte tokens",
    )
    _capacity_and_tokenizer_flags(p, d)


def _capacity_and_tokenizer_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    """The KV capacity reported, the tokenizer and its BOS, the request trace."""
    p.add_argument(
        "--kv-cache-tokens",
        type=int,
        default=d.kv_cache_tokens,
        help="KV capacity used for vllm:kv_cache_usage_perc (not enforced)",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        help="a DeepSeek-V4 tokenizer.json, model dir or Hugging Face Hub id "
        "(default: official DeepSeek-V4)",
    )
    p.add_argument(
        "--add-bos",
        action="store_true",
        help="prepend BOS id 0 when add_special_tokens is true (off: the "
        "DeepSeek-V4 tokenizer_config has add_bos_token=false)",
    )
    p.add_argument(
        "--trace",
        dest="trace_path",
        default=None,
        metavar="FILE",
        help="write one JSON line per request: chunk intended/sent ns and tokens",
    )
    p.add_argument(
        "--profiler-dir",
        default=None,
        metavar="DIR",
        help="serve vLLM's POST /start_profile and /stop_profile (as vLLM with "
        "--profiler-config): each window's engine steps and their requests' X-Request-Id "
        "are written to DIR as <prefix>_sim_engine.<ms>.trace.json (default: no profiler)",
    )
    p.add_argument(
        "--step-log",
        dest="step_log_path",
        default=None,
        metavar="FILE",
        help="write one JSON line per engine step: engine, start/end/sent ns, requests, "
        "decode and prefill tokens, the requests whose prefill finished (buffered; "
        "complete when the simulator stops)",
    )


def fault_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--answers",
        default=None,
        metavar="FILE",
        help="TEST AID, not engine behaviour: answer the GSM8K questions of FILE (JSONL, "
        "question/answer) with `#### N`, correct for exactly --answer-rate of them "
        "(chosen by --seed), so loadgen --accuracy has ground truth",
    )
    p.add_argument(
        "--answer-rate",
        type=float,
        default=1.0,
        metavar="FRACTION",
        help="with --answers: the fraction of FILE's questions answered correctly",
    )
    p.add_argument(
        "--fault-500",
        type=float,
        default=0.0,
        help="fraction of requests answered 500 before streaming",
    )
    p.add_argument(
        "--fault-abort",
        type=float,
        default=0.0,
        help="fraction of streams closed mid-stream (no [DONE])",
    )
    p.add_argument(
        "--fault-malformed",
        type=float,
        default=0.0,
        help="fraction of streams with one malformed (non-JSON) chunk",
    )
    p.add_argument(
        "--fault-stall",
        type=float,
        default=0.0,
        help="fraction of streams stalled mid-stream for --stall-seconds",
    )
    p.add_argument(
        "--fault-lossy-spec",
        type=float,
        default=0.0,
        metavar="P",
        help="a test aid, not engine behaviour: with probability P a decode step that "
        "accepted drafts emits a wrong token in place of its last accepted one (a "
        "broken draft path), so the output differs from the same request without "
        "speculation",
    )
    p.add_argument(
        "--stall-seconds",
        type=float,
        default=FaultConfig().stall_seconds,
        help="how long a --fault-stall stream pauses",
    )
    p.add_argument(
        "--max-waiting",
        type=int,
        default=None,
        help="answer 503 when this many requests are already waiting",
    )
    p.add_argument(
        "--reject-params",
        type=_names,
        default=(),
        metavar="NAMES",
        help="answer 400 to requests using these vLLM extensions, like a server "
        f"without them (comma-separated: {','.join(REJECTABLE_PARAMS)})",
    )


def power_flags(p: argparse.ArgumentParser, d: PowerConfig) -> None:
    p.add_argument(
        "--num-gpus",
        type=int,
        default=d.num_gpus,
        help="simulated GPUs on /gpu/metrics (dcgm-exporter format), each drawing "
        "the power model's watts",
    )
    p.add_argument(
        "--gpu-idle-watts",
        type=float,
        default=d.idle_watts,
        help="power model: watts each simulated GPU draws at all times",
    )
    p.add_argument(
        "--gpu-joules-per-token",
        type=float,
        default=d.joules_per_token,
        help="power model: joules per decode token computed, per GPU (with MTP "
        "K+1 per decoding request: verified drafts cost energy)",
    )
    p.add_argument(
        "--gpu-joules-per-prefill-token",
        type=float,
        default=d.joules_per_prefill_token,
        help="power model: joules per prompt token prefilled, per GPU",
    )
    p.add_argument(
        "--gpu-power-average",
        type=float,
        default=d.average_s,
        metavar="SECONDS",
        help="DCGM_FI_DEV_POWER_USAGE is the mean power over this many seconds "
        "before the scrape, as NVML averages (0: the instant's, one step's)",
    )


def _pd_ratio(text: str) -> tuple[int, int]:
    prefill, sep, decode = text.partition(":")
    try:
        if sep:
            return int(prefill), int(decode)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"--pd wants prefill engines:decode engines like 1:1 or 2:1, got {text!r}"
    )


def pd_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
    """--pd: a disaggregated deployment behind a Dynamo-like frontend (sim/pd.py)."""
    g = p.add_argument_group("prefill/decode disaggregation (Dynamo's metric names)")
    g.add_argument(
        "--pd",
        type=_pd_ratio,
        default=None,
        metavar="P:D",
        help="P prefill engines and D decode engines behind a frontend; the frontend's "
        "/metrics and each worker's /workers/{prefill,decode}-<i>/metrics speak Dynamo's names",
    )
    g.add_argument(
        "--kv-bandwidth-gbps",
        type=float,
        default=d.kv_bandwidth_gbps,
        help="the KV link's bandwidth in GB/s (10^9 bytes a second, not bits)",
    )
    g.add_argument(
        "--kv-bytes-per-token",
        type=int,
        default=d.kv_bytes_per_token,
        help="KV cache bytes of one prompt token (all layers)",
    )
    g.add_argument(
        "--kv-latency-ms",
        type=float,
        default=d.kv_latency_ms,
        help="fixed cost of one KV transfer, besides its bytes",
    )
    g.add_argument(
        "--frontend-ms",
        type=float,
        default=d.frontend_ms,
        help="the frontend's preprocessing beyond tokenizing, before it routes",
    )
