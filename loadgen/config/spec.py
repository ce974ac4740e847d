"""What a run is asked to do: `RunSpec`, frozen and validated, and the rules that cross its
parts.

A RunSpec is made of typed parts, one module each (flags, struct, checks): `spec.target`
(target.py), `spec.workload` (workload.py), `spec.load` (load.py), `spec.deadlines`
(deadlines.py), `spec.scoring` (scoring.py), `spec.telemetry` (telemetry.py),
`spec.output` (output.py), `spec.processes` (processes.py) and `spec.session`
(session.py); only the seed and the simulator are run-level. `RunSpec.flat(**settings)`
builds one from the flat setting names (as the flags, the sidecar's options and run.json's
`settings` name them) and `spec.with_(**settings)` changes some; `flat_settings` flattens
it back (run.json records each part as it is: results/run_record.py).

Construction runs the checks that need nothing but the values (each part's, then the rules
that cross parts, in the order the first error is reported); the checks against this
machine (paths, processes) run once, where a run is built from options (build_spec.py).
Every message names the flag the user typed and says what to do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from loadgen.config import (
    deadlines,
    limits,
    load,
    output,
    processes,
    scoring,
    session,
    target,
    telemetry,
    workload,
)
from loadgen.config.dataset_format import DATASET_FORMATS as DATASET_FORMATS
from loadgen.config.dataset_format import MAX_CONVERSATION_BYTES as MAX_CONVERSATION_BYTES
from loadgen.config.dataset_format import MAX_DATASET_BYTES as MAX_DATASET_BYTES
from loadgen.config.dataset_format import TRACE_FORMATS as TRACE_FORMATS
from loadgen.config.deadlines import DEFAULT_HTTP_TIMEOUT_S as DEFAULT_HTTP_TIMEOUT_S
from loadgen.config.deadlines import DEFAULT_STREAM_IDLE_TIMEOUT_S as DEFAULT_STREAM_IDLE_TIMEOUT_S
from loadgen.config.deadlines import DeadlineSpec as DeadlineSpec
from loadgen.config.load import CONC_STAGES_ALONE
from loadgen.config.load import MAX_TRIALS as MAX_TRIALS
from loadgen.config.load import LoadSpec as LoadSpec
from loadgen.config.objectives import find_max_problem
from loadgen.config.output import OutputSpec as OutputSpec
from loadgen.config.output import VllmResultOptions as VllmResultOptions
from loadgen.config.parsers import VLLM_PERCENTILE_METRICS as VLLM_PERCENTILE_METRICS
from loadgen.config.parsers import SpecError as SpecError  # raised by RunSpec; re-exported
from loadgen.config.processes import ProcessSpec as ProcessSpec
from loadgen.config.scoring import ScoringSpec as ScoringSpec
from loadgen.config.session import SessionSpec as SessionSpec
from loadgen.config.target import ENDPOINTS as ENDPOINTS
from loadgen.config.target import HTTP_CLIENTS as HTTP_CLIENTS
from loadgen.config.target import Endpoint as Endpoint
from loadgen.config.target import TargetSpec as TargetSpec
from loadgen.config.telemetry import TelemetrySpec as TelemetrySpec
from loadgen.config.workload import ENCODER_NAMES as ENCODER_NAMES
from loadgen.config.workload import MAX_SEED as MAX_SEED
from loadgen.config.workload import REASONING_EFFORTS as REASONING_EFFORTS
from loadgen.config.workload import THINKING_MODES as THINKING_MODES
from loadgen.config.workload import SpeedBenchOptions as SpeedBenchOptions
from loadgen.config.workload import WorkloadSpec as WorkloadSpec

# RunSpec's parts by attribute name; each setting name belongs to exactly one.
PARTS: dict[str, type[Any]] = {
    "target": TargetSpec,
    "workload": WorkloadSpec,
    "load": LoadSpec,
    "deadlines": DeadlineSpec,
    "scoring": ScoringSpec,
    "telemetry": TelemetrySpec,
    "output": OutputSpec,
    "processes": ProcessSpec,
    "session": SessionSpec,
}
RUN_LEVEL: tuple[str, ...] = ("seed", "sim", "sim_args")
PART_OF: dict[str, str] = {
    f.name: part for part, cls in PARTS.items() for f in dataclasses.fields(cls)
}


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One benchmark run: a sweep of concurrency points against one server."""

    load: LoadSpec
    workload: WorkloadSpec
    target: TargetSpec = field(default_factory=TargetSpec)
    deadlines: DeadlineSpec = field(default_factory=DeadlineSpec)
    scoring: ScoringSpec = field(default_factory=ScoringSpec)
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    processes: ProcessSpec = field(default_factory=ProcessSpec)
    session: SessionSpec = field(default_factory=SessionSpec)
    seed: int = 0
    sim: bool = False
    sim_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate(self)

    @classmethod
    def flat(cls, **settings: Any) -> RunSpec:
        """The RunSpec of flat setting names (`conc=`, `isl=`, `base_url=`, ...); `conc`,
        `isl` and `osl` are required, as before the split."""
        parts, direct = _route(settings)
        built = {name: PARTS[name](**values) for name, values in parts.items()}
        return cls(**built, **direct)

    def with_(self, **settings: Any) -> RunSpec:
        """This spec with some flat settings changed (`spec.with_(seed=2, conc=(4,))`);
        a part's name (`load=LoadSpec(...)`) replaces that part whole."""
        parts, direct = _route(settings)
        changed = {
            name: dataclasses.replace(getattr(self, name), **values)
            for name, values in parts.items()
        }
        return dataclasses.replace(self, **changed, **direct)

    @property
    def sessions(self) -> bool:
        """A session run: synthetic multi-turn, a multi-turn dataset or a trace replay."""
        return (
            self.session.turns is not None
            or self.session.multi_turn
            or self.workload.dataset_format in TRACE_FORMATS
        )


