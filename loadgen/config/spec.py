"""What a run is asked to do: `RunSpec`, frozen and validated (flag parsers: parsers.py).

Every value that reaches the engine has passed through here, whether it came from argv or
from the sidecar's JSON options, so both paths reject bad input with the same message.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from encoders import ENCODERS
from loadgen.config.golden import GoldenAL
from loadgen.config.load_args import check_load_shape, stage_request_bound
from loadgen.config.objectives import Objective, Resolution, find_max_problem
from loadgen.config.parsers import (
    CONTROL_CHARS,
    MAX_CONC,
    MAX_WORKERS,
    SLO_METRICS,
    check_extra_body,
    parse_header,
)
from loadgen.config.parsers import SpecError as SpecError  # raised by RunSpec; re-exported
from loadgen.config.redact import url_has_credentials

Endpoint = Literal["completions", "chat"]
ENDPOINTS: tuple[str, ...] = ("completions", "chat")
ENCODER_NAMES: tuple[str, ...] = tuple(ENCODERS)
THINKING_MODES: tuple[str, ...] = ("chat", "thinking")
REASONING_EFFORTS: tuple[str, ...] = ("low", "high", "max")
# jsonl: OpenAI messages or vLLM custom {prompt} per line; weka, mooncake: traces replayed
# as sessions (docs/sessions.md). Detection and reading: config/dataset_format.py.
# speed_bench: NVIDIA SPEED-Bench, a directory of <subset>.jsonl (workload/datasets.py).
DATASET_FORMATS: tuple[str, ...] = ("auto", "sharegpt", "jsonl", "weka", "mooncake", "speed_bench")
TRACE_FORMATS: tuple[str, ...] = ("weka", "mooncake")
# vLLM `--percentile-metrics` names loadgen can report (client_queue_time = queue_time).
VLLM_PERCENTILE_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el", "client_queue_time")
# Deadlines (no wait is unbounded): a non-streaming call (/v1/models, /tokenize, /version,
# /metrics) must answer within DEFAULT_HTTP_TIMEOUT_S; a streamed response that delivers
# no byte for DEFAULT_STREAM_IDLE_TIMEOUT_S (time to first byte included) is a timeout.
DEFAULT_HTTP_TIMEOUT_S = 30.0
DEFAULT_STREAM_IDLE_TIMEOUT_S = 300.0
MAX_TRIALS = 100
MAX_SEED = 2**63 - 1  # numpy's SeedSequence takes any such int, vLLM's request seed an int64
# A dataset is read into memory whole, and each conversation is tokenized in one piece
# (~1.4 s and ~130 MB of RSS per MB of text): bound both before reading a byte of it.
MAX_DATASET_BYTES = 1 << 30  # 1 GiB
MAX_CONVERSATION_BYTES = 4 << 20  # 4 MiB per line: ~1M tokens of text, above any context


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
class RunSpec:
    """One benchmark run: a sweep of concurrency points against one server."""

    conc: tuple[int, ...]
    isl: int | None  # None only with a dataset: lengths come from the data
    osl: int | None  # None only with a dataset that carries output lengths (ShareGPT)
    base_url: str | None = None  # None only with sim=True (filled in when it starts)
    model: str | None = None  # None: the only model the server serves
    endpoint: Endpoint = "completions"
    encoder: str = "dsv4"
    thinking: str = "thinking"
    reasoning_effort: str | None = None
    prompts_per_conc: int = 10
    warmup_per_conc: int = 2
    num_prompts: int | None = None  # measured requests per point; None: conc x prompts_per_conc
    num_warmups: int | None = None  # warmup requests per point; None: conc x warmup_per_conc
    duration_s: float | None = None
    range_ratio: float = 1.0
    dataset: Path | None = None
    # auto: told apart by content (trace formats are resolved when the spec is built)
    dataset_format: str = "auto"
    sharegpt_limits: bool = False  # vLLM's ShareGPT length pruning (--dataset-name sharegpt)
    speed_bench: SpeedBenchOptions | None = None  # with dataset_format "speed_bench"
    request_rate: float | None = None  # requests/s, open loop; None = closed loop
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    temperature: float = 0.0
    top_p: float | None = None  # None: not sent (the server's default, 1.0 on vLLM)
    seed: int = 0
    num_gpus: int | None = None
    spec_tokens: int | None = None
    golden_al: GoldenAL | None = None  # --golden-al: the curve each point is held to
    slos_ms: Mapping[str, float] = field(default_factory=dict)
    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
    request_timeout_s: float | None = None
    http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S
    stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S
    max_error_rate: float = 0.05
    results_dir: Path | None = None  # None: ./results/<timestamp>
    tokenizer: str | None = None
    api_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    sim: bool = False
    sim_args: tuple[str, ...] = ()
    progress: bool = True
    server_metrics: tuple[str, ...] = ()  # /metrics URLs scraped instead of the target's
    gpu_metrics: tuple[str, ...] = ()  # GPU exporters sampled during every point (energy)
    gpu_metrics_interval_s: float = 1.0
    gpu_power_csv: Path | None = None  # nvidia-smi/amd-smi telemetry recorded meanwhile
    vllm_result: VllmResultOptions | None = None
    ignored_flags: tuple[str, ...] = ()  # accepted for compatibility, said once on stderr
    # Extra request-body fields (vLLM's `--extra-body`), e.g. {"min_p": 0.1}; never the
    # fields loadgen sets itself (EXTRA_BODY_RESERVED).
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    workers: int | None = 1  # client processes on this machine; None = auto (resolved at run)
    cpu_affinity: tuple[int, ...] = ()  # worker i runs on cpu_affinity[i % len]
    shard_index: int = 0  # this run sends shard `shard_index` of `shard_count` of each point
    shard_count: int = 1
    shard_sync: Path | None = None  # a directory all shards share: start points together
    server_pid: int | None = None  # stop the sweep when this process dies or stays stopped
    trials: int = 1  # --trials N: each point measured N times (run/trials.py)
    # --find-max conc|rate: the capacity search (run/capacity.py), its objectives (the
    # --slo percentile forms), when it stops, and --find-max rate's rates
    find_max: str | None = None
    objectives: tuple[Objective, ...] = ()
    find_max_resolution: Resolution | None = None
    rate_range: tuple[float, float] | None = None
    resume: bool = False  # continue the interrupted sweep in results_dir
    overwrite: bool = False  # replace the earlier run's files in results_dir
    # The client of the measured streams, as the results record it: always loadgen's
    # native one from the CLI; bench/ names its comparison client here (run/backend.py).
    http_client: str = "native"
    # Load shape (config/load_args.py): the over-saturation stop, time slices, ramp-up.
    saturation_stop: bool = True  # stop an open-loop point the server cannot keep up with
    saturation_window_s: float = 30.0
    slice_duration_s: float | None = None
    ramp_up_strategy: str | None = None  # linear | exponential (vllm bench serve's)
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    rate_stages: tuple[tuple[float, float], ...] = ()  # (req/s, seconds) one after another
    # Sessions (multi-turn, trace replay): docs/sessions.md.
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
    # AIPerf's three artifact files per point (sinks/aiperf_artifacts.py), for InferenceX's
    # agentic aggregation; the server series are scraped every series_interval_s meanwhile.
    aiperf_artifacts: Path | None = None
    series_interval_s: float = 1.0
    # `loadgen profile --scenario ...` (config/aiperf_profile.py): the scenario whose
    # submission rules each point is checked against (metrics/submission.py)
    scenario: str | None = None
    unsafe_override: bool = False
    max_context_length: int | None = None

    @property
    def sessions(self) -> bool:
        """A session run: synthetic multi-turn, a multi-turn dataset or a trace replay."""
        return self.turns is not None or self.multi_turn or self.dataset_format in TRACE_FORMATS

    def __post_init__(self) -> None:
        validate(self)

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
        """How long a point sends: --duration, or the rate stages' sum."""
        if self.rate_stages:
            return math.fsum(seconds for _, seconds in self.rate_stages)
        return self.duration_s

    def measured_requests(self, conc: int) -> int:
        if self.rate_stages:
            return stage_request_bound(self.rate_stages, self.burstiness)
        return self.num_prompts if self.num_prompts is not None else conc * self.prompts_per_conc

    def warmup_requests(self, conc: int) -> int:
        return self.num_warmups if self.num_warmups is not None else conc * self.warmup_per_conc


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def validate(spec: RunSpec) -> None:
    """Raise SpecError for the first invalid setting (RunSpec calls this on construction)."""
    _check_finite(spec)
    _check(
        bool(spec.conc) and all(1 <= c <= MAX_CONC for c in spec.conc),
        f"--conc: every concurrency must be in 1..{MAX_CONC}",
    )
    _validate_workload(spec)
    _validate_target(spec)
    _validate_prompts(spec)
    _validate_load(spec)
    check_load_shape(spec)
    _validate_processes(spec)
    _validate_run_level(spec)
    _validate_sessions(spec)
    _validate_find_max(spec)
    if spec.vllm_result is not None:
        _validate_vllm_result(spec.vllm_result)
    _check(spec.series_interval_s > 0, "--slice-duration: must be > 0 seconds")
    _check(
        spec.max_context_length is None or spec.max_context_length >= 1,
        "--max-context-length: must be >= 1 token",
    )


