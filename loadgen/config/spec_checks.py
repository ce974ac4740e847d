"""RunSpec's checks (RunSpec calls `validate` on construction): one function per part,
then the rules that cross parts, in the order the first error is reported.

Every message names the flag the user typed and says what to do.
"""

from __future__ import annotations

import math

from loadgen.config.load_args import check_conc_stages_run, check_load_shape
from loadgen.config.local_checks import check_results_dir, process_exists
from loadgen.config.objectives import find_max_problem
from loadgen.config.parsers import (
    CONTROL_CHARS,
    MAX_CONC,
    MAX_WORKERS,
    SLO_METRICS,
    SpecError,
    check_extra_body,
    parse_header,
)
from loadgen.config.redact import redact_url, url_has_credentials
from loadgen.config.session_checks import validate_sessions
from loadgen.config.subspecs import (
    DATASET_FORMATS,
    ENCODER_NAMES,
    ENDPOINTS,
    HTTP_CLIENTS,
    REASONING_EFFORTS,
    THINKING_MODES,
    DeadlineSpec,
    ScoringSpec,
    SpecParts,
    TelemetrySpec,
    VllmResultOptions,
)

# vLLM `--percentile-metrics` names loadgen can report (client_queue_time = queue_time).
VLLM_PERCENTILE_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el", "client_queue_time")
MAX_TRIALS = 100
MAX_SEED = 2**63 - 1  # numpy's SeedSequence takes any such int, vLLM's request seed an int64
# A dataset is read into memory whole, and each conversation is tokenized in one piece
# (~1.4 s and ~130 MB of RSS per MB of text): bound both before reading a byte of it.
MAX_DATASET_BYTES = 1 << 30  # 1 GiB
MAX_CONVERSATION_BYTES = 4 << 20  # 4 MiB per line: ~1M tokens of text, above any context


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def validate(spec: SpecParts) -> None:
    """Raise SpecError for the first invalid setting (RunSpec calls this on construction)."""
    _check_finite(spec)
    _check(
        bool(spec.load.conc) and all(1 <= c <= MAX_CONC for c in spec.load.conc),
        f"--conc: every concurrency must be in 1..{MAX_CONC}",
    )
    _validate_workload(spec)
    _validate_target(spec)
    _validate_prompts(spec)
    _validate_load(spec)
    check_load_shape(spec.load)
    check_conc_stages_run(spec)
    _validate_processes(spec)
    _validate_run_level(spec)
    validate_sessions(spec)
    _validate_find_max(spec)
    if spec.output.vllm_result is not None:
        _validate_vllm_result(spec.output.vllm_result)
    _check(spec.telemetry.series_interval_s > 0, "--slice-duration: must be > 0 seconds")
    _check(
        spec.workload.max_context_length is None or spec.workload.max_context_length >= 1,
        "--max-context-length: must be >= 1 token",
    )


def _validate_workload(spec: SpecParts) -> None:
    _check(
        spec.workload.isl is not None or spec.workload.dataset is not None,
        "--isl is required (or --dataset, whose prompts give the input lengths)",
    )
    _check(
        spec.workload.osl is not None or spec.workload.dataset is not None,
        "--osl is required (or a ShareGPT --dataset, whose answers give the output lengths)",
    )
    _check(
        spec.workload.isl is None or spec.workload.isl >= 1,
        f"--isl {spec.workload.isl}: must be >= 1 token",
    )
    _check(
        spec.workload.osl is None or spec.workload.osl >= 1,
        f"--osl {spec.workload.osl}: must be >= 1 token",
    )
    _check(
        spec.load.num_prompts is None or spec.load.num_prompts >= 1, "--num-prompts: must be >= 1"
    )
    _check(
        spec.load.num_warmups is None or spec.load.num_warmups >= 0, "--num-warmups: must be >= 0"
    )
    _check(
        spec.workload.dataset_format in DATASET_FORMATS,
        f"dataset format {spec.workload.dataset_format!r}: allowed: {', '.join(DATASET_FORMATS)}",
    )
    if spec.workload.dataset is not None:
        _check(
            spec.workload.dataset.is_file()
            or (
                spec.workload.dataset.is_dir()
                and spec.workload.dataset_format in ("weka", "auto", "speed_bench")
            ),
            f"--dataset {spec.workload.dataset}: no such file",
        )
    _check(
        (spec.workload.dataset_format == "speed_bench") == (spec.workload.speed_bench is not None),
        "dataset format speed_bench goes with its options (--dataset-name speed_bench)",
    )
    _check(
        spec.workload.speed_bench is None
        or not (spec.session.multi_turn or spec.session.turns is not None),
        "--dataset-name speed_bench sends single prompts: drop --multi-turn / --turns",
    )


