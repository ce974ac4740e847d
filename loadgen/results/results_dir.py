"""The results directory: fresh, replaced (`--overwrite`) or continued (`--resume`).

A directory that already holds a run (run.json, conc_<N>.json or requests_conc_<N>.jsonl)
is never written over silently: it is refused unless `--overwrite` (its result files are
deleted first, nothing else) or `--resume` (the sweep goes on from its first incomplete
point). A resumed sweep keeps the earlier complete points as they are, moves the files
of the incomplete one to incomplete/<run_id>/ (measured, so never deleted), and records
each attempt in run.json. Settings must match the interrupted run's: points measured
with different settings are not one sweep.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson

from loadgen.config.spec import RunSpec, SpecError
from loadgen.results.artifacts_dir import prepare_artifacts
from loadgen.results.files import ResultsWriteError
from loadgen.results.outcome import PointOutcome
from loadgen.results.point import ResultFileError
from loadgen.results.run_record import (
    NOT_COMPARED_ON_RESUME,
    RunRecord,
    RunSettings,
)
from loadgen.results.store import (
    ACCURACY_GLOB,
    ACCURACY_PREFIX,
    ACCURACY_SAMPLES_GLOB,
    GPU_POWER_GLOB,
    INCOMPLETE_DIR,
    POINT_GLOB,
    REQUESTS_GLOB,
    RUN_FILE,
    SERVER_LOG,
    SERVER_LOG_GLOB,
    SIMULATOR_LOG,
    SIMULATOR_LOG_GLOB,
    SWEEP_CSV,
    SWEEP_PNG,
    ResultsDir,
)

_RUN_GLOBS = (RUN_FILE, POINT_GLOB, REQUESTS_GLOB)
_RESULT_GLOBS = (
    *_RUN_GLOBS,
    ACCURACY_GLOB,
    ACCURACY_SAMPLES_GLOB,
    SWEEP_CSV,
    SWEEP_PNG,
    SIMULATOR_LOG,
    SIMULATOR_LOG_GLOB,
    SERVER_LOG,
    SERVER_LOG_GLOB,
    GPU_POWER_GLOB,
)


@dataclass(frozen=True, slots=True)
class Earlier:
    """What a resumed sweep takes over from the run in its directory."""

    run: RunRecord  # the earlier run.json
    points: tuple[PointOutcome, ...]  # its complete points, kept as they are
    remaining: tuple[int, ...]  # concurrencies still to measure, in --conc order

    @property
    def attempt(self) -> int:
        """The number of the attempt resuming it (2 for the first --resume)."""
        return len(self.run.attempts_so_far()) + 1

    def summary(self, directory: Path) -> str:
        """The line --resume prints: what is kept and what is measured (again)."""
        kept = [p.conc for p in self.points]
        shown = ", ".join(str(c) for c in kept) or "none"
        return (
            f"resuming run {self.run.run_id} in {directory} (attempt "
            f"{self.attempt}): {len(kept)} complete point(s) kept (conc {shown}), "
            f"{len(self.remaining)} to run (conc "
            f"{', '.join(str(c) for c in self.remaining)})"
        )


def settings_of(spec: RunSpec) -> dict[str, Any]:
    """The run's settings as run.json records them (JSON types, no credentials), flat:
    one key per setting name, whatever part of the RunSpec holds it."""
    return cast(dict[str, Any], orjson.loads(orjson.dumps(RunSettings.of(spec).flat())))


def run_files(directory: Path) -> list[str]:
    """Names of the files that mark `directory` as holding a run."""
    return sorted({p.name for pattern in _RUN_GLOBS for p in directory.glob(pattern)})


def prepare(directory: Path, spec: RunSpec) -> Earlier | None:
    """Make `directory` (and --aiperf-artifacts) ready for `spec`; the earlier run when
    resuming."""
    prepare_artifacts(spec)  # first: a bad one must not cost --overwrite's removals
    return _prepare(directory, spec)


def _prepare(directory: Path, spec: RunSpec) -> Earlier | None:
    if spec.output.resume:
        return _resume(directory, spec)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(
            f"--results {directory}: cannot create it ({exc.strerror or exc})"
        ) from None
    used = run_files(directory)
    if used and not spec.output.overwrite:
        shown = ", ".join(used[:3]) + (", ..." if len(used) > 3 else "")
        raise SpecError(
            f"--results {directory} already holds a run ({shown}); continue it "
            f"with --resume {directory}, replace it with --overwrite, or choose "
            "another directory"
        )
    if used:
        _remove_results(directory)
    return None


def _remove_results(directory: Path) -> None:
    """--overwrite: loadgen's own result files only; anything else in the directory stays."""
    for pattern in _RESULT_GLOBS:
        for path in directory.glob(pattern):
            try:
                path.unlink()
            except OSError as exc:
                raise ResultsWriteError(path, exc, "--overwrite could not remove it") from None
    shutil.rmtree(directory / INCOMPLETE_DIR, ignore_errors=True)
    # the run's accuracy points (--accuracy): an earlier run's scores must not read as this one's
    for accuracy in directory.glob(f"{ACCURACY_PREFIX}*"):
        if accuracy.is_dir() and not accuracy.is_symlink():
            shutil.rmtree(accuracy)


