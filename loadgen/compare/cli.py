"""`loadgen compare RUN...` and `loadgen report RUN... -o report.html`.

RUN is a result directory or a sweep file's results tree (all its lanes, in the file's
order); the first run is the baseline every ratio is taken against.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from loadgen.compare.capacity_inputs import probe_points
from loadgen.compare.inputs import RunDir, load_runs
from loadgen.compare.lossless_inputs import lossless_check
from loadgen.compare.verdict_inputs import verdicts
from loadgen.errors import LoadgenError, UsageError
from loadgen.metrics.compare import Comparison, compare
from loadgen.metrics.lossless import LosslessCheck
from loadgen.metrics.north_star import NorthStar, north_star
from loadgen.metrics.trust import (
    cache_warnings,
    point_warnings,
    stamp_warnings,
    workload_mismatch,
)
from loadgen.metrics.verdict import RUN_NOISE, metric_rules
from loadgen.results.files import ResultsWriteError
from loadgen.sinks.compare_files import (
    Warning_,
    format_comparison,
    write_comparison_csv,
    write_comparison_json,
)
from loadgen.sinks.north_star_text import north_star_lines
from loadgen.sinks.report_capacity import capacity_line
from loadgen.sinks.verdict_files import format_verdict, write_verdict_json
from loadgen.wording import printable


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _runs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="result directory (holding conc_<N>.json) or a sweep file's "
        "results tree (every lane); the first run is the baseline",
    )


def compare_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="loadgen compare",
        description="Compare runs point by point: per "
        "concurrency throughput, interactivity, TTFT/TPOT p50/p99 and acceptance "
        "with ratios to the first run; speedup at matched concurrency and at matched "
        "interactivity (on each run's throughput-vs-interactivity frontier); the "
        "crossover concurrency.",
    )
    _runs_argument(p)
    p.add_argument("--csv", type=Path, metavar="FILE", help="also write the table as CSV")
    p.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write everything (tables, frontiers, crossovers) as JSON",
    )
    _frontier_argument(p)
    _lossless_arguments(p)
    p.add_argument(
        "--verdict",
        nargs="?",
        const=Path("verdict.json"),
        default=None,
        type=Path,
        metavar="FILE",
        help="judge each run against the baseline per concurrency and metric: better, "
        "worse or no difference, the effect's interval (circular block bootstrap over "
        "the request sequence) and the minimum detectable effect; printed and written "
        "to FILE (default: verdict.json). Runs of different workloads are refused",
    )
    p.add_argument(
        "--verdict-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the bootstrap's random draws (default: 0): the same seed, the same verdict",
    )
    p.add_argument(
        "--verdict-run-noise",
        type=run_noise_arg,
        default=RUN_NOISE,
        metavar="FRAC|METRIC=FRAC,...",
        help="how much two runs of one build differ (relative standard deviation of a "
        "figure between runs), assumed where a side has one trial: one fraction for every "
        "metric, or METRIC=FRAC pairs over the defaults (measured on a shared 2-core "
        "machine, docs/verdict.md); 0: the runs' own intervals alone. With --trials on "
        "a side it is measured instead",
    )
    return p


def run_noise_arg(text: str) -> Mapping[str, float]:
    """--verdict-run-noise: FRAC (every metric) or METRIC=FRAC[,METRIC=FRAC] over RUN_NOISE."""
    metrics = [rule.name for rule in metric_rules()]
    noise = dict(RUN_NOISE)
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if len(parts) == 1 and "=" not in parts[0]:
        return dict.fromkeys(metrics, _fraction(parts[0]))
    for part in parts:
        metric, sep, value = part.partition("=")
        if not sep or metric not in metrics:
            raise argparse.ArgumentTypeError(
                f"{part!r}: expected FRAC or METRIC=FRAC with METRIC one of {', '.join(metrics)}"
            )
        noise[metric] = _fraction(value)
    return noise


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a relative standard deviation is a fraction in [0, 1), e.g. 0.02"
        )
    return value


FRONTIERS = ("interactivity", "north-star")


def _frontier_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--frontier",
        choices=FRONTIERS,
        default="interactivity",
        help="north-star: also InferenceX AgentX's North-Star frontier (throughput per "
        "GPU against p90 E2E normalized interactivity, every run's points as one group) "
        "and the throughput-vs-interactivity frontier gated by it; needs every lane "
        "run with --num-gpus (default: interactivity only)",
    )


def north_star_of(comparison: Comparison, frontier: str) -> NorthStar | None:
    """The North-Star frontier when asked; refused, in one line, without per-GPU figures."""
    if frontier != "north-star":
        return None
    if not comparison.per_gpu:
        raise UsageError(
            "--frontier north-star: some point has no throughput per GPU; run every lane "
            "with --num-gpus N (InferenceX's frontier is per GPU)"
        )
    return north_star(comparison)


def _lossless_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeat-baseline",
        metavar="RUN",
        default=None,
        help="the run (its name or directory) that repeats the baseline's configuration: "
        "the noise floor of the outputs check (default: a run named <baseline>.repeat)",
    )
    parser.add_argument(
        "--require-lossless",
        action="store_true",
        help="exit 1 unless every run's outputs (--record-outputs) are within the noise "
        "floor of the baseline's",
    )


def report_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="loadgen report",
        description="One self-contained HTML file (no network "
        "requests): run settings, comparison tables, throughput-vs-interactivity "
        "frontiers, TTFT/ITL distributions, acceptance per position and client-"
        "health warnings.",
    )
    _runs_argument(p)
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("report.html"),
        metavar="FILE",
        help="where to write the report (default: report.html)",
    )
    p.add_argument(
        "--repeat-baseline",
        metavar="RUN",
        default=None,
        help="the run that repeats the baseline's configuration (the outputs check's "
        "noise floor; default: a run named <baseline>.repeat)",
    )
    _frontier_argument(p)
    return p


def warnings_of(runs: Sequence[RunDir]) -> list[Warning_]:
    return (
        [
            (run.name, conc, message)
            for run in runs
            for conc, point in run.results.items()
            for message in point_warnings(point)
        ]
        + stamp_warnings({run.name: run.results for run in runs})
        + cache_warnings({run.name: run.results for run in runs})
    )


def workload_warning(runs: Sequence[RunDir]) -> str | None:
    return workload_mismatch({run.name: run.workload() for run in runs})


def compare_dirs(runs: Sequence[RunDir]) -> Comparison:
    return compare([run.as_input() for run in runs])


def _paths(runs: Sequence[RunDir]) -> dict[str, str]:
    return {run.name: str(run.path) for run in runs}


class NotLossless(LoadgenError):
    """--require-lossless: some run's outputs are not shown to be the baseline's (exit 1)."""


def require_lossless(check: LosslessCheck | None) -> None:
    """Raise NotLossless, one line, unless every run's outputs are within the noise floor."""
    if check is None:
        raise NotLossless(
            "--require-lossless: no run kept its outputs; run the lanes with --record-outputs"
        )
    failures = check.failures()
    if failures:
        raise NotLossless(f"--require-lossless: {'; '.join(failures)}")


