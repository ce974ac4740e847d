"""`compare --verdict` calibrated on the simulator: its false-alarm rate and its power.

- A/A: many pairs of runs of one build (the same simulator settings), each run with its
  own seeds (the simulator's draws and loadgen's prompts). Every verdict other than
  no_difference is a false alarm; the rate per test is held against the nominal alpha
  (0.05, two-sided), with a 95% interval: Wilson per metric (the pairs are independent),
  and for all tests pooled a bootstrap over pairs (a pair's metrics share its runs, so
  they are not independent tests).
- A/B: pairs whose second run's simulator steps all cost `factor` times more (the step
  model's three costs, --step-fixed-ms, --decode-token-us and --prefill-token-us, scaled
  together: a build whose every engine step is that much slower); the detection rate is
  the share of pairs judged `worse`, per metric. The order of A and B alternates between
  pairs so a drift of the shared machine does not line up with the change.
- Run noise: how much two runs of one build differ beyond their own intervals, per
  metric, from the A/A pairs' one-trial comparisons (noise_of), and how one-trial
  verdicts that assume it fare: A/A cross-validated by halves, A/B with all pairs'
  estimate. RUN_NOISE in metrics/verdict.py is such an estimate's 90% upper bound;
  the one-trial view above judges with RUN_NOISE as shipped (out of sample on a sitting
  that did not set it).

Every run uses the defaults of a run (10 prompts per concurrency: 80 requests a trial at
--conc 8) at small points (--isl 64 --osl 64) against the embedded simulator, in this
process (no interpreter start per run), with --trials 3; each pair is judged twice: with
all trials (as `compare --verdict` judges runs of --trials 3) and trial k against trial
k as runs of one trial (the default). `--together` runs a pair's two runs at the same
time in two processes instead of one after the other, so a drift of the machine's load
reaches both. The simulator has no time scale: its default step costs (3 ms + 80 us a
decode token) are what the runs take (about 20 minutes for the sizes below).

    .venv/bin/python bench/verdict_calibration.py --aa-pairs 20 --ab-pairs 12 [--together]

Measured on the shared 2-core machine: docs/verdict.md ("Measured false-alarm rate and
power") has the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import NormalDist

import numpy as np

from loadgen.cli import main as loadgen_main
from loadgen.compare.inputs import load_runs
from loadgen.compare.verdict_inputs import series_of, verdicts
from loadgen.metrics.arrays import PointArrays, is_completed
from loadgen.metrics.verdict import (
    ALPHA,
    RUN_NOISE,
    Verdict,
    VerdictRow,
    judge,
    metric_rules,
    point_series,
)
from loadgen.results.jsonl import read_jsonl

STEP = {"--step-fixed-ms": 3.0, "--decode-token-us": 80.0, "--prefill-token-us": 10.0}


def argv_of(path: Path, seed: int, factor: float, concs: str, trials: int) -> list[str]:
    sim_args = " ".join(f"{flag} {value * factor:g}" for flag, value in STEP.items())
    return [
        "--sim",
        "--sim-args",
        f"--seed {seed} {sim_args}",
        "--seed",
        str(seed),
        "--conc",
        concs,
        "--isl",
        "64",
        "--osl",
        "64",
        "--trials",
        str(trials),
        "--encoder",
        "raw",
        "--no-progress",
        "--results",
        str(path),
    ]


def measure(path: Path, seed: int, factor: float, concs: str, trials: int) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = loadgen_main(argv_of(path, seed, factor, concs, trials))
    if code != 0:
        raise SystemExit(f"run {path} exited {code}")


def measure_pair(
    root: Path, index: int, factor: float, concs: str, trials: int, together: bool
) -> None:
    """Baseline (factor 1) and run (factor): one after the other, in alternating order,
    or (`together`) at the same time in two processes, so a drift of the shared
    machine's load reaches both alike."""
    base, other = root / f"p{index}_a", root / f"p{index}_b"
    order = [(base, 1.0), (other, factor)]
    seeds = {base: 2 * index + int(factor * 1000), other: 2 * index + 1 + int(factor * 1000)}
    if together:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "loadgen", *argv_of(path, seeds[path], f, concs, trials)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for path, f in order
        ]
        if any(proc.wait() != 0 for proc in procs):
            raise SystemExit(f"pair {index} of {root} failed")
        return
    for path, f in order if index % 2 == 0 else order[::-1]:
        measure(path, seeds[path], f, concs, trials)


def judged(root: Path, index: int) -> list[VerdictRow]:
    """The pair as `compare --verdict` judges it: every trial of each run."""
    rows, _ = verdicts(load_runs([root / f"p{index}_a", root / f"p{index}_b"]), seed=index)
    return rows