def _validate_workload(spec: RunSpec) -> None:
    _check(
        spec.isl is not None or spec.dataset is not None,
        "--isl is required (or --dataset, whose prompts give the input lengths)",
    )
    _check(
        spec.osl is not None or spec.dataset is not None,
        "--osl is required (or a ShareGPT --dataset, whose answers give the output lengths)",
    )
    _check(spec.isl is None or spec.isl >= 1, f"--isl {spec.isl}: must be >= 1 token")
    _check(spec.osl is None or spec.osl >= 1, f"--osl {spec.osl}: must be >= 1 token")
    _check(spec.num_prompts is None or spec.num_prompts >= 1, "--num-prompts: must be >= 1")
    _check(spec.num_warmups is None or spec.num_warmups >= 0, "--num-warmups: must be >= 0")
    _check(
        spec.dataset_format in DATASET_FORMATS,
        f"dataset format {spec.dataset_format!r}: allowed: {', '.join(DATASET_FORMATS)}",
    )
    if spec.dataset is not None:
        _check(
            spec.dataset.is_file()
            or (spec.dataset.is_dir() and spec.dataset_format in ("weka", "auto", "speed_bench")),
            f"--dataset {spec.dataset}: no such file",
        )
    _check(
        (spec.dataset_format == "speed_bench") == (spec.speed_bench is not None),
        "dataset format speed_bench goes with its options (--dataset-name speed_bench)",
    )
    _check(
        spec.speed_bench is None or not (spec.multi_turn or spec.turns is not None),
        "--dataset-name speed_bench sends single prompts: drop --multi-turn / --turns",
    )


