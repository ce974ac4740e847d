"""What a run is asked to do: `RunSpec`, frozen and validated (flag parsers: parsers.py).

A RunSpec is made of typed parts (subspecs.py): `spec.target`, `spec.workload`,
`spec.load`, `spec.deadlines`, `spec.scoring`, `spec.telemetry`, `spec.output`,
`spec.processes` and `spec.session`; only the seed and the simulator are run-level.
`RunSpec.flat(**settings)` builds one from the flat setting names (as the flags, the
sidecar's options and run.json's `settings` name them) and `spec.with_(**settings)`
changes some; `flat_settings` is the one place that flattens it back for files.

Every value that reaches the engine has passed through here, whether it came from argv or
from the sidecar's JSON options, so both paths reject bad input with the same message
(the checks: spec_checks.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from loadgen.config.local_checks import check_results_dir as check_results_dir
from loadgen.config.parsers import SpecError as SpecError  # raised by RunSpec; re-exported
from loadgen.config.spec_checks import MAX_CONVERSATION_BYTES as MAX_CONVERSATION_BYTES
from loadgen.config.spec_checks import MAX_DATASET_BYTES as MAX_DATASET_BYTES
from loadgen.config.spec_checks import MAX_SEED as MAX_SEED
from loadgen.config.spec_checks import MAX_TRIALS as MAX_TRIALS
from loadgen.config.spec_checks import VLLM_PERCENTILE_METRICS as VLLM_PERCENTILE_METRICS
from loadgen.config.spec_checks import validate
from loadgen.config.subspecs import DATASET_FORMATS as DATASET_FORMATS
from loadgen.config.subspecs import DEFAULT_HTTP_TIMEOUT_S as DEFAULT_HTTP_TIMEOUT_S
from loadgen.config.subspecs import DEFAULT_STREAM_IDLE_TIMEOUT_S as DEFAULT_STREAM_IDLE_TIMEOUT_S
from loadgen.config.subspecs import ENCODER_NAMES as ENCODER_NAMES
from loadgen.config.subspecs import ENDPOINTS as ENDPOINTS
from loadgen.config.subspecs import HTTP_CLIENTS as HTTP_CLIENTS
from loadgen.config.subspecs import REASONING_EFFORTS as REASONING_EFFORTS
from loadgen.config.subspecs import THINKING_MODES as THINKING_MODES
from loadgen.config.subspecs import TRACE_FORMATS as TRACE_FORMATS
from loadgen.config.subspecs import (
    DeadlineSpec,
    LoadSpec,
    OutputSpec,
    ProcessSpec,
    ScoringSpec,
    SessionSpec,
    TargetSpec,
    TelemetrySpec,
    WorkloadSpec,
)
from loadgen.config.subspecs import Endpoint as Endpoint
from loadgen.config.subspecs import SpeedBenchOptions as SpeedBenchOptions
from loadgen.config.subspecs import VllmResultOptions as VllmResultOptions

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
    """The spec as one flat dict of setting names: run.json's `settings`, whose shape the
    split into parts leaves unchanged (files written before and after it compare equal).
    Nested options (vllm_result, speed_bench, golden_al) stay nested, as they always were."""
    flat: dict[str, Any] = {}
    for name in PARTS:
        flat.update(dataclasses.asdict(getattr(spec, name)))
    flat.update({name: getattr(spec, name) for name in RUN_LEVEL})
    return flat
