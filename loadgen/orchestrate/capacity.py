"""`--find-max conc|rate`: measure the probes the capacity search asks for (docs/capacity.md;
the search itself is metrics/capacity.py).

Each probe is a whole one-point run in its own directory, find_max_<kind>_<load>/ (its
run.json, conc_<N>.json, records, --trials files), against one server: the embedded
simulator or the target's connections are opened once for the whole search. After each
probe loadgen prints it and rewrites capacity.json, so a search that stops keeps what it
measured. With --resume the search starts again from the beginning: the probes it
asks for that were measured before (to their end, or to the over-saturation stop) are
read back from their directories instead of measured again, so it takes the same path
and continues where it stopped; each is held to the search's settings and to the model
the server serves now, as --resume of a run is. With --trials an objective is held to
the upper end of its 95 % interval over the trials, not to the pooled value.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from time import perf_counter_ns

from tokenizers import Tokenizer

from loadgen.config.build_spec import default_results_dir
from loadgen.config.objectives import Objective, default_resolution
from loadgen.config.spec import RunSpec, SpecError
from loadgen.metrics.capacity import Answer, Check, Probe, Search, checks_of
from loadgen.metrics.spread import spread
from loadgen.results.artifacts_dir import prepare_artifacts
from loadgen.results.capacity import (
    CapacityCheck,
    CapacityObjective,
    CapacityProbe,
    CapacityResult,
)
from loadgen.results.point import PointResult, ResultFileError
from loadgen.results.results_dir import check_same_settings
from loadgen.results.store import ResultsDir
from loadgen.run.backend import Backend, http_backend, served_model
from loadgen.run.scheduler import Clock, Sleep
from loadgen.run.sweep import SweepOptions
from loadgen.scale.sweep import run_sweep
from loadgen.sinks.run_files import RunFiles
from loadgen.tokenizer import load_tokenizer


@dataclasses.dataclass(frozen=True, slots=True)
class CapacityOutcome:
    results_dir: Path
    result: CapacityResult


def search_of(spec: RunSpec) -> Search:
    assert spec.load.find_max is not None
    resolution = spec.load.find_max_resolution or default_resolution(spec.load.find_max)
    if spec.load.find_max == "conc":
        return Search(
            float(min(spec.load.conc)), float(max(spec.load.conc)), resolution, integer=True
        )
    assert spec.load.rate_range is not None
    return Search(*spec.load.rate_range, resolution, integer=False)


async def find_capacity(
    spec: RunSpec,
    *,
    tokenizer: Tokenizer | None = None,
    backend: Backend | None = None,
    clock: Clock = perf_counter_ns,
    sleep: Sleep = asyncio.sleep,
) -> CapacityOutcome:
    """Run the search of `spec` (spec.find_max set); capacity.json in spec.results_dir."""
    directory = spec.output.results_dir or default_results_dir()
    store = ResultsDir(directory)
    _prepare(store, spec)
    if tokenizer is None:
        tokenizer = await asyncio.to_thread(
            load_tokenizer, spec.target.tokenizer, check_dsv4=spec.workload.encoder == "dsv4"
        )
    search = search_of(spec)
    probes: list[Probe] = []
    dirs: list[str] = []
    result = _result(spec, search, probes, dirs, finished=False)
    if not spec.output.resume:  # from the start: a search killed in its first probe can resume
        store.write_capacity(result)
    async with _server(spec, directory, tokenizer, backend) as server:
        # --resume: the kept probes are held to the model the server serves now, asked
        # before any is read back (no probe of the search is measured, so no preflight)
        model = await served_model(spec, server.base_url) if spec.output.resume else None
        while (load := search.next_load(probes)) is not None:
            probe_spec = _probe_spec(spec, store.probe_dir(spec.load.find_max or "", load), load)
            probe = _measured(spec, probe_spec, load, model) if model is not None else None
            if probe is None:
                print(
                    f"loadgen: find-max probe {len(probes) + 1}: {_load(spec, load)}",
                    file=sys.stderr,
                )
                probe = await _measure(spec, probe_spec, load, tokenizer, server, clock, sleep)
            probes.append(probe)
            dirs.append(store.probe_dir(spec.load.find_max or "", load).name)
            print(
                f"loadgen: find-max probe {len(probes)}: {_verdict(spec, probe)}", file=sys.stderr
            )
            result = _result(spec, search, probes, dirs, finished=False)
            store.write_capacity(result)
    result = _result(spec, search, probes, dirs, finished=True)
    store.write_capacity(result)
    print(
        f"loadgen: find-max {spec.load.find_max}: {answer_line(spec, search.answer(probes))}; "
        f"{len(probes)} probes"
        + (
            f" (a sweep of every conc in {search.low:g}.."
            f"{search.high:g} measures {search.brute_force_points()})"
            if search.integer
            else ""
        ),
        file=sys.stderr,
    )
    return CapacityOutcome(directory, result)


async def _measure(
    spec: RunSpec,
    probe_spec: RunSpec,
    load: float,
    tokenizer: Tokenizer,
    server: Backend,
    clock: Clock,
    sleep: Sleep,
) -> Probe:
    directory = probe_spec.output.results_dir
    assert directory is not None
    artifacts = probe_spec.output.aiperf_artifacts
    for place in (directory, artifacts):  # --resume: a probe the stop cut short, again
        if place is not None and place.exists():
            shutil.rmtree(place)
    outcome = await run_sweep(
        probe_spec,
        SweepOptions(
            tokenizer=tokenizer,
            backend=server,
            clock=clock,
            sleep=sleep,
            outputs=RunFiles(probe_spec),
        ),
    )
    return _probe_of(spec, load, outcome.points[-1].result, ResultsDir(outcome.results_dir))


def _probe_of(spec: RunSpec, load: float, result: PointResult, store: ResultsDir) -> Probe:
    return Probe(
        load,
        checks_of(spec.load.objectives, _figures(spec, result, store)),
        result.status.complete,
        result.status.stop_reason,
    )


def _measured(spec: RunSpec, probe_spec: RunSpec, load: float, model: str) -> Probe | None:
    """--resume: the probe read back from its directory when it was measured to its end
    (or to the over-saturation stop, a measurement too) with this search's settings and
    against the `model` the server serves now (else SpecError, as --resume of a run);
    None: measure it (again)."""
    assert probe_spec.output.results_dir is not None
    store = ResultsDir(probe_spec.output.results_dir)
    conc = max(probe_spec.load.conc)
    if not store.point_file(conc).is_file():
        return None
    # Another isl, osl, seed, server or model measured that probe: not this search's.
    check_same_settings(store.path, probe_spec, model)
    try:
        result = store.read_point(conc)
        status = result.status
        if not (status.complete or status.stop_reason == "saturated"):
            return None
        probe = _probe_of(spec, load, result, store)
    except (ResultFileError, OSError):
        return None  # a file the stop left half-written: measure the probe again
    print(f"loadgen: find-max: {store.path.name} read back (measured before)", file=sys.stderr)
    return probe


def _prepare(store: ResultsDir, spec: RunSpec) -> None:
    prepare_artifacts(spec)
    if spec.output.resume:
        _check_resumable(store, spec)
        return
    try:
        store.path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(
            f"--results {store.path}: cannot create it ({exc.strerror or exc})"
        ) from None
    used = store.probe_dirs() + ([store.capacity_file] if store.capacity_file.exists() else [])
    if used and not spec.output.overwrite:
        raise SpecError(
            f"--results {store.path} already holds a capacity search "
            f"({used[0].name}); replace it with --overwrite, or choose another "
            "directory"
        )
    for path in used:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _check_resumable(store: ResultsDir, spec: RunSpec) -> None:
    """--resume: the directory holds a search with these bounds and objectives."""
    if not store.capacity_file.is_file():
        raise SpecError(
            f"--resume {store.path}: no capacity.json there, so no capacity search to "
            "continue; start it with --results instead"
        )
    before = store.read_capacity()
    search = search_of(spec)
    given = [(o.name, o.limit_ms) for o in spec.load.objectives]
    if (before.find_max, before.low, before.high) != (
        spec.load.find_max,
        search.low,
        search.high,
    ) or [(o.objective, o.limit_ms) for o in before.objectives] != given:
        raise SpecError(
            f"--resume {store.path}: that search is --find-max {before.find_max} over "
            f"{before.low:g}..{before.high:g} with "
            f"{', '.join(o.objective for o in before.objectives)}; give the same flags "
            "as the first run"
        )


@contextlib.asynccontextmanager
async def _server(
    spec: RunSpec, directory: Path, tokenizer: Tokenizer, given: Backend | None
) -> AsyncIterator[Backend]:
    if given is not None:
        yield given
        return
    async with http_backend(spec, directory, tokenizer) as backend:
        yield backend


def _probe_spec(spec: RunSpec, directory: Path, load: float) -> RunSpec:
    """The one-point run of a probe: the search's own settings, one load."""
    one = spec.with_(
        results_dir=directory,
        find_max=None,
        objectives=(),
        find_max_resolution=None,
        rate_range=None,
        overwrite=False,
        resume=False,  # a probe cut short is measured again whole (_measure)
        # each probe's artifacts beside the others', not over them
        aiperf_artifacts=None
        if spec.output.aiperf_artifacts is None
        else spec.output.aiperf_artifacts / directory.name,
    )
    if spec.load.find_max == "conc":
        return one.with_(conc=(int(load),))
    return one.with_(conc=(max(spec.load.conc),), request_rate=load)