def _validate_target(spec: SpecParts) -> None:
    """The server, its credentials and what goes on the wire besides the prompt."""
    _check(spec.sim or bool(spec.target.base_url), "--base-url is required (or use --sim)")
    if spec.target.base_url:
        _check(
            spec.target.base_url.startswith(("http://", "https://")),
            f"--base-url {spec.target.base_url!r}: must start with http:// or https://",
        )
        # aiohttp refuses both at the first request (a traceback, not a line): say it here
        _check(
            not url_has_credentials(spec.target.base_url)
            or not (
                spec.target.api_key
                or any(name.lower() == "authorization" for name, _ in spec.target.headers)
            ),
            "--base-url carries credentials (user:password@, sent as Basic auth) and "
            "--api-key, $OPENAI_API_KEY or --header Authorization sets Authorization "
            "too: keep one",
        )
    check_extra_body(spec.target.extra_body)
    _check(
        spec.workload.top_p is None or "top_p" not in spec.target.extra_body,
        "--top-p and --extra-body '{\"top_p\": ...}': give one",
    )
    for name, value in spec.target.headers:  # argv went through parse_header; RunSpec(...) may not
        parse_header(f"{name}:{value}")
    if spec.target.api_key is not None:
        _check(
            not CONTROL_CHARS.search(spec.target.api_key),
            "--api-key / OPENAI_API_KEY contains a control character (CR, LF, ...)",
        )
    _validate_telemetry(spec.telemetry, spec.sim)


def _validate_prompts(spec: SpecParts) -> None:
    _check(
        spec.target.endpoint in ENDPOINTS,
        f"--endpoint {spec.target.endpoint!r}: allowed: completions, chat",
    )
    _check(
        spec.workload.encoder in ENCODER_NAMES,
        f"--encoder {spec.workload.encoder!r}: allowed: {', '.join(ENCODER_NAMES)}",
    )
    _check(
        spec.workload.thinking in THINKING_MODES,
        f"--thinking {spec.workload.thinking!r}: allowed: chat, thinking",
    )
    _check(
        spec.workload.reasoning_effort is None
        or spec.workload.reasoning_effort in REASONING_EFFORTS,
        f"--reasoning-effort {spec.workload.reasoning_effort!r}: allowed: low, high, max",
    )


def _validate_load(spec: SpecParts) -> None:
    """How many requests, how fast, and what the figures are checked against."""
    _check(spec.load.prompts_per_conc >= 1, "--prompts-per-conc: must be >= 1")
    _check(spec.load.warmup_per_conc >= 0, "--warmup-per-conc: must be >= 0")
    _check(
        spec.load.duration_s is None or spec.load.duration_s > 0, "--duration: must be > 0 seconds"
    )
    _check(
        0.0 <= spec.workload.range_ratio <= 1.0,
        f"--range-ratio {spec.workload.range_ratio}: must be in [0, 1]",
    )
    _check(
        spec.load.request_rate is None or spec.load.request_rate > 0,
        "--request-rate: must be > 0 requests/s (omit it for a closed loop)",
    )
    _check(spec.load.burstiness > 0, "--burstiness: the gamma shape must be > 0 (1 = Poisson)")
    _check(spec.workload.temperature >= 0, "--temperature: must be >= 0")
    _check(
        spec.workload.top_p is None or 0 < spec.workload.top_p <= 1,
        f"--top-p {spec.workload.top_p}: must be in (0, 1]",
    )
    _validate_scoring(spec.scoring)
    _validate_deadlines(spec.deadlines)
    _check(
        spec.target.http_client in HTTP_CLIENTS,
        f"--http-client {spec.target.http_client!r}: allowed: {', '.join(HTTP_CLIENTS)}",
    )