def _route(settings: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Flat settings grouped by the part they belong to; run-level ones and whole parts
    apart. An unknown name is a TypeError, as for a dataclass's unknown keyword."""
    parts: dict[str, dict[str, Any]] = {}
    direct: dict[str, Any] = {}
    for name, value in settings.items():
        if name in RUN_LEVEL or name in PARTS:
            direct[name] = value
        elif name in PART_OF:
            parts.setdefault(PART_OF[name], {})[name] = value
        else:
            raise TypeError(f"RunSpec has no setting {name!r}")
    for name in PARTS:
        if name in direct and name in parts:
            raise TypeError(f"RunSpec: {name}= and some of its settings: give one")
    return parts, direct


def flat_settings(spec: RunSpec) -> dict[str, Any]:
    """The spec as one flat dict of setting names, as `RunSpec.flat` takes them (run.json's
    `settings` have this shape: results/run_record.py). Nested options (vllm_result,
    speed_bench, golden_al) stay nested."""
    flat: dict[str, Any] = {}
    for name in PARTS:
        flat.update(dataclasses.asdict(getattr(spec, name)))
    flat.update({name: getattr(spec, name) for name in RUN_LEVEL})
    return flat


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def validate(spec: RunSpec) -> None:
    """Raise SpecError for the first invalid setting (RunSpec calls this on construction):
    each part's own checks (its module's `check`: values, then bounds), the run-level
    settings, then the rules that cross parts, which can trust each part's values."""
    load.check(spec.load)
    workload.check(spec.workload)
    target.check(spec.target)
    telemetry.check(spec.telemetry)
    scoring.check(spec.scoring)
    deadlines.check(spec.deadlines)
    processes.check(spec.processes)
    output.check(spec.output)
    session.check(spec.session)
    _check(0 <= spec.seed <= MAX_SEED, f"--seed {spec.seed}: must be in 0..{MAX_SEED} (2^63-1)")
    _check_across_parts(spec)


def _check_across_parts(spec: RunSpec) -> None:
    """The rules between parts (and the run-level --sim), in the order the first error is
    reported."""
    _check(
        spec.workload.speed_bench is None
        or not (spec.session.multi_turn or spec.session.turns is not None),
        "--dataset-name speed_bench sends single prompts: drop --multi-turn / --turns",
    )
    _check(
        spec.sim or bool(spec.target.base_url) or bool(spec.target.serve_cmd),
        "--base-url is required (or use --sim or --serve-cmd)",
    )
    _check(
        spec.workload.top_p is None or "top_p" not in spec.target.extra_body,
        "--top-p and --extra-body '{\"top_p\": ...}': give one",
    )
    for url in spec.telemetry.gpu_metrics:
        _check(
            url != "sim" or spec.sim,
            f"--gpu-metrics {url!r}: must start with http:// or https:// (or be `sim`, "
            "with --sim: the embedded simulator's /gpu/metrics)",
        )
    target.check_profile(
        spec.target,
        spec.load.conc,
        find_max=spec.load.find_max is not None,
        shards=spec.processes.shard_count,
    )
    _check_conc_stages_run(spec)
    _check(
        spec.load.target_precision is None
        or (spec.processes.workers == 1 and spec.processes.shard_count == 1 and not spec.sessions),
        "--target-precision stops a point sent from one process: use --workers 1, no "
        "--shard and no sessions (--turns, multi-turn datasets, traces)",
    )
    _check_processes(spec)
    _check_sessions(spec)
    _check_find_max(spec)
    if spec.session.turns is not None:
        _check_turn_limits(spec)


def _check_conc_stages_run(spec: RunSpec) -> None:
    """--conc-stages against the rest of the run."""
    if not spec.load.conc_stages:
        return
    _check(not spec.sessions, CONC_STAGES_ALONE)
    _check(
        spec.processes.workers == 1 and spec.processes.shard_count == 1,
        "--conc-stages runs in one process: use --workers 1 and no --shard",
    )


def _check_processes(spec: RunSpec) -> None:
    """What the processes can do with the rest of the run."""
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


def _check_sessions(spec: RunSpec) -> None:
    """What sessions need of the workload and the processes."""
    _check(
        not spec.session.multi_turn or spec.workload.dataset is not None,
        "--multi-turn plays a --dataset's conversations: give --dataset (or --turns N "
        "for synthetic sessions)",
    )
    _check(
        not spec.session.multi_turn or spec.workload.osl is not None,
        "--multi-turn: --osl is required (the max_tokens of each turn)",
    )
    _check(
        not spec.session.live_history or spec.workload.dataset_format not in TRACE_FORMATS,
        "--live-history: trace replay rebuilds each prompt from the trace's `in` and "
        "hash_ids, which a reply cannot change; use it with --turns or --multi-turn",
    )
    _check(
        not spec.session.live_history or spec.sessions,
        "--live-history puts the server's replies into the history of a session: use "
        "it with --turns N or --multi-turn",
    )
    _check(
        spec.session.turns is None or spec.workload.dataset is None,
        "--turns makes synthetic sessions; it excludes --dataset (use --multi-turn)",
    )
    # Session runs on workers or shards: each process plays whole lanes (a tree and its
    # subagents in one process: run/sessions.py). Refused where a play's figures would
    # depend on plays in other processes: Mooncake's one hash scope per point, plays
    # without their own cache-bust marker (each play's marker names its lane and number,
    # which every process counts alike, so shards need not share anything else).
    if spec.sessions and spec.processes.shard_count > 1:
        _check(
            spec.workload.dataset_format != "mooncake",
            "--shard with a Mooncake trace: its requests share one hash scope per "
            "point, which processes cannot share; run it in one process",
        )
        _check(
            spec.session.cache_bust,
            "--shard with --no-cache-bust: recycled plays of a tree would hit a cache "
            "another shard filled; keep the cache-bust markers",
        )
    if spec.sessions and spec.processes.workers is not None and spec.processes.workers > 1:
        _check(
            spec.workload.dataset_format != "mooncake",
            "--workers with a Mooncake trace: its requests share one hash scope per "
            "point, which processes cannot share; use --workers 1",
        )
        _check(
            spec.session.cache_bust,
            "--workers with --no-cache-bust: recycled plays of a tree "
            "would hit a cache another process filled; use --workers 1",
        )


def _check_find_max(spec: RunSpec) -> None:
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
    _check(
        not spec.target.serve_cmd,
        "--find-max with --serve-cmd: each probe is a run of its own and would launch the "
        "server again; start it once yourself and give --base-url",
    )


def _check_turn_limits(spec: RunSpec) -> None:
    """Synthetic sessions (after every part's bounds): the turns, each turn's new tokens
    and the pauses bounded, so the sessions' requests and the last turn's history are."""
    parts = spec.session
    assert parts.turns is not None
    turns = session.largest(parts.turns, "--turns")
    _check(
        turns <= limits.MAX_TURNS,
        f"--turns {parts.turns}: at most {limits.MAX_TURNS:,} turns a session",
    )
    think = session.largest(parts.think_time, "--think-time")
    _check(
        think <= limits.MAX_POINT_SECONDS,
        f"--think-time {parts.think_time}: at most {limits.MAX_POINT_SECONDS:g} seconds (7 days)",
    )
    added = session.largest(parts.turn_tokens, "--turn-tokens") + (spec.workload.osl or 0)
    history = (spec.workload.isl or 0) + turns * added
    _check(
        history <= limits.MAX_TOKENS,
        f"--turns {parts.turns} x --turn-tokens {parts.turn_tokens}: a last turn of "
        f"~{history:,.0f} tokens of history, over {limits.MAX_TOKENS:,}",
    )
    requests = max(spec.load.conc) * parts.sessions_per_conc * turns
    _check(
        requests <= limits.MAX_REQUESTS_PER_POINT,
        f"--conc {max(spec.load.conc)} x --sessions-per-conc {parts.sessions_per_conc} x "
        f"--turns {parts.turns}: up to {requests:,.0f} requests per point, over the "
        f"limit of {limits.MAX_REQUESTS_PER_POINT:,}",
    )