def _resume(directory: Path, spec: RunSpec) -> Earlier:
    run = _read_run(directory)
    _check_settings(directory, spec, run)
    points = _complete_points(directory, run)
    done = {p.conc for p in points}
    remaining = tuple(c for c in spec.load.conc if c not in done)
    return Earlier(
        run, tuple(sorted(points, key=lambda p: spec.load.conc.index(p.conc))), remaining
    )


def set_aside(directory: Path, earlier: Earlier, trials: int = 1) -> None:
    """Move the files of the points about to be measured again to incomplete/<run_id>/:
    they were measured, so they are kept, but out of the new attempt's way. With
    --trials, a point's leading complete trials stay (the point resumes after them)."""
    attempt = earlier.run.run_id or "earlier"
    store = ResultsDir(directory)
    for conc in earlier.remaining:
        kept = trials_kept(store, conc, trials) if trials > 1 else 0
        again = range(kept + 1, trials + 1) if trials > 1 else ()
        names = [
            store.point_file(conc).name,
            store.requests_file(conc).name,
            *(f(conc, k).name for k in again for f in (store.point_file, store.requests_file)),
        ]
        for name in names:
            if (directory / name).exists():
                aside = directory / INCOMPLETE_DIR / attempt
                try:
                    aside.mkdir(parents=True, exist_ok=True)
                    (directory / name).rename(aside / name)
                except OSError as exc:
                    raise ResultsWriteError(
                        aside / name, exc, f"nothing was measured yet; {name} is where it was"
                    ) from None


def _read_run(directory: Path) -> RunRecord:
    path = directory / RUN_FILE
    if not path.is_file():
        raise SpecError(
            f"--resume {directory}: no {RUN_FILE} there, so no run to continue; "
            f"start one with --results {directory}"
        )
    return ResultsDir(directory).read_run()  # one line naming the field, never a KeyError


def check_same_settings(directory: Path, spec: RunSpec, model: str | None = None) -> None:
    """--resume's checks alone, for a run read back rather than continued (a --find-max
    probe): SpecError unless `directory`'s run.json has `spec`'s settings and, when
    `model` (the one the server serves now) is given, was measured against it."""
    earlier = _read_run(directory)
    _check_settings(directory, spec, earlier)
    if model is not None:
        check_same_model(directory, earlier, model)


def check_same_model(directory: Path, earlier: RunRecord, model: str) -> None:
    """SpecError when the server now serves another model than the one `earlier` was
    measured against: with the same flags (no --model) the settings match, and the kept
    points would be pooled with another model's. A run.json without the server's model
    (from before it was recorded) is not held to it."""
    before = earlier.server.model if earlier.server else None
    if before is not None and before != model:
        raise SpecError(
            f"--resume {directory}: the server now serves {model!r}; the run being "
            f"resumed measured {before!r}"
        )


def _check_settings(directory: Path, spec: RunSpec, earlier: RunRecord) -> None:
    """A setting an earlier loadgen did not write yet reads as its default
    (results/run_record.py): left unset now, it is the same run."""
    now = RunSettings.of(spec)
    differ = now.differences(earlier.settings, NOT_COMPARED_ON_RESUME)
    if differ:
        raise SpecError(
            f"--resume {directory}: the settings differ from the run being "
            f"resumed: {'; '.join(differ)}; give the same flags as that run"
        )


def _complete_points(directory: Path, run: RunRecord) -> list[PointOutcome]:
    """Points run.json lists as complete whose conc_<N>.json says so too."""
    points = []
    store = ResultsDir(directory)
    for entry in run.points:
        if not entry.complete:
            continue
        path = store.point_file(entry.conc)
        if not path.is_file():
            continue  # listed but missing: measure it again
        result = store.read_point(entry.conc)  # a damaged file is one line, not a re-measurement
        if result.status.complete:  # its facts too, for `loadgen merge`
            points.append(PointOutcome(entry.conc, result, True, path, entry.facts()))
    return points


def trials_kept(store: ResultsDir, conc: int, trials: int) -> int:
    """How many leading trials of `conc` are on disk complete (--resume keeps those)."""
    kept = 0
    for trial in range(1, trials + 1):
        if not (
            store.point_file(conc, trial).is_file() and store.requests_file(conc, trial).is_file()
        ):
            break
        try:
            if not store.read_trial_point(conc, trial).status.complete:
                break
        except ResultFileError:  # torn by a kill mid-write: measure it again
            break
        kept = trial
    return kept