def _validate_telemetry(telemetry: TelemetrySpec, sim: bool) -> None:
    for url in telemetry.server_metrics:
        _check(
            url.startswith(("http://", "https://")),
            f"--server-metrics {url!r}: must start with http:// or https://",
        )
    for url in telemetry.gpu_metrics:
        _check(
            url.startswith(("http://", "https://")) or (url == "sim" and sim),
            f"--gpu-metrics {url!r}: must start with http:// or https:// (or be `sim`, "
            "with --sim: the embedded simulator's /gpu/metrics)",
        )
    twice = sorted({url for url in telemetry.gpu_metrics if telemetry.gpu_metrics.count(url) > 1})
    _check(
        not twice,
        f"--gpu-metrics {', '.join(map(redact_url, twice))}: given twice, its GPUs would be "
        "counted twice; name every exporter once",
    )
    _check(
        0 < telemetry.gpu_metrics_interval_s <= 3.0,
        f"--gpu-metrics-interval {telemetry.gpu_metrics_interval_s:g}: must be in (0, 3] "
        "seconds (samples more than 3 s apart make a point's energy invalid)",
    )


def _validate_scoring(scoring: ScoringSpec) -> None:
    _check(scoring.num_gpus is None or scoring.num_gpus >= 1, "--num-gpus: must be >= 1")
    _check(
        scoring.spec_tokens is None or scoring.spec_tokens >= 1,
        "--spec-tokens: must be >= 1",
    )
    _check(
        all(k in SLO_METRICS and v > 0 for k, v in scoring.slos_ms.items()),
        f"--slo: metrics must be among {', '.join(SLO_METRICS)} with positive limits",
    )
    _check(
        bool(scoring.percentiles) and all(0 < p < 100 for p in scoring.percentiles),
        "--percentiles: each must be strictly between 0 and 100",
    )


def _validate_deadlines(deadlines: DeadlineSpec) -> None:
    _check(
        deadlines.request_timeout_s is None or deadlines.request_timeout_s > 0,
        "--request-timeout: must be > 0 seconds",
    )
    _check(deadlines.http_timeout_s > 0, "--http-timeout: must be > 0 seconds")
    _check(deadlines.stream_idle_timeout_s > 0, "--stream-idle-timeout: must be > 0 seconds")
    _check(0.0 <= deadlines.max_error_rate <= 1.0, "--max-error-rate: must be in [0, 1]")


