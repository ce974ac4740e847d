"""`compare` with --trials points: a difference inside both runs' 95 % intervals is called
"within noise" (with its ratio), one outside them is a plain ratio; the intervals are
read from the point files' `trial_spread` as run/assemble.py writes it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from loadgen.metrics.compare import RunInput, compare
from loadgen.results.point import PointResult, point_from_json
from loadgen.run.assemble import figure_spread
from loadgen.sinks.compare_files import csv_rows, format_comparison
from tests.support.fake_records import point_file


def typed(fields: dict[str, Any]) -> PointResult:
    """A whole point (point_file's) with `fields`, read as compare reads a file."""
    return point_from_json(point_file(fields), "test")


def point(conc: int, throughputs: list[float], pooled: float | None = None) -> PointResult:
    """A pooled point whose output throughput moved like `throughputs` over its trials."""
    mean = sum(throughputs) / len(throughputs)
    trials = len(throughputs)
    return typed(
        {
            "max_concurrency": conc,
            "output_throughput": mean if pooled is None else pooled,
            "median_interactivity_tok_s_user": 100.0,
            "median_ttft_ms": 10.0,
            "p99_ttft_ms": 20.0,
            "median_tpot_ms": 10.0,
            "p99_tpot_ms": 11.0,
            "stream_acceptance_length": None,
            "trials": trials,
            "trial_seeds": list(range(trials)),
            "trial_files": [f"conc_{conc}_trial_{k}.json" for k in range(1, trials + 1)],
            "trial_ci_method": "student_t_95",
            "trial_spread": {"output_throughput": msgspec.to_builtins(figure_spread(throughputs))},
        }
    )


def test_overlapping_intervals_are_within_noise_and_apart_ones_a_ratio() -> None:
    base = RunInput("base", {1: point(1, [100.0, 104.0, 96.0]), 2: point(2, [200, 202, 198])})
    other = RunInput(
        "other",
        {1: point(1, [103.0, 99.0, 101.0]), 2: point(2, [300.0, 303.0, 297.0], pooled=310.0)},
    )
    comparison = compare([base, other])
    [at_1] = [r for r in comparison.rows_at(1) if r.run == "other"]
    [at_2] = [r for r in comparison.rows_at(2) if r.run == "other"]
    assert at_1.noise["throughput"] is True and at_2.noise["throughput"] is False
    assert at_1.noise["ttft_p50_ms"] is None  # no interval for it: no verdict
    # t(0.975, 2) = 4.3027, std 2 over 3 trials
    assert at_1.halves["throughput"] == pytest.approx(4.3027 * 2 / 3**0.5)
    text = format_comparison(comparison)
    assert "101.0 ±4.97 within noise (x1.01)" not in text  # one decimal for throughput
    assert "101.0 ±5.0 within noise (x1.01)" in text
    assert "300.0 ±7.5 x1.50" in text  # the trials' mean and the ratio of means, not 310
    assert "1 within noise (x1.01), 2 x1.50" in text  # the matched-concurrency summary
    rows = {(r["run"], r["conc"]): r for r in csv_rows(comparison, {})}
    assert rows[("other", 1)]["throughput_within_noise"] is True
    assert rows[("other", 2)]["throughput_within_noise"] is False
    assert rows[("base", 1)]["throughput_within_noise"] is True  # itself, trivially


def test_points_without_trials_keep_their_bare_ratio() -> None:
    plain = typed(
        {
            "max_concurrency": 1,
            "output_throughput": 150.0,
            "median_interactivity_tok_s_user": 100.0,
        }
    )
    comparison = compare(
        [RunInput("base", {1: point(1, [100.0, 101.0])}), RunInput("other", {1: plain})]
    )
    [row] = [r for r in comparison.rows if r.run == "other"]
    assert row.noise["throughput"] is None and row.halves["throughput"] is None
    assert "150.0 x1.49" in format_comparison(comparison)  # over the mean, 100.5