def write_outputs(
    runs: Sequence[RunDir],
    *,
    csv: Path | None = None,
    json: Path | None = None,
    lossless: LosslessCheck | None = None,
    frontier: str = "interactivity",
) -> str:
    """The comparison as text (returned), plus CSV/JSON where asked; `lossless`: the
    outputs check, computed once by the caller for every sink."""
    comparison, warnings = compare_dirs(runs), warnings_of(runs)
    star = north_star_of(comparison, frontier)
    mismatch = workload_warning(runs)
    if csv is not None:
        write_comparison_csv(csv, comparison, _paths(runs), lossless)
    if json is not None:
        write_comparison_json(json, comparison, _paths(runs), warnings, mismatch, lossless, star)
    searches = [capacity_line(r.name, r.capacity.result) for r in runs if r.capacity]
    stars = ["", *north_star_lines(star)] if star is not None else []
    return format_comparison(comparison, warnings, mismatch, lossless) + "".join(
        f"\n{line}" for line in [*stars, *searches]
    )


def build_report(
    runs: Sequence[RunDir],
    output: Path,
    lossless: LosslessCheck | None = None,
    frontier: str = "interactivity",
) -> Path:
    from loadgen.compare.distributions import load_record_views
    from loadgen.sinks.html_report import ReportRun, write_report

    report_runs = [
        ReportRun(
            run.name,
            str(run.path),
            run.run,
            run.results,
            *load_record_views(run),
            capacity=run.capacity.result if run.capacity else None,
            probe_points=probe_points(run.capacity) if run.capacity else {},
        )
        for run in runs
    ]
    comparison = compare_dirs(runs)
    return write_report(
        output,
        report_runs,
        comparison,
        warnings_of(runs),
        generated_unix=time.time(),
        lossless=lossless,
        north_star=north_star_of(comparison, frontier),
    )


def write_verdict(
    runs: Sequence[RunDir], path: Path, seed: int, run_noise: Mapping[str, float] = RUN_NOISE
) -> str:
    """verdict.json at `path` and its console text; refused (one line) when the runs'
    workloads differ."""
    rows, notes = verdicts(runs, seed, run_noise=run_noise)
    write_verdict_json(path, rows)
    return format_verdict(rows, notes)


def publish_tree(tree: Path, verdict: bool = False) -> tuple[Path, LosslessCheck | None]:
    """After a sweep file: the comparison on the console, compare.csv/.json and report.html
    in the tree (and verdict.json with `verdict`). Returns the report's path and the
    outputs check (the caller's --require-lossless judges it, after everything is written)."""
    runs = load_runs([tree])
    check = lossless_check(runs)
    # printable: the table may quote what the files hold (a served model's name)
    text = write_outputs(runs, csv=tree / "compare.csv", json=tree / "compare.json", lossless=check)
    print(printable(text))
    if verdict:
        print(printable(write_verdict(runs, tree / "verdict.json", seed=0)))
    return build_report(runs, tree / "report.html", check), check


def _guard(command: str, argv: Sequence[str]) -> int:
    """Runs `compare` or `report`; a LoadgenError goes up to loadgen.cli, which prints it."""
    try:
        if command == "compare":
            args = compare_parser().parse_args(list(argv))
            runs = load_runs(args.runs)
            check = lossless_check(runs, args.repeat_baseline)
            text = write_outputs(
                runs, csv=args.csv, json=args.json, lossless=check, frontier=args.frontier
            )
            print(printable(text))
            if args.verdict is not None:
                print(
                    printable(
                        write_verdict(runs, args.verdict, args.verdict_seed, args.verdict_run_noise)
                    )
                )
            if args.require_lossless:  # after every file is written: nothing is lost
                require_lossless(check)
        else:
            args = report_parser().parse_args(list(argv))
            runs = load_runs(args.runs)
            check = lossless_check(runs, args.repeat_baseline)
            path = build_report(runs, args.output, check, args.frontier)
            print(f"loadgen: report in {path}", file=sys.stderr)
    except OSError as exc:  # an output path that cannot be written
        raise ResultsWriteError(Path(exc.filename or "the output"), exc) from None
    return 0


def compare_main(argv: Sequence[str]) -> int:
    return _guard("compare", argv)


def report_main(argv: Sequence[str]) -> int:
    return _guard("report", argv)
