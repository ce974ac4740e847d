"""Each point's latency distributions from its per-request records, for the report."""

from __future__ import annotations

from loadgen.compare.inputs import RunDir
from loadgen.metrics.distributions import PointDistributions, point_distributions
from loadgen.results.jsonl import read_jsonl


def load_distributions(run: RunDir) -> dict[int, PointDistributions]:
    """conc -> distributions, for the points whose records are there: requests_conc_<N>.jsonl,
    or (--trials) every trial's requests_conc_<N>_trial_<k>.jsonl, pooled as the point is."""
    found = {}
    for conc, result in run.results.items():
        trials = result.trials.trials if result.trials else None
        paths = ([run.requests_file(conc, k) for k in range(1, trials + 1)] if trials
                 else [run.requests_file(conc)])
        if paths and all(path.is_file() for path in paths):
            found[conc] = point_distributions([r for path in paths for r in read_jsonl(path)])
    return found