def _figures(
    spec: RunSpec, result: PointResult, store: ResultsDir
) -> dict[str, tuple[float | None, float | None]]:
    """Each objective's (value, bound): the point's figure and, with --trials, the upper
    end of its 95 % interval over the trials' own values (else the figure itself)."""
    flat = result.to_json()
    figures: dict[str, tuple[float | None, float | None]] = {}
    for objective in spec.load.objectives:
        value = _number(flat.get(objective.field))
        figures[objective.name] = (
            value,
            _bound(spec, objective, result, store) if spec.load.trials > 1 else value,
        )
    return figures


def _bound(
    spec: RunSpec, objective: Objective, result: PointResult, store: ResultsDir
) -> float | None:
    values = [
        _number(store.read_trial_point(result.conc, k).to_json().get(objective.field))
        for k in range(1, spec.load.trials + 1)
    ]
    known = [v for v in values if v is not None]
    if len(known) < len(values):
        return None  # a trial without the figure: not shown to hold
    return spread(known).ci_high


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _load(spec: RunSpec, load: float) -> str:
    return (
        f"conc {load:g}"
        if spec.load.find_max == "conc"
        else f"rate {load:g} req/s (conc {max(spec.load.conc)})"
    )


def _check_text(check: Check) -> str:
    if check.bound is None:
        return f"{check.objective} no figure (fails)"
    sign = "<=" if check.passed else ">"
    shown = f"{check.value:,.1f}" if check.value is not None else "-"
    if check.bound != check.value:
        shown += f" (CI high {check.bound:,.1f})"
    return f"{check.objective} {shown} {sign} {check.limit_ms:,.1f} ms"