def judged_per_trial(
    root: Path, index: int, run_noise: Mapping[str, float] = RUN_NOISE
) -> list[list[VerdictRow]]:
    """Trial k of the baseline against trial k of the run, each as if it were a run of
    one trial (the default): how a single-trial verdict fares, with `run_noise` assumed."""
    runs = load_runs([root / f"p{index}_a", root / f"p{index}_b"])
    out = []
    for conc in sorted(runs[0].results):
        trials = runs[0].results[conc].trials
        for k in range(1, (trials.trials if trials else 1) + 1):
            pair = tuple(
                point_series(
                    [
                        PointArrays.build(
                            sorted(
                                (
                                    r
                                    for r in read_jsonl(run.requests_file(conc, k))
                                    if is_completed(r)
                                ),
                                key=lambda r: r.start_ns,
                            )
                        )
                    ],
                    run.results[conc].metrics.spec_tokens,
                    None,
                )
                for run in runs
            )
            out.append(
                judge(
                    ("a", "b"),
                    conc,
                    (pair[0], pair[1]),
                    np.random.default_rng(index * 10 + k),
                    run_noise=run_noise,
                )
            )
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def keyed(rows: Sequence[VerdictRow]) -> dict[tuple[int, str], Verdict]:
    return {(r.conc, r.metric): r.verdict for r in rows if r.verdict is not None}


