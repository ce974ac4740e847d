"""RunSpec's parts, one per concern: the target, the workload, the load, the deadlines,
the scoring, the telemetry, the output, the processes and the sessions.

Frozen and unvalidated on their own: RunSpec checks them together on construction
(spec_checks.py), since many rules cross parts (a dataset excludes --turns, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from encoders import ENCODERS
from loadgen.config.golden import GoldenAL
from loadgen.config.load_args import stage_request_bound
from loadgen.config.objectives import Objective, Resolution

# Typed where the value set is fixed; the values are the strings the flags and files use.
Endpoint = Literal["completions", "chat"]
ThinkingMode = Literal["chat", "thinking"]
ReasoningEffort = Literal["low", "high", "max"]
# the client the results record: native, or bench/aiohttp_client.py's comparison client
# (the command line takes native only: target_flags.parse_http_client)
HttpClient = Literal["native", "aiohttp"]
DatasetFormat = Literal["auto", "sharegpt", "jsonl", "weka", "mooncake", "speed_bench"]
ENDPOINTS: tuple[str, ...] = ("completions", "chat")
ENCODER_NAMES: tuple[str, ...] = tuple(ENCODERS)
THINKING_MODES: tuple[str, ...] = ("chat", "thinking")
REASONING_EFFORTS: tuple[str, ...] = ("low", "high", "max")
HTTP_CLIENTS: tuple[str, ...] = ("native", "aiohttp")
# jsonl: OpenAI messages or vLLM custom {prompt} per line; weka, mooncake: traces replayed
# as sessions (docs/sessions.md). Detection and reading: config/dataset_format.py.
# speed_bench: NVIDIA SPEED-Bench, a directory of <subset>.jsonl (workload/datasets.py).
DATASET_FORMATS: tuple[str, ...] = ("auto", "sharegpt", "jsonl", "weka", "mooncake", "speed_bench")
TRACE_FORMATS: tuple[str, ...] = ("weka", "mooncake")
# Deadlines (no wait is unbounded): a non-streaming call (/v1/models, /tokenize, /version,
# /metrics) must answer within DEFAULT_HTTP_TIMEOUT_S; a streamed response that delivers
# no byte for DEFAULT_STREAM_IDLE_TIMEOUT_S (time to first byte included) is a timeout.
DEFAULT_HTTP_TIMEOUT_S = 30.0
DEFAULT_STREAM_IDLE_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class VllmResultOptions:
    """`--save-result`: also write each point as vLLM `bench serve --save-result` JSON."""

    result_dir: Path | None = None  # None: the run's results directory
    filename: str | None = None  # NAME of NAME.json / NAME_conc<N>.json; None: vLLM's name
    detailed: bool = False  # --save-detailed: the per-request lists
    # InferenceX's defaults (vLLM 0.32's are ttft,tpot,itl and 99): its dashboards read
    # p90/p99/p99.9 of TTFT, TPOT and E2EL.
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
    metric_percentiles: tuple[float, ...] = (90.0, 99.0, 99.9)
    label: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    model_id: str | None = None  # the model as the user named it (--model)
    tokenizer_id: str | None = None
    backend: str = "vllm"


@dataclass(frozen=True, slots=True)
class SpeedBenchOptions:
    """`--dataset-name speed_bench`: which file of the directory and which rows of it."""

    subset: str = "qualitative"  # reads <dataset>/<subset>.jsonl
    category: str | None = None  # None: every row


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """The server, its credentials and what goes on the wire besides the prompt."""

    base_url: str | None = None  # None only with sim=True (filled in when it starts)
    model: str | None = None  # None: the only model the server serves
    endpoint: Endpoint = "completions"
    api_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    tokenizer: str | None = None
    # Extra request-body fields (vLLM's `--extra-body`), e.g. {"min_p": 0.1}; never the
    # fields loadgen sets itself (EXTRA_BODY_RESERVED).
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    http_client: HttpClient = "native"  # the measured streams' client


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What each request asks: the prompts (synthetic or a dataset) and the sampling,
    which belongs here because it shapes the replies as much as the lengths do."""

    isl: int | None  # None only with a dataset: lengths come from the data
    osl: int | None  # None only with a dataset that carries output lengths (ShareGPT)
    encoder: str = "dsv4"  # one of encoders.ENCODERS (a registry, so not a Literal)
    thinking: ThinkingMode = "thinking"
    reasoning_effort: ReasoningEffort | None = None
    range_ratio: float = 1.0
    dataset: Path | None = None
    # auto: told apart by content (trace formats are resolved when the spec is built)
    dataset_format: DatasetFormat = "auto"
    sharegpt_limits: bool = False  # vLLM's ShareGPT length pruning (--dataset-name sharegpt)
    speed_bench: SpeedBenchOptions | None = None  # with dataset_format "speed_bench"
    temperature: float = 0.0
    top_p: float | None = None  # None: not sent (the server's default, 1.0 on vLLM)
    max_context_length: int | None = None


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How many requests, how fast, how often each point runs, and the capacity search."""

    conc: tuple[int, ...]
    prompts_per_conc: int = 10
    warmup_per_conc: int = 2
    num_prompts: int | None = None  # measured requests per point; None: conc x prompts_per_conc
    num_warmups: int | None = None  # warmup requests per point; None: conc x warmup_per_conc
    duration_s: float | None = None
    request_rate: float | None = None  # requests/s, open loop; None = closed loop
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    trials: int = 1  # --trials N: each point measured N times (run/trials.py)
    # --find-max conc|rate: the capacity search (run/capacity.py), its objectives (the
    # --slo percentile forms), when it stops, and --find-max rate's rates
    find_max: str | None = None
    objectives: tuple[Objective, ...] = ()
    find_max_resolution: Resolution | None = None
    rate_range: tuple[float, float] | None = None
    # Load shape (config/load_args.py): the over-saturation stop, time slices, ramp-up.
    saturation_stop: bool = True  # stop an open-loop point the server cannot keep up with
    saturation_window_s: float = 30.0
    slice_duration_s: float | None = None
    ramp_up_strategy: str | None = None  # linear | exponential (vllm bench serve's)
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    rate_stages: tuple[tuple[float, float], ...] = ()  # (req/s, seconds) one after another
    conc_stages: tuple[tuple[int, float], ...] = ()  # (in flight, seconds) one after another

    @property
    def open_loop(self) -> bool:
        """Arrivals on a schedule (a fixed rate or a ramp), not slots freeing up."""
        return (
            self.request_rate is not None
            or self.ramp_up_strategy is not None
            or bool(self.rate_stages)
        )

    @property
    def point_duration_s(self) -> float | None:
        """How long a point sends: --duration, or the rate or concurrency stages' sum."""
        if self.rate_stages or self.conc_stages:
            return math.fsum(seconds for _, seconds in self.rate_stages or self.conc_stages)
        return self.duration_s

    def measured_requests(self, conc: int) -> int:
        if self.rate_stages:
            return stage_request_bound(self.rate_stages, self.burstiness)
        return self.num_prompts if self.num_prompts is not None else conc * self.prompts_per_conc

    def warmup_requests(self, conc: int) -> int:
        return self.num_warmups if self.num_warmups is not None else conc * self.warmup_per_conc


