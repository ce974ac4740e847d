"""Each point's latency distributions (and, for a point with time slices, its request
timeline) from its per-request records, for the report."""

from __future__ import annotations

from pathlib import Path

from loadgen.compare.inputs import RunDir
from loadgen.metrics.distributions import PointDistributions, point_distributions
from loadgen.metrics.timeline import TimelineBar, request_timeline
from loadgen.results.jsonl import read_jsonl


def load_distributions(run: RunDir) -> dict[int, PointDistributions]:
    """conc -> distributions, for the points whose records are there."""
    return load_record_views(run)[0]


def record_paths(run: RunDir, conc: int) -> list[Path]:
    """requests_conc_<N>.jsonl, or (--trials) every trial's requests_conc_<N>_trial_<k>.jsonl,
    pooled as the point is."""
    result = run.results[conc]
    trials = result.trials.trials if result.trials else None
    return (
        [run.requests_file(conc, k) for k in range(1, trials + 1)]
        if trials
        else [run.requests_file(conc)]
    )


def load_record_views(
    run: RunDir,
) -> tuple[dict[int, PointDistributions], dict[int, list[TimelineBar]]]:
    """Each JSONL read once: conc -> distributions, and conc -> timeline for the points
    run with --slice-duration (a timeline of every point would swell the report)."""
    distributions, timelines = {}, {}
    for conc in run.results:
        paths = record_paths(run, conc)
        if paths and all(path.is_file() for path in paths):
            records = [r for path in paths for r in read_jsonl(path)]
            distributions[conc] = point_distributions(records)
            if run.results[conc].slices is not None:
                timelines[conc] = request_timeline(records)
    return distributions, timelines