def aa_summary(pairs: list[dict[tuple[int, str], Verdict]]) -> list[str]:
    lines = [f"A/A: {len(pairs)} pairs of one build; nominal false-alarm rate {ALPHA:.0%} per test"]
    keys = sorted({k for p in pairs for k in p})
    for key in keys:
        judged = [p[key] for p in pairs if key in p]
        alarms = sum(v != Verdict.NO_DIFFERENCE for v in judged)
        lo, hi = wilson(alarms, len(judged))
        lines.append(
            f"  conc {key[0]:<4} {key[1]:<24} {alarms}/{len(judged)} = "
            f"{alarms / len(judged):.1%}  [95%: {lo:.1%}, {hi:.1%}]"
        )
    counts = np.array(
        [[sum(v != Verdict.NO_DIFFERENCE for v in p.values()), len(p)] for p in pairs]
    )
    rate = counts[:, 0].sum() / counts[:, 1].sum()
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(pairs), size=(2000, len(pairs)))
    boot = counts[draws, 0].sum(axis=1) / counts[draws, 1].sum(axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    any_alarm = sum(1 for p in pairs if any(v != Verdict.NO_DIFFERENCE for v in p.values()))
    lines.append(
        f"  pooled: {counts[:, 0].sum()}/{counts[:, 1].sum()} tests = {rate:.1%} "
        f"[95% over pairs: {lo:.1%}, {hi:.1%}]; pairs with any alarm: "
        f"{any_alarm}/{len(pairs)}"
    )
    return lines


def ab_summary(factor: float, pairs: list[dict[tuple[int, str], Verdict]]) -> list[str]:
    lines = [f"A/B: step time x{factor:g}, {len(pairs)} pairs: share judged worse (better)"]
    for key in sorted({k for p in pairs for k in p}):
        judged = [p[key] for p in pairs if key in p]
        worse = sum(v == Verdict.WORSE for v in judged)
        better = sum(v == Verdict.BETTER for v in judged)
        lo, hi = wilson(worse, len(judged))
        lines.append(
            f"  conc {key[0]:<4} {key[1]:<24} {worse}/{len(judged)} = "
            f"{worse / len(judged):.0%} [95%: {lo:.0%}, {hi:.0%}] ({better} better)"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aa-pairs", type=int, default=20)
    parser.add_argument("--ab-pairs", type=int, default=12)
    parser.add_argument("--factors", default="1.03,1.10")
    parser.add_argument("--conc", default="8")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--keep", type=Path, help="keep the runs here (default: a temporary directory)"
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="run each pair's two runs at the same time (default: one after the other)",
    )
    parser.add_argument("--from", dest="source", type=Path, help="judge runs kept by --keep")
    args = parser.parse_args()
    started = time.perf_counter()
    factors = [float(f) for f in args.factors.split(",")]
    sets = [("aa", 1.0, args.aa_pairs)] + [(f"ab{f:g}", f, args.ab_pairs) for f in factors]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.source or args.keep or Path(tmp)
        print(f"--conc {args.conc} --trials {args.trials}, 10 prompts per conc", flush=True)
        if args.source is None:
            for name, factor, count in sets:
                for i in range(count):
                    measure_pair(root / name, i, factor, args.conc, args.trials, args.together)
        print(f"measured in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        for view, rows_of in (
            (f"all {args.trials} trials a side (--trials {args.trials})", pooled_view),
            ("one trial a side (each trial pair as a run of its own, the default)", trial_view),
        ):
            print(f"== {view}", flush=True)
            for name, factor, count in sets:
                pairs = [p for i in range(count) for p in rows_of(root / name, i)]
                summary = aa_summary(pairs) if factor == 1.0 else ab_summary(factor, pairs)
                for line in summary:
                    print(line, flush=True)
        if args.aa_pairs >= 4:
            for line in noise_study(root, sets):
                print(line, flush=True)
        if args.trials > 1:
            for line in drift_ratio(root / "aa", args.aa_pairs, args.conc):
                print(line, flush=True)
    print(f"took {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


def drift_ratio(root: Path, count: int, concs: str) -> list[str]:
    """Per metric, the variance of the A/A runs' mean log figure over what their trials'
    spread predicts (trial variance / trials): 1 when runs differ only as trials do."""
    runs = [root / f"p{i}_{side}" for i in range(count) for side in "ab"]
    lines = ["A/A runs: variance of a run's mean over what its trials' spread predicts"]
    for conc in (int(c) for c in concs.split(",")):
        for rule in metric_rules():
            if rule.name == "joules_per_output_token":  # the simulator runs have no energy
                continue
            logs = []
            for path in runs:
                s = series_of(load_runs([path])[0], conc)
                if s is None or len(s.segments) < 2:
                    continue
                per = []
                for lo, hi in s.segments:
                    w = np.zeros((1, s.requests))
                    w[0, lo:hi] = 1.0
                    per.append(float(rule.statistic(s, w)[0]))
                if all(v > 0 for v in per):
                    logs.append(np.log(per))
            if len(logs) < 3:
                continue
            table = np.array(logs)
            trial_var = float(table.var(axis=1, ddof=1).mean())
            run_var = float(table.mean(axis=1).var(ddof=1))
            lines.append(
                f"  conc {conc:<4} {rule.name:<24} {run_var / (trial_var / table.shape[1]):.1f}"
                f" ({table.shape[0]} runs)"
            )
    return lines


NO_NOISE: Mapping[str, float] = {}  # judge assumes none for a metric it is not given


def noise_of(pairs: Sequence[Sequence[VerdictRow]]) -> dict[str, float]:
    """Per metric, the run effect's relative SD from one-trial A/A comparisons judged
    with no run noise: each comparison's squared log ratio d^2 has expectation
    se_within^2 + 2 tau^2, so tau^2 = max(0, mean(d^2 - se^2) / 2); se from the
    within-run interval (normal, alpha = ALPHA)."""
    q = NormalDist().inv_cdf(1 - ALPHA / 2)
    excess: dict[str, list[float]] = {}
    for rows in pairs:
        for r in rows:
            if r.effect is None or r.interval is None:
                continue
            d = math.log1p(r.effect)
            se = (math.log1p(r.interval[1]) - math.log1p(r.interval[0])) / (2 * q)
            excess.setdefault(r.metric, []).append(d * d - se * se)
    return {m: math.sqrt(max(0.0, float(np.mean(v)) / 2)) for m, v in excess.items()}


def noise_study(root: Path, sets: Sequence[tuple[str, float, int]]) -> list[str]:
    """The run noise these A/A runs show (one trial a side), and how verdicts that
    assume it fare: A/A cross-validated (each half of the pairs judged with the noise
    the other half shows, so no pair calibrates its own verdict), A/B with the noise
    of all A/A pairs."""
    count = next(c for name, _, c in sets if name == "aa")
    bare = {i: judged_per_trial(root / "aa", i, NO_NOISE) for i in range(count)}
    every = noise_of([rows for i in bare for rows in bare[i]])
    lines = ["== run noise shown by the A/A runs (relative SD of a run's figure between runs)"]
    lines += [f"  {metric:<24} {value:.2%}" for metric, value in sorted(every.items())]
    halves = [[i for i in range(count) if i % 2 == h] for h in (0, 1)]
    cross: list[dict[tuple[int, str], Verdict]] = []
    for h in (0, 1):
        noise = noise_of([rows for i in halves[1 - h] for rows in bare[i]])
        cross += [
            keyed(rows) for i in halves[h] for rows in judged_per_trial(root / "aa", i, noise)
        ]
    lines.append("== one trial a side, run noise from the other half's A/A pairs (cross-validated)")
    lines += aa_summary(cross)
    lines.append("== one trial a side, run noise of all A/A pairs")
    for name, factor, n in sets:
        if factor == 1.0:
            continue
        pairs = [keyed(rows) for i in range(n) for rows in judged_per_trial(root / name, i, every)]
        lines += ab_summary(factor, pairs)
    return lines


def pooled_view(root: Path, index: int) -> list[dict[tuple[int, str], Verdict]]:
    return [keyed(judged(root, index))]


def trial_view(root: Path, index: int) -> list[dict[tuple[int, str], Verdict]]:
    return [keyed(rows) for rows in judged_per_trial(root, index)]


if __name__ == "__main__":
    raise SystemExit(main())
