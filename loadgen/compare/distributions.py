"""Each point's latency distributions (and, for a point with time slices, its request
timeline) from its per-request records, for the report."""

from __future__ import annotations

from loadgen.compare.inputs import RunDir
from loadgen.metrics.distributions import PointDistributions, point_distributions
from loadgen.metrics.timeline import TimelineBar, request_timeline
from loadgen.results.jsonl import read_jsonl


def load_distributions(run: RunDir) -> dict[int, PointDistributions]:
    """conc -> distributions, for the points whose requests_conc_<N>.jsonl is there."""
    return load_record_views(run)[0]


def load_record_views(run: RunDir) -> tuple[dict[int, PointDistributions],
                                            dict[int, list[TimelineBar]]]:
    """Each JSONL read once: conc -> distributions, and conc -> timeline for the points
    run with --slice-duration (a timeline of every point would swell the report)."""
    distributions, timelines = {}, {}
    for conc in run.points:
        path = run.requests_file(conc)
        if path.is_file():
            records = read_jsonl(path)
            distributions[conc] = point_distributions(records)
            if run.results[conc].slices is not None:
                timelines[conc] = request_timeline(records)
    return distributions, timelines
