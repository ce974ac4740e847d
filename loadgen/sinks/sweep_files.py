"""The sweep's own outputs once its points are in: sweep.csv, the console tables and
sweep.png, for a run (run/sweep.py) and a merge (scale/merge.py) alike."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from loadgen.results.files import ResultsWriteError
from loadgen.results.point import PointResult
from loadgen.results.store import SWEEP_CSV, ResultsDir
from loadgen.sinks.plot import plot_sweep
from loadgen.sinks.session_table import format_session_table
from loadgen.sinks.table import (
    format_table,
    phase_line,
    role_lines,
    step_line,
    sweep_rows,
    write_csv,
)


def write_sweep_files(store: ResultsDir, results: Sequence[PointResult]) -> list[str]:
    """Write and print them from the complete points; the names of files not written (the
    measurements are on disk already, so a full disk here costs only these)."""
    if not results:
        return []
    unwritten = []
    rows = sweep_rows(results)
    try:
        write_csv(store.sweep_csv, rows)
    except ResultsWriteError:
        unwritten.append(SWEEP_CSV)
    print(format_table(rows))
    for result in sorted(results, key=lambda r: r.conc):
        print(step_line(result))
        phases = phase_line(result)
        if phases is not None:
            print(phases)
        for line in role_lines(result):
            print(line)
    sessions = format_session_table(results)
    if sessions is not None:
        print(sessions)
    with contextlib.suppress(Exception):  # a plot must never cost the measurements
        plot_sweep(store.sweep_png, results)
    return unwritten
