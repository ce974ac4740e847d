"""run.json read back: the one typed model `--resume`, `loadgen merge`, `compare` and
`report` read it through (docs/run-file.md; persist/run_file.py writes it).

On disk `settings` is flat, one key per setting name, as docs/run-file.md promises and
tools outside loadgen read it. Read back it is grouped by the parts of a RunSpec
(config/: target, workload, load, deadlines, scoring, telemetry, output,
processes, session, plus the run-level seed and simulator), each a frozen Struct of the
JSON each setting is written as. The model is the file's own schema, kept beside the
other result files (this layer imports no config): a test holds its names and defaults
to the RunSpec parts', so the writer and the reader cannot drift apart.

Old spellings live here only: a setting a previous loadgen did not write yet reads as
its default; a run.json from before attempts were recorded reads as its one attempt.
Anything else that is not a run.json this loadgen wrote is one ResultFileError naming
the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson

from loadgen.results.point import ResultFileError, field_message

# Settings that describe where and how a run was driven, not what it measured: they may
# differ between an interrupted run and its --resume. (A restarted server has a new pid.)
NOT_COMPARED_ON_RESUME = frozenset({"results_dir", "progress", "resume", "overwrite", "server_pid"})


class _Part(msgspec.Struct, frozen=True, kw_only=True):
    """A part of the settings: read from the flat `settings` by its own names."""


class TargetSettings(_Part, frozen=True, kw_only=True):
    base_url: str | None = None  # with any user:password@ as ***@
    model: str | None = None
    endpoint: str = "completions"
    headers: tuple[str, ...] = ()  # names only: values may hold tokens
    tokenizer: str | None = None
    extra_body: dict[str, object] = {}
    http_client: str = "native"
    reset_prefix_cache: bool = False
    reset_after_warmup: bool = False
    reset_external: bool = False
    reset_timeout_s: float = 60.0


class SpeedBenchSettings(msgspec.Struct, frozen=True, kw_only=True):
    subset: str = "qualitative"
    category: str | None = None


class WorkloadSettings(_Part, frozen=True, kw_only=True):
    isl: int | None = None
    osl: int | None = None
    encoder: str = "dsv4"
    thinking: str = "thinking"
    reasoning_effort: str | None = None
    range_ratio: float = 1.0
    dataset: str | None = None
    dataset_format: str = "auto"
    sharegpt_limits: bool = False
    speed_bench: SpeedBenchSettings | None = None
    temperature: float = 0.0
    top_p: float | None = None
    max_context_length: int | None = None


class ObjectiveSettings(msgspec.Struct, frozen=True, kw_only=True):
    metric: str
    percentile: float
    limit_ms: float


class ResolutionSettings(msgspec.Struct, frozen=True, kw_only=True):
    value: float
    relative: bool


class LoadSettings(_Part, frozen=True, kw_only=True):
    conc: tuple[int, ...]
    prompts_per_conc: int = 10
    warmup_per_conc: int = 2
    num_prompts: int | None = None
    num_warmups: int | None = None
    duration_s: float | None = None
    request_rate: float | None = None
    burstiness: float = 1.0
    trials: int = 1
    find_max: str | None = None
    objectives: tuple[ObjectiveSettings, ...] = ()
    find_max_resolution: ResolutionSettings | None = None
    rate_range: tuple[float, float] | None = None
    saturation_stop: bool = True
    saturation_window_s: float = 30.0
    slice_duration_s: float | None = None
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    rate_stages: tuple[tuple[float, float], ...] = ()
    conc_stages: tuple[tuple[int, float], ...] = ()


class DeadlineSettings(_Part, frozen=True, kw_only=True):
    request_timeout_s: float | None = None
    http_timeout_s: float = 30.0
    stream_idle_timeout_s: float = 300.0
    max_error_rate: float = 0.05


class GoldenSettings(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    model: str
    mode: str
    curve: tuple[tuple[int, float], ...] = ()
    tolerance: float


class ScoringSettings(_Part, frozen=True, kw_only=True):
    num_gpus: int | None = None
    spec_tokens: int | None = None
    golden_al: GoldenSettings | None = None
    slos_ms: dict[str, float] = {}
    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
    scenario: str | None = None
    unsafe_override: bool = False
    accuracy: str | None = None
    accuracy_data: str | None = None
    accuracy_shots: str | None = None
    accuracy_conc: tuple[int, ...] = ()
    accuracy_min: float | None = None
    accuracy_max_tokens: int = 2048


class TelemetrySettings(_Part, frozen=True, kw_only=True):
    server_metrics: tuple[str, ...] = ()
    gpu_metrics: tuple[str, ...] = ()
    gpu_metrics_interval_s: float = 1.0
    gpu_power_csv: str | None = None
    series_interval_s: float = 1.0


class VllmResultSettings(msgspec.Struct, frozen=True, kw_only=True):
    result_dir: str | None = None
    filename: str | None = None
    detailed: bool = False
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
    metric_percentiles: tuple[float, ...] = (90.0, 99.0, 99.9)
    label: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    model_id: str | None = None
    tokenizer_id: str | None = None
    backend: str = "vllm"


class OutputSettings(_Part, frozen=True, kw_only=True):
    results_dir: str | None = None
    progress: bool = True
    vllm_result: VllmResultSettings | None = None
    aiperf_artifacts: str | None = None
    resume: bool = False
    overwrite: bool = False
    ignored_flags: tuple[str, ...] = ()


class ProcessSettings(_Part, frozen=True, kw_only=True):
    workers: int | None = 1
    cpu_affinity: tuple[int, ...] = ()
    shard_index: int = 0
    shard_count: int = 1
    shard_sync: str | None = None
    server_pid: int | None = None


class SessionSettings(_Part, frozen=True, kw_only=True):
    multi_turn: bool = False
    turns: str | None = None
    turn_tokens: str = "256"
    think_time: str = "0"
    sessions_per_conc: int = 2
    session_headers: tuple[str, ...] = ("X-Session-ID",)
    start_ratio: tuple[float, float] | None = None
    idle_cap_system_s: float | None = 10.0
    idle_cap_tree_s: float | None = 300.0
    cache_bust: bool = True
    live_history: bool = False


class RunLevelSettings(_Part, frozen=True, kw_only=True):
    seed: int = 0
    sim: bool = False
    sim_args: tuple[str, ...] = ()


# The parts by the RunSpec attribute that holds them (run-level: on RunSpec itself).
PART_TYPES: dict[str, type[_Part]] = {
    "target": TargetSettings,
    "workload": WorkloadSettings,
    "load": LoadSettings,
    "deadlines": DeadlineSettings,
    "scoring": ScoringSettings,
    "telemetry": TelemetrySettings,
    "output": OutputSettings,
    "processes": ProcessSettings,
    "session": SessionSettings,
    "run": RunLevelSettings,
}


class RunSettings(msgspec.Struct, frozen=True, kw_only=True):
    """run.json's `settings`, by the RunSpec part each setting belongs to."""

    target: TargetSettings
    workload: WorkloadSettings
    load: LoadSettings
    deadlines: DeadlineSettings
    scoring: ScoringSettings
    telemetry: TelemetrySettings
    output: OutputSettings
    processes: ProcessSettings
    session: SessionSettings
    run: RunLevelSettings

    def flat(self) -> dict[str, object]:
        """The settings as run.json spells them: one flat object of setting names."""
        flat: dict[str, object] = {}
        for name in PART_TYPES:
            flat.update(msgspec.to_builtins(getattr(self, name)))
        return flat

    def differing(self, other: RunSettings, ignored: frozenset[str]) -> list[str]:
        """The names of the settings (but `ignored`) that differ from `other`'s, in order."""
        mine, theirs = self.flat(), other.flat()
        return [name for name in sorted(mine) if name not in ignored and mine[name] != theirs[name]]

    def differences(self, other: RunSettings, ignored: frozenset[str]) -> list[str]:
        """`name value (was other's)` per setting that differs, as differing orders them."""
        mine, theirs = self.flat(), other.flat()
        return [f"{n} {mine[n]!r} (was {theirs[n]!r})" for n in self.differing(other, ignored)]


