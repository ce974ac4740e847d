"""`compare --verdict`: each run's per-request records read into the bootstrap's series
(metrics/verdict.py), and every run judged against the baseline at each shared point."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from loadgen.compare.distributions import record_paths
from loadgen.compare.inputs import RunDir
from loadgen.errors import UsageError
from loadgen.metrics.arrays import PointArrays, is_completed
from loadgen.metrics.trust import workload_mismatch
from loadgen.metrics.verdict import (
    REPLICATES,
    RUN_NOISE,
    PointSeries,
    VerdictRow,
    judge,
    point_series,
)
from loadgen.results.jsonl import read_jsonl

ONE_TRIAL = (
    "conc {conc}, {run}: one trial a side, so how much two runs of one build differ is "
    "not measured and the intervals of {metrics} are the runs' own: a machine whose speed drifts "
    "between runs raises false alarms well above 5% (docs/verdict.md); run both with "
    "--trials 3"
)
ASSUMED = (
    "conc {conc}, {run}: one trial a side, so how much two runs of one build differ is "
    "assumed ({noise}; --verdict-run-noise), not measured: run both with --trials 3 to "
    "measure it (docs/verdict.md)"
)


class VerdictRefused(UsageError):
    """The runs cannot be judged against each other (what differs is said)."""


def series_of(run: RunDir, conc: int) -> PointSeries | None:
    """The point's completed records in send order, one sequence per trial; None when
    its JSONL is not there (a point without records has nothing to resample)."""
    paths = record_paths(run, conc)
    if not paths or not all(path.is_file() for path in paths):
        return None
    trials = []
    for path in paths:
        records = sorted((r for r in read_jsonl(path) if is_completed(r)), key=lambda r: r.start_ns)
        if records:
            trials.append(PointArrays.build(records))
    result = run.results[conc]
    energy = result.energy.joules_per_output_token if result.energy else None
    return point_series(trials, result.metrics.spec_tokens, energy)


def verdicts(
    runs: Sequence[RunDir],
    seed: int,
    replicates: int = REPLICATES,
    run_noise: Mapping[str, float] = RUN_NOISE,
) -> tuple[list[VerdictRow], list[str]]:
    """Each run after the first against the first, at every concurrency both measured;
    plus one line per point left out (no records). Refused when the workloads differ."""
    if len(runs) < 2:
        raise VerdictRefused("--verdict needs two runs (a baseline and a run to judge)")
    mismatch = workload_mismatch({run.name: run.workload() for run in runs})
    if mismatch is not None:
        raise VerdictRefused(f"--verdict refused: {mismatch}")
    rng = np.random.default_rng(seed)
    baseline, rows, notes = runs[0], [], []
    for run in runs[1:]:
        for conc in sorted(set(baseline.results) & set(run.results)):
            pair = series_of(baseline, conc), series_of(run, conc)
            if pair[0] is None or pair[1] is None:
                missing = baseline.name if pair[0] is None else run.name
                notes.append(f"conc {conc}: {missing} has no per-request records; no verdict")
                continue
            judged = judge(
                (baseline.name, run.name),
                conc,
                (pair[0], pair[1]),
                rng,
                replicates=replicates,
                run_noise=run_noise,
            )
            rows += judged
            assumed = [r for r in judged if r.run_to_run == "assumed"]
            if assumed:
                noise = ", ".join(f"{r.metric} {r.run_noise:.1%}" for r in assumed)
                notes.append(ASSUMED.format(conc=conc, run=run.name, noise=noise))
            bare = [r.metric for r in judged if r.run_to_run == "not_measured"]
            if bare:
                notes.append(ONE_TRIAL.format(conc=conc, run=run.name, metrics=", ".join(bare)))
    return rows, notes