def _validate_target(spec: RunSpec) -> None:
    """The server, its credentials and what goes on the wire besides the prompt."""
    _check(spec.sim or bool(spec.base_url), "--base-url is required (or use --sim)")
    if spec.base_url:
        _check(
            spec.base_url.startswith(("http://", "https://")),
            f"--base-url {spec.base_url!r}: must start with http:// or https://",
        )
        # aiohttp refuses both at the first request (a traceback, not a line): say it here
        _check(
            not url_has_credentials(spec.base_url)
            or not (
                spec.api_key or any(name.lower() == "authorization" for name, _ in spec.headers)
            ),
            "--base-url carries credentials (user:password@, sent as Basic auth) and "
            "--api-key, $OPENAI_API_KEY or --header Authorization sets Authorization "
            "too: keep one",
        )
    check_extra_body(spec.extra_body)
    _check(
        spec.top_p is None or "top_p" not in spec.extra_body,
        "--top-p and --extra-body '{\"top_p\": ...}': give one",
    )
    for name, value in spec.headers:  # argv went through parse_header; RunSpec(...) may not
        parse_header(f"{name}:{value}")
    if spec.api_key is not None:
        _check(
            not CONTROL_CHARS.search(spec.api_key),
            "--api-key / OPENAI_API_KEY contains a control character (CR, LF, ...)",
        )
    for url in spec.server_metrics:
        _check(
            url.startswith(("http://", "https://")),
            f"--server-metrics {url!r}: must start with http:// or https://",
        )
    for url in spec.gpu_metrics:
        _check(
            url.startswith(("http://", "https://")) or (url == "sim" and spec.sim),
            f"--gpu-metrics {url!r}: must start with http:// or https:// (or be `sim`, "
            "with --sim: the embedded simulator's /gpu/metrics)",
        )
    _check(
        0 < spec.gpu_metrics_interval_s <= 3.0,
        f"--gpu-metrics-interval {spec.gpu_metrics_interval_s:g}: must be in (0, 3] "
        "seconds (samples more than 3 s apart make a point's energy invalid)",
    )


