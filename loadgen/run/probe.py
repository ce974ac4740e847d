"""The run's one workload and its preflight probe, built before a socket opens.

A bad length or dataset fails here (SpecError), before a simulator starts; the sweep
reuses the Workload (its dataset read and encoded once) for every point.
"""

from __future__ import annotations

import dataclasses

from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import Workload


def body_options(spec: RunSpec) -> BodyOptions:
    return BodyOptions(
        endpoint=spec.target.endpoint,
        model=spec.target.model or "",
        temperature=spec.workload.temperature,
        top_p=spec.workload.top_p,
        seed=spec.seed,
        thinking=spec.workload.thinking,
        reasoning_effort=spec.workload.reasoning_effort,
        extra_body=spec.target.extra_body,
    )


def single_turn_spec(spec: RunSpec) -> RunSpec:
    """What the single-turn workload (the preflight probe) sees: a session run's dataset is
    read as sessions, so the probe is a synthetic prompt of --isl/--osl (or of probe
    lengths when the dataset alone gives them)."""
    if not spec.sessions:
        return spec
    isl, osl = spec.workload.probe_lengths
    return spec.with_(
        dataset=None,
        dataset_format="auto",
        multi_turn=False,
        turns=None,
        live_history=False,
        isl=isl,
        osl=osl,
    )


def probe_prompt(spec: RunSpec, tokenizer: Tokenizer) -> tuple[str, int]:
    """The preflight prompt (text, tokens); raises SpecError when the workload cannot be
    built (isl below the template, range ratio too low, bad dataset)."""
    return Workload(single_turn_spec(spec), tokenizer, body_options(spec)).preflight_prompt()


@dataclasses.dataclass(frozen=True, slots=True)
class ProbedWorkload:
    """The run's one Workload (its dataset read and encoded here, once, and reused by the
    points), the preflight prompt and the (input, output) tokens of its longest request."""

    workload: Workload
    probe: tuple[str, int]
    longest: tuple[int, int]


def probe_workload(spec: RunSpec, tokenizer: Tokenizer) -> ProbedWorkload:
    """A session run's probe is a single-turn prompt of its --isl/--osl (its turns'
    lengths are known only as played)."""
    workload = Workload(single_turn_spec(spec), tokenizer, body_options(spec))
    return ProbedWorkload(workload, workload.preflight_prompt(), workload.longest_request())