def _validate_processes(spec: SpecParts) -> None:
    _check(
        spec.processes.workers is None or 1 <= spec.processes.workers <= MAX_WORKERS,
        f"--workers: must be in 1..{MAX_WORKERS} (or auto)",
    )
    _check(
        0 <= spec.processes.shard_index < spec.processes.shard_count,
        f"--shard {spec.processes.shard_index}/{spec.processes.shard_count}: need 0 <= I < N",
    )
    _check(
        spec.processes.shard_sync is None or spec.processes.shard_count > 1,
        "--shard-sync lines up the shards of a --shard I/N run: use it with --shard",
    )
    _check(
        1 <= spec.load.trials <= MAX_TRIALS,
        f"--trials {spec.load.trials}: must be in 1..{MAX_TRIALS}",
    )
    # A shard's trials would be pooled before `loadgen merge` sees them, and a session
    # point's figures are per session: neither is pooled over trials (yet).
    _check(
        spec.load.trials == 1 or spec.processes.shard_count == 1,
        "--trials with --shard: not supported; run the trials as separate sharded runs",
    )
    # Each shard would sample every GPU and divide all of their energy by its own share
    # of the tokens (J/token x N); one sampler for the whole run needs one process.
    _check(
        spec.processes.shard_count == 1
        or (not spec.telemetry.gpu_metrics and spec.telemetry.gpu_power_csv is None),
        "--gpu-metrics/--gpu-power-csv with --shard: not supported (each shard would "
        "charge every GPU's energy to its own tokens); measure energy in one process, "
        "with --workers N for more client CPU",
    )
    _check(
        spec.load.trials == 1 or not spec.sessions,
        "--trials with a session run (--turns, multi-turn or trace datasets): not "
        "supported; run it N times with different --seed",
    )
    _check(
        not spec.processes.cpu_affinity or spec.processes.workers != 1,
        "--cpu-affinity pins worker processes: use it with --workers 2 or more (or "
        "auto), or start a single process under taskset",
    )


def _validate_find_max(spec: SpecParts) -> None:
    if spec.load.find_max is None:
        return
    problem = find_max_problem(
        spec.load.find_max,
        spec.load.objectives,
        spec.load.conc,
        spec.load.rate_range,
        spec.load.request_rate,
        spec.scoring.percentiles,
    )
    _check(problem is None, problem or "")
    _check(
        not spec.sessions and spec.processes.shard_count == 1,
        "--find-max: not with session runs or --shard",
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
    ("load", "duration_s", "--duration"),
    ("load", "request_rate", "--request-rate"),
    ("load", "burstiness", "--burstiness"),
    ("workload", "temperature", "--temperature"),
    ("workload", "top_p", "--top-p"),
    ("workload", "range_ratio", "--range-ratio"),
    ("deadlines", "request_timeout_s", "--request-timeout"),
    ("deadlines", "http_timeout_s", "--http-timeout"),
    ("deadlines", "stream_idle_timeout_s", "--stream-idle-timeout"),
    ("deadlines", "max_error_rate", "--max-error-rate"),
)


def _check_finite(spec: SpecParts) -> None:
    for part, name, flag in _FLOAT_FLAGS:
        value = getattr(getattr(spec, part), name)
        _check(value is None or math.isfinite(value), f"{flag} {value}: must be a finite number")
    _check(
        all(math.isfinite(v) for v in spec.scoring.slos_ms.values()),
        "--slo: each limit must be a finite duration",
    )


def _validate_run_level(spec: SpecParts) -> None:
    """A seed numpy and vLLM accept, a results directory that can be written, a dataset
    that fits in memory, a server process that exists."""
    _check(0 <= spec.seed <= MAX_SEED, f"--seed {spec.seed}: must be in 0..{MAX_SEED} (2^63-1)")
    _check(
        not (spec.output.resume and spec.output.overwrite),
        "--resume and --overwrite exclude each other: continue the run, or replace it",
    )
    if spec.output.results_dir is not None:
        check_results_dir(spec.output.results_dir)
    if spec.workload.dataset is not None and spec.workload.dataset.is_file():
        size = spec.workload.dataset.stat().st_size
        _check(
            size <= MAX_DATASET_BYTES,
            f"--dataset {spec.workload.dataset}: {size / 2**20:,.0f} MiB is over the "
            f"{MAX_DATASET_BYTES >> 30} GiB limit (the file is read into memory); "
            "split it or keep only the conversations you need",
        )
    if spec.processes.server_pid is not None:
        _check(
            spec.processes.server_pid > 0 and process_exists(spec.processes.server_pid),
            f"--server-pid {spec.processes.server_pid}: no such process on this machine",
        )