def _validate_prompts(spec: RunSpec) -> None:
    _check(spec.endpoint in ENDPOINTS, f"--endpoint {spec.endpoint!r}: allowed: completions, chat")
    _check(
        spec.encoder in ENCODER_NAMES,
        f"--encoder {spec.encoder!r}: allowed: {', '.join(ENCODER_NAMES)}",
    )
    _check(
        spec.thinking in THINKING_MODES, f"--thinking {spec.thinking!r}: allowed: chat, thinking"
    )
    _check(
        spec.reasoning_effort is None or spec.reasoning_effort in REASONING_EFFORTS,
        f"--reasoning-effort {spec.reasoning_effort!r}: allowed: low, high, max",
    )


def _validate_load(spec: RunSpec) -> None:
    """How many requests, how fast, and what the figures are checked against."""
    _check(spec.prompts_per_conc >= 1, "--prompts-per-conc: must be >= 1")
    _check(spec.warmup_per_conc >= 0, "--warmup-per-conc: must be >= 0")
    _check(spec.duration_s is None or spec.duration_s > 0, "--duration: must be > 0 seconds")
    _check(0.0 <= spec.range_ratio <= 1.0, f"--range-ratio {spec.range_ratio}: must be in [0, 1]")
    _check(
        spec.request_rate is None or spec.request_rate > 0,
        "--request-rate: must be > 0 requests/s (omit it for a closed loop)",
    )
    _check(spec.burstiness > 0, "--burstiness: the gamma shape must be > 0 (1 = Poisson)")
    _check(spec.temperature >= 0, "--temperature: must be >= 0")
    _check(spec.top_p is None or 0 < spec.top_p <= 1, f"--top-p {spec.top_p}: must be in (0, 1]")
    _check(spec.num_gpus is None or spec.num_gpus >= 1, "--num-gpus: must be >= 1")
    _check(spec.spec_tokens is None or spec.spec_tokens >= 1, "--spec-tokens: must be >= 1")
    _check(
        all(k in SLO_METRICS and v > 0 for k, v in spec.slos_ms.items()),
        f"--slo: metrics must be among {', '.join(SLO_METRICS)} with positive limits",
    )
    _check(
        bool(spec.percentiles) and all(0 < p < 100 for p in spec.percentiles),
        "--percentiles: each must be strictly between 0 and 100",
    )
    _check(
        spec.request_timeout_s is None or spec.request_timeout_s > 0,
        "--request-timeout: must be > 0 seconds",
    )
    _check(spec.http_timeout_s > 0, "--http-timeout: must be > 0 seconds")
    _check(spec.stream_idle_timeout_s > 0, "--stream-idle-timeout: must be > 0 seconds")
    _check(0.0 <= spec.max_error_rate <= 1.0, "--max-error-rate: must be in [0, 1]")