@dataclass(frozen=True, slots=True)
class DeadlineSpec:
    """How long anything may take, and how many failures a point may have."""

    request_timeout_s: float | None = None
    http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S
    stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S
    max_error_rate: float = 0.05


@dataclass(frozen=True, slots=True)
class ScoringSpec:
    """What the figures are computed with and held to."""

    num_gpus: int | None = None
    spec_tokens: int | None = None
    golden_al: GoldenAL | None = None  # --golden-al: the curve each point is held to
    slos_ms: Mapping[str, float] = field(default_factory=dict)
    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
    # `loadgen profile --scenario ...` (config/aiperf_profile.py): the scenario whose
    # submission rules each point is checked against (metrics/submission.py)
    scenario: str | None = None
    unsafe_override: bool = False


@dataclass(frozen=True, slots=True)
class TelemetrySpec:
    """What is scraped beside the requests: server metrics, GPU exporters, power."""

    server_metrics: tuple[str, ...] = ()  # /metrics URLs scraped instead of the target's
    gpu_metrics: tuple[str, ...] = ()  # GPU exporters sampled during every point (energy)
    gpu_metrics_interval_s: float = 1.0
    gpu_power_csv: Path | None = None  # nvidia-smi/amd-smi telemetry recorded meanwhile
    series_interval_s: float = 1.0  # the server series of --aiperf-artifacts


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """Where the results go and in which extra formats; what stderr shows."""

    results_dir: Path | None = None  # None: ./results/<timestamp>
    progress: bool = True
    vllm_result: VllmResultOptions | None = None
    # AIPerf's three artifact files per point (sinks/aiperf_artifacts.py), for InferenceX's
    # agentic aggregation; the server series are scraped every series_interval_s meanwhile.
    aiperf_artifacts: Path | None = None
    resume: bool = False  # continue the interrupted sweep in results_dir
    overwrite: bool = False  # replace the earlier run's files in results_dir
    ignored_flags: tuple[str, ...] = ()  # accepted for compatibility, said once on stderr


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """The client's processes on this machine, its shard of a multi-machine run, and the
    server process it watches."""

    workers: int | None = 1  # client processes on this machine; None = auto (resolved at run)
    cpu_affinity: tuple[int, ...] = ()  # worker i runs on cpu_affinity[i % len]
    shard_index: int = 0  # this run sends shard `shard_index` of `shard_count` of each point
    shard_count: int = 1
    shard_sync: Path | None = None  # a directory all shards share: start points together
    server_pid: int | None = None  # stop the sweep when this process dies or stays stopped


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """Sessions (multi-turn, trace replay): docs/sessions.md."""

    multi_turn: bool = False  # a messages/ShareGPT dataset as one session per conversation
    turns: str | None = None  # synthetic sessions: turns per session (a distribution)
    turn_tokens: str = "256"  # new user tokens per later turn
    think_time: str = "0"  # seconds between a reply and the next turn
    sessions_per_conc: int = 2  # synthetic sessions per point = conc x this
    session_headers: tuple[str, ...] = ("X-Session-ID",)
    start_ratio: tuple[float, float] | None = None  # None: (0.25, 0.75) for Weka traces
    idle_cap_system_s: float | None = 10.0
    idle_cap_tree_s: float | None = 300.0
    cache_bust: bool = True
    live_history: bool = False  # history assistant turns: the server's replies


class SpecParts(Protocol):
    """What the checks read of a run: its parts (RunSpec is one). The checks type against
    this, not RunSpec, so RunSpec can call them on construction without a circle."""

    @property
    def load(self) -> LoadSpec: ...
    @property
    def workload(self) -> WorkloadSpec: ...
    @property
    def target(self) -> TargetSpec: ...
    @property
    def deadlines(self) -> DeadlineSpec: ...
    @property
    def scoring(self) -> ScoringSpec: ...
    @property
    def telemetry(self) -> TelemetrySpec: ...
    @property
    def output(self) -> OutputSpec: ...
    @property
    def processes(self) -> ProcessSpec: ...
    @property
    def session(self) -> SessionSpec: ...
    @property
    def seed(self) -> int: ...
    @property
    def sim(self) -> bool: ...
    @property
    def sim_args(self) -> tuple[str, ...]: ...
    @property
    def sessions(self) -> bool: ...
