"""`--profile mlperf-endpoints`: the rehearsal's points one after another, each mandatory
point's accuracy run straight after it at the same concurrency, then the summary.

Each point is a run of its own in `<results>/conc_<NNNNN>/` (a tree `loadgen compare`
reads as one lane per point, in order), so its accuracy run can follow it before the
next point starts: the rules want accuracy measured right after its performance run
(the sweep's own --accuracy runs them all after the last point). The summary
(metrics/endpoints_rules.py) is printed and written as mlperf_endpoints.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

from loadgen.config import endpoints_profile
from loadgen.config.output import default_results_dir
from loadgen.config.spec import RunSpec
from loadgen.metrics.endpoints_rules import Measured, summarize
from loadgen.orchestrate.accuracy import AccuracyData, measure_accuracy
from loadgen.orchestrate.measure import measure
from loadgen.results.accuracy import AccuracyResult
from loadgen.results.point import PointResult
from loadgen.sinks.endpoints_summary import format_summary, write_summary

SUMMARY_FILE = "mlperf_endpoints.json"


def point_dir(root: Path, conc: int) -> Path:
    return root / f"conc_{conc:05d}"


async def rehearse(spec: RunSpec, accuracy: AccuracyData | None) -> int:
    """Every planned point, accuracy after each mandatory one; the exit status is the
    worst of the points' and accuracy runs' (an unmet rule is said, not an error)."""
    plan = endpoints_profile.plan(spec.load.conc)
    root = spec.output.results_dir or default_results_dir()
    points: dict[int, PointResult] = {}
    scores: dict[int, AccuracyResult] = {}
    after: dict[int, bool] = {}
    status = 0
    for planned in plan.points:
        point_spec = spec.with_(
            conc=(planned.conc,),
            results_dir=point_dir(root, planned.conc),
            accuracy_conc=(planned.conc,),
        )
        outcome = await measure(point_spec)
        status = max(status, outcome.exit_code)
        points.update({p.conc: p.result for p in outcome.points})
        if outcome.interrupted:
            break
        if planned.mandatory and accuracy is not None:
            checked = await measure_accuracy(point_spec, accuracy, outcome.results_dir)
            for line in checked.lines():
                print(f"loadgen: conc {planned.conc}: {line}", file=sys.stderr)
            status = max(status, checked.exit_code)
            for score in checked.points:
                scores[score.conc] = score
                after[score.conc] = True  # nothing ran between the point and its accuracy
            if checked.sweep.interrupted:
                break
    summary = summarize(
        plan,
        Measured(
            points=points,
            accuracy=scores,
            accuracy_after=after,
            spec_synthetic=spec.scoring.spec_synthetic,
            accuracy_min=spec.scoring.accuracy_min,
        ),
    )
    path = write_summary(root / SUMMARY_FILE, summary)
    print(format_summary(summary))
    print(f"loadgen: MLPerf Endpoints rehearsal summary in {path}", file=sys.stderr)
    return status