def _validate_processes(spec: RunSpec) -> None:
    _check(
        spec.workers is None or 1 <= spec.workers <= MAX_WORKERS,
        f"--workers: must be in 1..{MAX_WORKERS} (or auto)",
    )
    _check(
        0 <= spec.shard_index < spec.shard_count,
        f"--shard {spec.shard_index}/{spec.shard_count}: need 0 <= I < N",
    )
    _check(
        spec.shard_sync is None or spec.shard_count > 1,
        "--shard-sync lines up the shards of a --shard I/N run: use it with --shard",
    )
    _check(1 <= spec.trials <= MAX_TRIALS, f"--trials {spec.trials}: must be in 1..{MAX_TRIALS}")
    # A shard's trials would be pooled before `loadgen merge` sees them, and a session
    # point's figures are per session: neither is pooled over trials (yet).
    _check(
        spec.trials == 1 or spec.shard_count == 1,
        "--trials with --shard: not supported; run the trials as separate sharded runs",
    )
    _check(
        spec.trials == 1 or not spec.sessions,
        "--trials with a session run (--turns, multi-turn or trace datasets): not "
        "supported; run it N times with different --seed",
    )
    _check(
        not spec.cpu_affinity or spec.workers != 1,
        "--cpu-affinity pins worker processes: use it with --workers 2 or more (or "
        "auto), or start a single process under taskset",
    )


def _validate_find_max(spec: RunSpec) -> None:
    if spec.find_max is None:
        return
    problem = find_max_problem(
        spec.find_max,
        spec.objectives,
        spec.conc,
        spec.rate_range,
        spec.request_rate,
        spec.percentiles,
    )
    _check(problem is None, problem or "")
    _check(
        not spec.sessions and spec.shard_count == 1, "--find-max: not with session runs or --shard"
    )


def _validate_vllm_result(options: VllmResultOptions) -> None:
    unknown = [m for m in options.percentile_metrics if m not in VLLM_PERCENTILE_METRICS]
    _check(
        bool(options.percentile_metrics) and not unknown,
        f"--percentile-metrics: {','.join(unknown) or '(none)'} not reported; allowed: "
        f"{', '.join(VLLM_PERCENTILE_METRICS)}",
    )
    _check(
        bool(options.metric_percentiles) and all(0 < p < 100 for p in options.metric_percentiles),
        "--metric-percentiles: each must be strictly between 0 and 100",
    )
    if options.filename is not None:
        _check(
            bool(options.filename) and "/" not in options.filename and "\0" not in options.filename,
            f"--result-filename {options.filename!r}: a file name, not a path "
            "(use --result-dir for the directory)",
        )
    if options.label is not None:
        # The label starts vLLM's file name: a `/` in it would put the file elsewhere.
        _check(
            "/" not in options.label and "\0" not in options.label,
            f"--label {options.label!r}: a label, not a path: no `/` in it (use "
            "--result-dir for the directory)",
        )


# Flags whose value is a float, with the name the user typed: each must be a finite number
# (`inf` would overflow a deadline or turn arrival gaps into NaN; `nan` passes every `>`).
_FLOAT_FLAGS = (
    ("duration_s", "--duration"),
    ("request_rate", "--request-rate"),
    ("burstiness", "--burstiness"),
    ("temperature", "--temperature"),
    ("top_p", "--top-p"),
    ("range_ratio", "--range-ratio"),
    ("request_timeout_s", "--request-timeout"),
    ("http_timeout_s", "--http-timeout"),
    ("stream_idle_timeout_s", "--stream-idle-timeout"),
    ("max_error_rate", "--max-error-rate"),
)


def _check_finite(spec: RunSpec) -> None:
    for name, flag in _FLOAT_FLAGS:
        value = getattr(spec, name)
        _check(value is None or math.isfinite(value), f"{flag} {value}: must be a finite number")
    _check(
        all(math.isfinite(v) for v in spec.slos_ms.values()),
        "--slo: each limit must be a finite duration",
    )


