"""--target-precision against the real simulator through the real CLI: a quiet simulator
lets the point stop well before its request count, and what it publishes is never wider
than asked, recomputed here from the point's own records with the order-statistic
interval built in exact integer arithmetic (not loadgen's numpy)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from tests.support.procs import one_error_line, point, run_loadgen

QUIET = "--step-fixed-ms 2 --spin-us 0"


def run(tmp_path: Path, target: str, prompts_per_conc: int, conc: int = 8) -> Path:
    results = tmp_path / "r"
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            QUIET,
            "--conc",
            str(conc),
            "--isl",
            "32",
            "--osl",
            "16",
            "--encoder",
            "raw",
            "--prompts-per-conc",
            str(prompts_per_conc),
            "--warmup-per-conc",
            "1",
            "--no-progress",
            "--target-precision",
            target,
            "--results",
            str(results),
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return results


def ttft_ms(records: list[RequestRecord]) -> list[float]:
    return [(r.chunk_ns[0] - r.start_ns) / 1e6 for r in records if r.ok and r.chunk_ns]


def exact_interval(values: list[float], pct: int) -> tuple[float, float, float]:
    """(low, high, linear percentile): orders l, u with P(X < l) <= 2.5 % and
    P(X >= u) <= 2.5 %, X ~ Binomial(n, pct/100), summed in integers over 100^n."""
    n, ordered = len(values), sorted(values)
    scale, cdf, total = 100**n, [], 0
    for k in range(n + 1):
        total += math.comb(n, k) * pct**k * (100 - pct) ** (n - k)
        cdf.append(total)
    low = max(r for r in range(1, n + 1) if cdf[r - 1] * 40 <= scale)
    high = min(r for r in range(1, n + 1) if cdf[r - 1] * 40 >= 39 * scale)
    return ordered[low - 1], ordered[high - 1], float(np.percentile(values, pct))


def test_a_quiet_point_stops_early_and_never_wider_than_asked(tmp_path: Path) -> None:
    results = run(tmp_path, "ttft:p90:0.05", prompts_per_conc=500)
    p = point(results, 8)
    outcome = p["target_precision"]
    assert outcome["reached"] is True
    assert p["completed"] < p["planned_requests"] == 4000  # earlier than the fixed count
    assert outcome["samples"] == p["completed"]
    records = read_jsonl(results / "requests_conc_8.jsonl")  # in the order they ended
    low, high, value = exact_interval(ttft_ms(records), 90)
    assert (high - low) / 2 / value < 0.05  # what the point publishes, recomputed
    assert value == p["p90_ttft_ms"] == outcome["value_ms"]
    assert (low, high) == (outcome["low_ms"], outcome["high_ms"])
    assert outcome["relative"] <= outcome["worst_relative_at_stop"] < 0.05
    # the stop was judged on the records that had ended by then
    at_stop = ttft_ms(records[: outcome["requests_at_stop"]])
    low, high, value = exact_interval(at_stop, 90)
    assert (low, high, value) == (
        outcome["low_at_stop_ms"],
        outcome["high_at_stop_ms"],
        outcome["value_at_stop_ms"],
    )
    assert (high - low) / 2 / value == outcome["relative_at_stop"] < 0.05


def test_an_unreachable_target_is_bounded_by_the_request_count(tmp_path: Path) -> None:
    results = run(tmp_path, "e2el:p99:0.0001", prompts_per_conc=40, conc=4)
    p = point(results, 4)
    outcome = p["target_precision"]
    assert outcome["reached"] is False and outcome["requests_at_stop"] is None
    assert p["completed"] == p["planned_requests"] == 160
    assert outcome["relative"] is None  # 160 samples cannot bound a p99 at 95 %
    assert outcome["checks"] >= 1


def test_bad_values_are_one_line(tmp_path: Path) -> None:
    for value, says in (
        ("ttft:p100:0.05", "between 0 and 100"),
        ("ttft:p99:1.5", "FRACTION must be between 0 and 1"),
        ("itl:p99:0.05", "METRIC must be one of ttft, tpot, e2el"),
        ("ttft:p99", "METRIC:PCTL:FRACTION"),
    ):
        done = run_loadgen(["--sim", "--conc", "1", "--target-precision", value])
        assert done.returncode != 0
        assert says in one_error_line(done.stderr), done.stderr
    done = run_loadgen(
        ["--sim", "--conc", "1", "--request-rate", "5", "--target-precision", "ttft:p99:0.05"]
    )
    assert "closed-loop" in one_error_line(done.stderr)
