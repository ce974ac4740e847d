"""Each point's latency distributions from its per-request records, for the report."""

from __future__ import annotations

from loadgen.compare.inputs import RunDir
from loadgen.metrics.distributions import PointDistributions, point_distributions
from loadgen.results.jsonl import read_jsonl


def load_distributions(run: RunDir) -> dict[int, PointDistributions]:
    """conc -> distributions, for the points whose requests_conc_<N>.jsonl is there."""
    found = {}
    for conc in run.points:
        path = run.requests_file(conc)
        if path.is_file():
            found[conc] = point_distributions(read_jsonl(path))
    return found