def _validate_run_level(spec: RunSpec) -> None:
    """A seed numpy and vLLM accept, a results directory that can be written, a dataset
    that fits in memory, a server process that exists."""
    _check(0 <= spec.seed <= MAX_SEED, f"--seed {spec.seed}: must be in 0..{MAX_SEED} (2^63-1)")
    _check(
        not (spec.resume and spec.overwrite),
        "--resume and --overwrite exclude each other: continue the run, or replace it",
    )
    if spec.results_dir is not None:
        check_results_dir(spec.results_dir)
    if spec.dataset is not None and spec.dataset.is_file():
        size = spec.dataset.stat().st_size
        _check(
            size <= MAX_DATASET_BYTES,
            f"--dataset {spec.dataset}: {size / 2**20:,.0f} MiB is over the "
            f"{MAX_DATASET_BYTES >> 30} GiB limit (the file is read into memory); "
            "split it or keep only the conversations you need",
        )
    if spec.server_pid is not None:
        _check(
            spec.server_pid > 0 and _process_exists(spec.server_pid),
            f"--server-pid {spec.server_pid}: no such process on this machine",
        )


def check_results_dir(path: Path) -> None:
    """`path` is a directory, or can be made one, that this process may write into.

    No side effect: the nearest existing ancestor decides. access(2) answers EROFS for a
    read-only mount even to root, so this holds inside containers too.
    """
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == path else f"is under {existing}, which is a file"
        raise SpecError(f"--results {path}: {what}; give a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" ({existing} is where it would be created)"
        raise SpecError(
            f"--results {path}: not writable{where}: read-only or no permission; "
            "give a directory you can write"
        )


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else: /proc still shows its state
    except OverflowError:
        return False
    return True


def _validate_sessions(spec: RunSpec) -> None:
    _check(spec.sessions_per_conc >= 1, "--sessions-per-conc: must be >= 1")
    _check(
        not spec.multi_turn or spec.dataset is not None,
        "--multi-turn plays a --dataset's conversations: give --dataset (or --turns N "
        "for synthetic sessions)",
    )
    _check(
        not spec.multi_turn or spec.osl is not None,
        "--multi-turn: --osl is required (the max_tokens of each turn)",
    )
    _check(
        not spec.live_history or spec.dataset_format not in TRACE_FORMATS,
        "--live-history: trace replay rebuilds each prompt from the trace's `in` and "
        "hash_ids, which a reply cannot change; use it with --turns or --multi-turn",
    )
    _check(
        not spec.live_history or spec.sessions,
        "--live-history puts the server's replies into the history of a session: use "
        "it with --turns N or --multi-turn",
    )
    _check(
        spec.turns is None or spec.dataset is None,
        "--turns makes synthetic sessions; it excludes --dataset (use --multi-turn)",
    )
    if spec.start_ratio is not None:
        low, high = spec.start_ratio
        _check(0.0 <= low <= high < 1.0, "--start-ratio LO,HI: need 0 <= LO <= HI < 1")
    for flag, cap in (
        ("--idle-cap-system", spec.idle_cap_system_s),
        ("--idle-cap-tree", spec.idle_cap_tree_s),
    ):
        _check(cap is None or cap > 0, f"{flag}: must be > 0 seconds (0 = no cap: omit it)")
    _check(
        all(name and not any(c in name for c in " :\t\r\n") for name in spec.session_headers),
        "--session-header: a header name without spaces or colons, e.g. X-Session-ID",
    )
    # Session runs on workers: each plays whole lanes (a tree and its subagents in one
    # process: run/sessions.py). Refused where a play's figures would depend on plays in
    # other processes: Mooncake's one hash scope per point, plays without their own
    # cache-bust marker. Shards (other machines) are refused for session runs.
    _check(
        not spec.sessions or spec.shard_count == 1,
        "--shard does not support session runs (--turns, --multi-turn, trace replay): "
        "run them on one machine (--workers N splits their lanes over processes)",
    )
    if spec.sessions and spec.workers is not None and spec.workers > 1:
        _check(
            spec.dataset_format != "mooncake",
            "--workers with a Mooncake trace: its requests share one hash scope per "
            "point, which processes cannot share; use --workers 1",
        )
        _check(
            spec.cache_bust,
            "--workers with --no-cache-bust: recycled plays of a tree "
            "would hit a cache another process filled; use --workers 1",
        )