def settings_from_flat(flat: dict[str, object]) -> RunSettings:
    """Flat settings (persist/results_dir.py's settings_of) grouped by part, exactly as
    decode_run reads them from the file."""
    return msgspec.convert(_by_part(flat)["settings"], RunSettings)


class ClockFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A point's (monotonic, wall) clock reading, for `loadgen merge`'s alignment."""

    boot_id: str | None = None
    start_mono_ns: int
    start_unix_ns: int
    pair_read_ns: int
    offset_change_ns: int | None = None
    synced: bool | None = None
    esterror_us: int | None = None


class CounterFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The server's raw counters at one scrape."""

    samples: dict[str, float]
    keyed: dict[str, dict[str, float]] = {}

    @property
    def counter_total(self) -> float:
        """The sum of the growing counters: the smaller, the earlier the scrape."""
        return float(sum(v for k, v in self.samples.items() if k.endswith(("_total", "_count"))))


class TrialFacts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One trial of a --trials point (its clock and counters absent for a trial an
    earlier attempt measured)."""

    trial: int
    seed: int | None = None
    file: str | None = None
    clock: ClockFacts | None = None
    server_before: CounterFacts | None = None
    server_after: CounterFacts | None = None


class PointFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What run.json keeps beside a point for `loadgen merge`: the clock pairing and the
    raw counters around it (summed and, with --server-metrics, per URL), or a pooled
    --trials point's trials."""

    clock: ClockFacts | None = None
    server_before: CounterFacts | None = None
    server_after: CounterFacts | None = None
    server_before_by_url: dict[str, CounterFacts | None] | None = None
    server_after_by_url: dict[str, CounterFacts | None] | None = None
    trials: tuple[TrialFacts, ...] | None = None

    def to_json(self) -> dict[str, object]:
        """As run.json spells them: a pooled point's trials only; a point's clock and
        counters (null when unknown), per URL only with --server-metrics."""
        if self.trials is not None:
            return {"trials": msgspec.to_builtins(self.trials)}
        facts: dict[str, object] = {
            "clock": self.clock,
            "server_before": self.server_before,
            "server_after": self.server_after,
        }
        if self.server_before_by_url is not None:
            facts["server_before_by_url"] = self.server_before_by_url
            facts["server_after_by_url"] = self.server_after_by_url
        return {name: msgspec.to_builtins(value) for name, value in facts.items()}


class PointEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One point as run.json lists it."""

    conc: int
    complete: bool
    file: str | None = None
    error_rate: float | None = None
    run_id: str | None = None
    # for `loadgen merge`: the clock pairing and the raw counters around the point
    clock: ClockFacts | None = None
    server_before: CounterFacts | None = None
    server_after: CounterFacts | None = None
    server_before_by_url: dict[str, CounterFacts | None] | None = None
    server_after_by_url: dict[str, CounterFacts | None] | None = None
    trials: tuple[TrialFacts, ...] | None = None
    # a merge's own entries
    shard_spans_s: tuple[tuple[float, float] | None, ...] | None = None
    clock_alignment_uncertainty_ms: float | None = None

    def facts(self) -> PointFacts:
        """The facts kept beside the point: what a resumed run writes back."""
        return PointFacts(
            clock=self.clock,
            server_before=self.server_before,
            server_after=self.server_after,
            server_before_by_url=self.server_before_by_url,
            server_after_by_url=self.server_after_by_url,
            trials=self.trials,
        )


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str | None = None
    loadgen_version: str | None = None
    started_unix: float | None = None
    finished_unix: float | None = None
    stop_reason: str | None = None
    stop_detail: str | None = None
    points: tuple[int | None, ...] = ()


class ShardInfo(msgspec.Struct, frozen=True):
    index: int | None  # None: a merge of shards
    count: int


class ServerFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the preflight found of the server (client/preflight.py's ServerInfo)."""

    model: str | None = None
    max_model_len: int | None = None
    version: str | None = None
    spec_decoding: bool | None = None
    token_source: str | None = None
    options: dict[str, object] = {}  # the request options the server accepted
    tokenize_check: dict[str, object] = {}  # the tokenizer's agreement, as measured
    warnings: tuple[str, ...] = ()
    # engine steps per stream chunk when known (the embedded simulator's --stream-interval;
    # None: unknown, and in a run.json written before it was recorded)
    stream_interval: int | None = None


class MergedFrom(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    run_id: str
    shard: int
    base_url: str | None = None


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """run.json as loadgen reads it back."""

    run_id: str
    loadgen_version: str | None = None
    target: str | None = None
    base_url: str | None = None
    started_unix: float | None = None
    finished_unix: float | None = None
    merged_unix: float | None = None
    interrupted: bool = False
    stop_reason: str | None = None
    stop_detail: str | None = None
    settings: RunSettings
    server: ServerFacts | None = None
    shard: ShardInfo | None = None
    points: tuple[PointEntry, ...]
    attempts: tuple[Attempt, ...] = ()
    merged_from: tuple[MergedFrom, ...] = ()
    refused: tuple[str, ...] = ()

    def point(self, conc: int) -> PointEntry | None:
        return next((p for p in self.points if p.conc == conc), None)

    def attempts_so_far(self) -> tuple[Attempt, ...]:
        """Every attempt; a run.json from before attempts were recorded is its own one."""
        if self.attempts:
            return self.attempts
        return (
            Attempt(
                run_id=self.run_id,
                loadgen_version=self.loadgen_version,
                started_unix=self.started_unix,
                finished_unix=self.finished_unix,
                stop_reason="interrupted" if self.interrupted else None,
                points=tuple(p.conc for p in self.points),
            ),
        )


def decode_run(data: bytes, path: Path) -> RunRecord:
    """run.json's bytes as a RunRecord; ResultFileError (one line naming the field) for
    anything that is not a run.json this loadgen (or an earlier one) wrote."""
    try:
        raw: Any = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ResultFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ResultFileError(
            f"{path}: not a loadgen run.json (a JSON {type(raw).__name__}, expected an object)"
        )
    try:
        return msgspec.convert({**raw, **_by_part(raw.get("settings"))}, RunRecord)
    except msgspec.ValidationError as exc:
        raise ResultFileError(
            f"{path}: {field_message(exc)}; not a run.json this loadgen wrote"
        ) from None


def _by_part(flat: object) -> dict[str, object]:
    """The flat `settings` handed to every part, each taking its own names."""
    return {"settings": {name: flat for name in PART_TYPES}} if isinstance(flat, dict) else {}
