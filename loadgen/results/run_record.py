"""run.json's one typed model: results/run_file.py builds a RunRecord and writes it
(encode_run); `--resume`, `loadgen merge`, `compare` and `report` read it back through
the same model (decode_run). docs/run-file.md.

On disk `settings` is flat, one key per setting name, as docs/run-file.md promises and
tools outside loadgen read it. Read back it is grouped by the parts of a RunSpec, each
decoded as that part's own type (config/: TargetSpec, WorkloadSpec, LoadSpec, ...), plus
the run-level seed and simulator: there is no second list of the settings to keep in
step, so an option added to a part is written, read back and compared on --resume with
no edit here. What a file records is the run as `RunSettings.of` redacts it: no API key,
header values and credentials as `***`; a header is written by its name only.

Old spellings live here only: a setting a previous loadgen did not write yet reads as
its part's default; a run.json from before attempts were recorded reads as its one
attempt. Anything else that is not a run.json this loadgen wrote is one ResultFileError
naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson

from loadgen.config.redact import REDACTED
from loadgen.config.session import DEFAULT_SESSION_HEADERS
from loadgen.config.spec import (
    PARTS,
    DeadlineSpec,
    LoadSpec,
    OutputSpec,
    ProcessSpec,
    RunSpec,
    ScoringSpec,
    SessionSpec,
    TargetSpec,
    TelemetrySpec,
    WorkloadSpec,
)
from loadgen.config.target import redacted
from loadgen.results.point import ResultFileError, field_message

# Settings that describe where and how a run was driven, not what it measured: they may
# differ between an interrupted run and its --resume. (A restarted server has a new pid.)
NOT_COMPARED_ON_RESUME = frozenset({"results_dir", "progress", "resume", "overwrite", "server_pid"})
# Settings of a part that no file records (a credential).
NOT_WRITTEN = frozenset({"api_key", "coordinator_token"})


class RunLevelSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The settings a RunSpec holds itself rather than in a part (spec.RUN_LEVEL)."""

    seed: int = 0
    sim: bool = False
    sim_args: tuple[str, ...] = ()


# Defaults that changed, setting -> (the earlier release's default, today's), as run.json
# spells them: a run left at the default then is one left at it now. X-Dynamo-Session-ID
# joined X-Session-ID, which Dynamo's frontend reads when the other is absent (the same
# routing), and any other server ignores both alike.
FORMER_DEFAULTS: dict[str, tuple[object, object]] = {
    "session_headers": (("X-Session-ID",), DEFAULT_SESSION_HEADERS),
}


class RunSettings(msgspec.Struct, frozen=True, kw_only=True):
    """run.json's `settings`, by the RunSpec part each setting belongs to, each part of
    its own type (a test holds these fields to spec.PARTS)."""

    target: TargetSpec
    workload: WorkloadSpec
    load: LoadSpec
    deadlines: DeadlineSpec
    scoring: ScoringSpec
    telemetry: TelemetrySpec
    output: OutputSpec
    processes: ProcessSpec
    session: SessionSpec
    run: RunLevelSettings

    @classmethod
    def of(cls, spec: RunSpec) -> RunSettings:
        """The settings of `spec` as files record them: without credentials."""
        parts: dict[str, Any] = {name: getattr(spec, name) for name in PARTS}
        parts["target"] = redacted(spec.target)
        run = RunLevelSettings(seed=spec.seed, sim=spec.sim, sim_args=spec.sim_args)
        return cls(**parts, run=run)

    def flat(self) -> dict[str, Any]:
        """The settings as run.json spells them: one flat object of setting names
        (paths as text; nested options such as vllm_result stay nested)."""
        flat: dict[str, Any] = {}
        for name in (*PARTS, "run"):
            flat.update(msgspec.to_builtins(getattr(self, name), enc_hook=str))
        for name in NOT_WRITTEN:
            del flat[name]
        flat["headers"] = [name for name, _ in self.target.headers]  # values may hold tokens
        return flat

    def differing(self, other: RunSettings, ignored: frozenset[str]) -> list[str]:
        """The names of the settings (but `ignored`) that differ from `other`'s, in order.
        `other` holding a default an earlier release had (FORMER_DEFAULTS) and this one
        today's is no difference: both are the default, measured alike."""
        mine, theirs = self.flat(), other.flat()
        return [
            name
            for name in sorted(mine)
            if name not in ignored
            and mine[name] != theirs[name]
            and (theirs[name], mine[name]) != FORMER_DEFAULTS.get(name)
        ]

    def differences(self, other: RunSettings, ignored: frozenset[str]) -> list[str]:
        """`name value (was other's)` per setting that differs, as differing orders them."""
        mine, theirs = self.flat(), other.flat()
        return [f"{n} {mine[n]!r} (was {theirs[n]!r})" for n in self.differing(other, ignored)]