def _verdict(spec: RunSpec, probe: Probe) -> str:
    verdict = "meets every objective" if probe.passed else "fails"
    why = {
        None: "",
        "saturated": " (saturated: the server fell behind this load, the point stopped early)",
        "incomplete": " (incomplete point)",
    }[probe.failed_because]
    return f"{_load(spec, probe.load)} {verdict}{why}: " + ", ".join(
        _check_text(c) for c in probe.checks
    )


def answer_line(spec: RunSpec, answer: Answer) -> str:
    if answer.load is None:
        return (
            f"no load meets every objective (even {_load(spec, answer.first_fail.load)} "
            f"fails {answer.binding})"
            if answer.first_fail
            else "nothing measured"
        )
    line = f"{_load(spec, answer.load)} is the largest that meets every objective"
    if answer.first_fail is None:
        return line + f" (the upper bound; tightest {answer.binding})"
    failure = {"saturated": "(saturated)", "incomplete": "(incomplete point)"}
    why = failure.get(answer.binding or "", answer.binding or "")
    line += f"; {_load(spec, answer.first_fail.load)} fails {why}"
    if answer.non_monotone:
        line += (
            f" (but {', '.join(f'{v:g}' for v in answer.non_monotone)} passed above "
            "it: noise, or a server that is not monotone there)"
        )
    return line


def _result(
    spec: RunSpec, search: Search, probes: list[Probe], dirs: list[str], *, finished: bool
) -> CapacityResult:
    answer = search.answer(probes)
    records = {p.load: _probe(p, d) for p, d in zip(probes, dirs, strict=True)}
    return CapacityResult(
        find_max=spec.load.find_max or "",
        objectives=[
            CapacityObjective(objective=o.name, field=o.field, limit_ms=o.limit_ms)
            for o in spec.load.objectives
        ],
        low=search.low,
        high=search.high,
        resolution=search.resolution.describe(),
        trials=spec.load.trials,
        held_to_limit="ci95_high" if spec.load.trials > 1 else "value",
        finished=finished,
        answer=answer.load,
        last_pass=records[answer.last_pass.load] if answer.last_pass else None,
        first_fail=records[answer.first_fail.load] if answer.first_fail else None,
        binding_objective=answer.binding,
        non_monotone=list(answer.non_monotone),
        probes=list(records.values()),
        brute_force_points=search.brute_force_points(),
    )


def _probe(probe: Probe, directory: str) -> CapacityProbe:
    return CapacityProbe(
        load=probe.load,
        passed=probe.passed,
        complete=probe.complete,
        failed_because=probe.failed_because,
        margin=probe.margin if math.isfinite(probe.margin) else None,
        binding_objective=probe.binding.objective,
        results=directory,
        checks=[
            CapacityCheck(
                objective=c.objective,
                value_ms=c.value,
                bound_ms=c.bound,
                limit_ms=c.limit_ms,
                margin=c.margin if math.isfinite(c.margin) else None,
                passed=c.passed,
            )
            for c in probe.checks
        ],
    )
