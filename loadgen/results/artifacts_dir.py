"""The `--aiperf-artifacts` directory, checked before anything is measured, as `--results` is.

It must be a directory loadgen can create and write in (a file there, or one it cannot
write, used to fail only after the first point had been measured). One that already
holds AIPerf artifact files of an earlier run is refused unless `--overwrite` (those
files are deleted first, nothing else) or `--resume` (they are the resumed run's: its
kept points' are kept, and written where missing: run/sweep.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from loadgen.config.spec import RunSpec, SpecError
from loadgen.results.files import ResultsWriteError
from loadgen.results.store import (
    AIPERF_AGGREGATE,
    AIPERF_RECORDS,
    AIPERF_SERVER_METRICS,
    PROBE_PREFIX,
)

_NAMES = (AIPERF_RECORDS, AIPERF_AGGREGATE, AIPERF_SERVER_METRICS)


def artifact_files(root: Path) -> list[Path]:
    """The artifact files in `root`, its per-point conc_<N>/ directories and its
    --find-max probes' find_max_*/ (and their conc_<N>/)."""
    probes = sorted(p for p in root.glob(f"{PROBE_PREFIX}*") if p.is_dir())
    places = [
        place
        for top in (root, *probes)
        for place in (top, *sorted(p for p in top.glob("conc_*") if p.is_dir()))
    ]
    return [place / name for place in places for name in _NAMES if (place / name).is_file()]


def prepare_artifacts(spec: RunSpec) -> None:
    """SpecError (one line, exit 2) unless the directory can take this run's artifacts."""
    root = spec.output.aiperf_artifacts
    if root is None:
        return
    option = f"--aiperf-artifacts {root}"
    if root.exists() and not root.is_dir():
        raise SpecError(f"{option}: not a directory; name a directory (it is created if missing)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):  # the only sure test of writing there
            pass
    except OSError as exc:
        raise SpecError(
            f"{option}: cannot create or write in it ({exc.strerror or exc}); "
            "name a directory loadgen can write"
        ) from None
    if spec.output.resume:
        return
    used = artifact_files(root)
    if used and not spec.output.overwrite:
        shown = ", ".join(str(p.relative_to(root)) for p in used[:3])
        raise SpecError(
            f"{option} already holds an earlier run's artifacts ({shown}"
            f"{', ...' if len(used) > 3 else ''}); replace them with --overwrite, or "
            "choose another directory"
        )
    for path in used:
        try:
            path.unlink()
        except OSError as exc:
            raise ResultsWriteError(path, exc, "--overwrite could not remove it") from None