def settings_from_flat(flat: dict[str, object]) -> RunSettings:
    """Flat settings (as run.json holds them) grouped by part, exactly as decode_run
    reads them from the file."""
    return msgspec.convert(_by_part(flat)["settings"], RunSettings, dec_hook=_decode)


class ClockFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A point's (monotonic, wall) clock reading, for `loadgen merge`'s alignment."""

    boot_id: str | None = None
    start_mono_ns: int
    start_unix_ns: int
    pair_read_ns: int
    offset_change_ns: int | None = None
    synced: bool | None = None
    esterror_us: int | None = None


class CounterFacts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The server's raw counters at one scrape."""

    samples: dict[str, float]
    keyed: dict[str, dict[str, float]] = {}
    engines: int | None = None  # engines with a step series (ServerSnapshot.engines)

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

    def to_json(self, *, merge: bool = False) -> dict[str, object]:
        """As run.json spells the point: its facts by PointFacts' rule, a merge's own
        entries only when set. In a merge's file (`merge`) the point is the merge's own:
        no attempt's run id and no facts (a merge is never merged again), its spans and
        clock uncertainty always (null: the clocks' error is unknown)."""
        entry: dict[str, object] = {
            "conc": self.conc,
            "complete": self.complete,
            "file": self.file,
            "error_rate": self.error_rate,
        }
        merged = {
            "shard_spans_s": self.shard_spans_s,
            "clock_alignment_uncertainty_ms": self.clock_alignment_uncertainty_ms,
        }
        if merge:
            return entry | {k: msgspec.to_builtins(v) for k, v in merged.items()}
        entry |= {"run_id": self.run_id, **self.facts().to_json()}
        entry.update({k: msgspec.to_builtins(v) for k, v in merged.items() if v is not None})
        return entry


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
    """What the preflight found of the server (client/preflight.py's ServerInfo, its
    fields in its order, then the stream interval)."""

    model: str | None = None
    max_model_len: int | None = None
    version: str | None = None
    spec_decoding: bool | None = None
    token_source: str | None = None
    options: dict[str, object] = {}  # the request options the server accepted
    tokenize_check: dict[str, object] = {}  # the tokenizer's agreement, as measured
    warnings: tuple[str, ...] = ()
    # K as the server's /metrics give it (None: not known; a run.json from before)
    spec_tokens: int | None = None
    # the engine family whose figures were read (--engine, or found by auto), why, and
    # each result field that engine cannot give with the reason; None in older files
    engine: str | None = None
    engine_reason: str | None = None
    engine_unavailable: dict[str, str] = {}
    # request extensions the server refused by name, left out of every request: name ->
    # where the figures that depended on it came from instead; empty in older files
    dropped_options: dict[str, str] = {}
    # the median round trip of a few GETs of /v1/models at preflight, ms (None: not
    # measured, and in a run.json written before it was recorded)
    rtt_ms: float | None = None
    # engine steps per stream chunk when known (the embedded simulator's --stream-interval;
    # None: unknown, and in a run.json written before it was recorded)
    stream_interval: int | None = None


class LaunchedServerFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The server loadgen launched for the run (--serve-cmd, run/launched_server.py)."""

    command: tuple[str, ...]  # as run, `{port}` substituted, credentials redacted
    env: dict[str, str] = {}  # --serve-env, credentials redacted
    cwd: str | None = None
    port: int
    pid: int
    log: str  # the file its output went to, in the results directory
    startup_s: float | None = None  # launch to /health and /v1/models answering
    version: str | None = None  # its GET /version, when it answered one
    exit_status: int | None = None  # None: still running; < 0: ended by that signal
    stopped_by: str | None = None  # the last signal loadgen sent (None: it ended by itself)
    last_log_line: str | None = None


class MergedFrom(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    run_id: str
    shard: int
    base_url: str | None = None


class ShardView(msgspec.Struct, frozen=True, kw_only=True):
    """One shard's view of the server in a merge's file: its preflight's round trip and
    its machine's clock state at its first point (None: not known, as each source says)."""

    index: int
    rtt_ms: float | None = None
    boot_id: str | None = None
    synced: bool | None = None
    esterror_us: int | None = None
    offset_change_ns: int | None = None


# RunRecord's fields only `loadgen merge` writes (scale/merge.py), and those of a run's
# attempts that a merge's file has none of.
MERGE_ONLY = frozenset({"merged_unix", "merged_from", "shards", "refused"})
RUN_ONLY = frozenset(
    {"started_unix", "finished_unix", "stop_reason", "stop_detail", "launched_server", "attempts"}
)
# Settings that may differ between the shards of one run (everything else must match):
# a merge's file leaves them out of its settings (each shard's are in merged_from's files).
PER_SHARD = frozenset(
    {
        "shard_index",
        "results_dir",
        "progress",
        "workers",
        "cpu_affinity",
        "headers",
        "base_url",
        "max_error_rate",
        "shard_sync",
        # how each shard found the coordinator and how long it waits: its own command line
        "coordinator_host",
        "coordinator_wait_s",
    }
)


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """run.json, as loadgen writes it (encode_run) and reads it back (decode_run)."""

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
    launched_server: LaunchedServerFacts | None = None
    shard: ShardInfo | None = None
    merged_from: tuple[MergedFrom, ...] = ()  # (before points: a merge's file has it there)
    shards: tuple[ShardView, ...] = ()  # a merge's: each shard's view (empty in older files)
    points: tuple[PointEntry, ...]
    attempts: tuple[Attempt, ...] = ()
    refused: tuple[str, ...] = ()

    @property
    def merged(self) -> bool:
        """A `loadgen merge` output (written by a merge's rule, encode_run)."""
        return self.merged_unix is not None

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
        return msgspec.convert(
            {**raw, **_by_part(raw.get("settings"))}, RunRecord, dec_hook=_decode
        )
    except msgspec.ValidationError as exc:
        raise ResultFileError(
            f"{path}: {field_message(exc)}; not a run.json this loadgen wrote"
        ) from None


def encode_run(run: RunRecord) -> bytes:
    """run.json's bytes for `run`, which decode_run reads back as `run`: the settings
    flat, each point by PointEntry's rule, and a merge's own fields in a merge's file
    only. A merge's file has no attempts' fields and no per-shard settings (RUN_ONLY,
    PER_SHARD): `run` holds them unset (their defaults), as they read back."""
    left_out = RUN_ONLY if run.merged else MERGE_ONLY
    data = {name: _encoded(run, name) for name in run.__struct_fields__ if name not in left_out}
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def _encoded(run: RunRecord, name: str) -> object:
    if name == "settings":
        flat = run.settings.flat()
        return {k: v for k, v in flat.items() if k not in PER_SHARD} if run.merged else flat
    if name == "points":
        return [point.to_json(merge=run.merged) for point in run.points]
    return msgspec.to_builtins(getattr(run, name))


def _by_part(flat: object) -> dict[str, object]:
    """The flat `settings` handed to every part, each taking its own names; a header is
    on file by its name alone (its value as `***`)."""
    if not isinstance(flat, dict):
        return {}
    headers = flat.get("headers")
    if isinstance(headers, list) and all(isinstance(name, str) for name in headers):
        flat = {**flat, "headers": [[name, REDACTED] for name in headers]}
    return {"settings": {name: flat for name in (*PARTS, "run")}}


def _decode(kind: type, value: object) -> object:
    """The one type of the parts msgspec does not know: a path, written as its text
    (`object`, which msgspec hands here once a hook is given, is any JSON value)."""
    if kind is Path and isinstance(value, str):
        return Path(value)
    if kind is object:
        return value
    raise NotImplementedError(f"{kind!r} from {type(value).__name__}")
