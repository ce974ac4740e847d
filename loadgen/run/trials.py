"""`--trials N`: each point measured N times, then pooled (docs/results.md, "Trials").

Trial k (1..N) is a whole point of its own: fresh connections (the idle ones of the
trial before are closed), its own warmup, the same workload settings drawn with the
trial's seed (trial 1 uses --seed itself, so `--trials 1` is today's run; trial k > 1 a
seed derived from --seed and k, recorded in `trial_seeds`), and its own files,
conc_<N>_trial_<k>.json and requests_conc_<N>_trial_<k>.jsonl. When the N trials are in,
conc_<N>.json is the point pooled over all their records (run/assemble.py) with each
headline figure's per-trial values and 95 % interval. A stopped trial is written
`complete: false` and no pooled point is; `--resume` keeps the leading complete trials
and measures again from the first missing one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from loadgen.config.spec import MAX_SEED
from loadgen.errors import LoadgenError
from loadgen.metrics.arrays import is_completed
from loadgen.metrics.checks import error_text
from loadgen.metrics.server import ServerSnapshot
from loadgen.records import RequestRecord
from loadgen.results.files import ResultsWriteError
from loadgen.results.outcome import PointOutcome
from loadgen.results.point import PointResult, ResultFileError
from loadgen.results.results_dir import trials_kept
from loadgen.results.run_record import PointFacts, TrialFacts
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import TrialPart, assemble_trials
from loadgen.run.driver import Driver
from loadgen.run.point_fields import point_context
from loadgen.run.point_records import RunContext

TRIAL_STREAM = 24  # the SeedSequence key that tells a trial seed from any other draw
Measure = Callable[[RunContext], Awaitable[PointOutcome]]


def trial_seed(seed: int, trial: int) -> int:
    """Trial k's seed: --seed for trial 1, else one derived from (--seed, k) that no other
    trial of any --seed is likely to share."""
    if trial == 1:
        return seed
    words = np.random.SeedSequence([seed, TRIAL_STREAM, trial]).generate_state(2, np.uint32)
    return ((int(words[0]) << 32) | int(words[1])) & MAX_SEED


def trial_context(context: RunContext, trial: int) -> RunContext:
    spec = context.spec.with_(seed=trial_seed(context.spec.seed, trial))
    return dataclasses.replace(context, spec=spec, trial=trial)


async def run_trials(
    context: RunContext, conc: int, measure: Measure, fresh_connections: Callable[[], object]
) -> PointOutcome:
    """Measure the trials of `conc` not yet on disk, then write the pooled point. A trial
    that stops early is returned as it is (its own file, `complete: false`)."""
    spec = context.spec
    store = ResultsDir(context.results_dir)
    kept = trials_kept(store, conc, spec.load.trials)
    parts: list[TrialPart] = []
    facts: list[PointFacts | None] = []
    for trial in range(1, spec.load.trials + 1):
        name = store.point_file(conc, trial).name
        if trial <= kept:  # measured by the attempt being resumed
            result = store.read_trial_point(conc, trial)
            check_kept_trial(store, conc, trial, result, store.read_records(conc, trial))
            facts.append(None)  # its server counters are that attempt's: not known here
        else:
            if trial > 1:
                fresh_connections()
            outcome = await measure(trial_context(context, trial))
            if not outcome.complete or outcome.write_error is not None:
                return outcome
            result = outcome.result
            facts.append(outcome.facts)
        parts.append(
            TrialPart(result, store.read_records(conc, trial), trial_seed(spec.seed, trial), name)
        )
    return _pooled(context, conc, parts, facts)


def check_kept_trial(
    store: ResultsDir,
    conc: int,
    trial: int,
    result: PointResult,
    records: Sequence[RequestRecord],
) -> None:
    """A trial --resume pools without measuring it must be this run's and its two files
    one trial's: a file of another run (or another trial's records beside it) was pooled
    silently. ResultFileError (exit 2), naming the file; nothing is moved or deleted."""
    name, lines = store.point_file(conc, trial), store.requests_file(conc, trial).name
    run_ids = {attempt.run_id for attempt in store.read_run().attempts_so_far()}
    if result.identity.run_id not in run_ids:
        raise ResultFileError(
            f"{name}: run_id {result.identity.run_id!r} is not an attempt of the run being "
            f"resumed ({', '.join(sorted(map(str, run_ids)))}): a trial file of another run; "
            "move it (and its requests file) away and --resume measures that trial again"
        )
    ordered = sorted(records, key=lambda r: r.request_id)
    metrics = result.metrics
    if (
        any(r.conc != conc for r in ordered)
        or [r.input_len for r in ordered] != metrics.input_lens
        or [error_text(r) for r in ordered] != metrics.errors
        or [r.output_tokens if is_completed(r) else 0 for r in ordered] != metrics.output_lens
        or [(r.chunk_ns[0] - r.start_ns) / 1e9 if is_completed(r) else None for r in ordered]
        != metrics.ttfts
    ):
        raise ResultFileError(
            f"{name}: its requests do not match {lines} ({len(ordered)} records; the point "
            f"counts {len(metrics.input_lens)}): the two files are not one trial's; move both "
            "away and --resume measures that trial again"
        )


class Trials:
    """A driver's points measured `trials` times each and pooled (one time: the driver's
    point as it is). `fresh_connections` closes the idle connections before a trial."""

    def __init__(
        self, driver: Driver, trials: int, fresh_connections: Callable[[], object]
    ) -> None:
        self.driver = driver
        self.trials = trials
        self.fresh_connections = fresh_connections

    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        driver = self.driver
        if self.trials == 1:
            return await driver.run_point(context, conc)

        async def trial(at: RunContext) -> PointOutcome:
            return await driver.run_point(at, conc)

        return await run_trials(context, conc, trial, self.fresh_connections)

    def abandoned(self, stop: LoadgenError | None) -> PointOutcome | None:
        return self.driver.abandoned(stop)


def _pooled(
    context: RunContext, conc: int, parts: list[TrialPart], facts: list[PointFacts | None]
) -> PointOutcome:
    spec = context.spec
    before, after = summed_counters(facts)
    result = assemble_trials(
        parts, point_context(spec, conc), conc, server_before=before, server_after=after
    )
    store = ResultsDir(context.results_dir)
    entries = tuple(
        TrialFacts(
            trial=k,
            seed=p.seed,
            file=p.file,
            clock=f.clock if f else None,
            server_before=f.server_before if f else None,
            server_after=f.server_after if f else None,
        )
        for k, (p, f) in enumerate(zip(parts, facts, strict=True), 1)
    )
    write_error: ResultsWriteError | None = None
    try:
        path = store.write_point(result)
    except ResultsWriteError as exc:
        path, write_error = store.point_file(conc), exc
    context.hooks.point_finished(conc, result)
    return PointOutcome(
        conc, result, result.status.complete, path, PointFacts(trials=entries), write_error
    )


def summed_counters(
    facts: list[PointFacts | None],
) -> tuple[ServerSnapshot | None, ServerSnapshot | None]:
    """(zero, the trials' counter deltas summed): the server's traffic during the measured
    phases only, not between them. (None, None) when any trial's counters are unknown."""
    pairs = [(f.server_before, f.server_after) if f else (None, None) for f in facts]
    known = [(b, a) for b, a in pairs if b is not None and a is not None]
    if not pairs or len(known) < len(pairs):
        return None, None
    samples: dict[str, float] = {}
    keyed: dict[str, dict[str, float]] = {}
    for before, after in known:
        for name, value in after.samples.items():
            samples[name] = samples.get(name, 0.0) + value - before.samples.get(name, 0.0)
        for name, values in after.keyed.items():
            per_key = keyed.setdefault(name, {})
            was = before.keyed.get(name, {})
            for key, value in values.items():
                per_key[key] = per_key.get(key, 0.0) + value - was.get(key, 0.0)
    zero = ServerSnapshot(
        {name: 0.0 for name in samples}, {name: dict.fromkeys(v, 0.0) for name, v in keyed.items()}
    )
    return zero, ServerSnapshot(samples, keyed)
