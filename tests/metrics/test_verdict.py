"""The verdict's statistics (metrics/verdict.py) on records built here: the block-length
rule, the circular block bootstrap's draws, Student's t, the between-trials variance and
the too-few rule. Records are built rather than measured because each test needs a
sequence whose correlation or spread it sets exactly (the end-to-end tests on the
simulator are tests/compare/test_verdict_end_to_end.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from loadgen.metrics.arrays import PointArrays
from loadgen.metrics.verdict import (
    MIN_BLOCKS,
    RUN_NOISE,
    PointSeries,
    Verdict,
    _Spread,
    block_length,
    judge,
    log_ratio_se,
    point_series,
    resample_weights,
    t_quantile,
)
from loadgen.records import RequestRecord, TokenSource

MS = 1_000_000


def records(tpot_ms: Sequence[float], conc: int, tokens: int = 9) -> list[RequestRecord]:
    """Closed-loop requests `conc` at a time, request i streaming `tokens` chunks
    tpot_ms[i] apart after a 10 ms TTFT."""
    out, free = [], [0] * conc
    for i, gap in enumerate(tpot_ms):
        slot = int(np.argmin(free))
        start = free[slot]
        chunks = tuple(start + 10 * MS + int(k * gap * MS) for k in range(tokens))
        free[slot] = chunks[-1] + 1
        out.append(
            RequestRecord(
                request_id=i,
                conc=conc,
                input_len=8,
                max_tokens=tokens,
                scheduled_ns=start,
                start_ns=start,
                connect_ns=0,
                chunk_ns=chunks,
                chunk_tokens=(1,) * tokens,
                end_ns=chunks[-1],
                token_source=TokenSource.TOKEN_IDS,
                completion_tokens=tokens,
            )
        )
    return out


def series(*trials: Sequence[float], conc: int = 4) -> PointSeries:
    return point_series([PointArrays.build(records(t, conc)) for t in trials], None, None)


def test_block_length_is_the_larger_of_cube_root_and_requests_in_flight() -> None:
    # 1000 requests, 8 in flight on average: ceil(1000^(1/3)) = 10 > 8
    assert block_length(1000, np.full(1000, 8000.0), 1000.0) == 10
    # 64 requests, 16 in flight: 16 > 4
    assert block_length(64, np.full(64, 16000.0), 64.0) == 16
    # the rule on a real closed-loop sequence: conc 8 keeps ~8 in flight
    s = series([5.0] * 200, conc=8)
    assert s.blocks == (8,)


def test_circular_blocks_draw_each_segment_to_its_own_length() -> None:
    s = series([5.0] * 30, [5.0] * 50, conc=4)
    w = resample_weights(s, 200, np.random.default_rng(1))
    assert w.shape == (200, 80)
    np.testing.assert_array_equal(w[:, :30].sum(axis=1), 30)  # trial 1 draws only itself
    np.testing.assert_array_equal(w[:, 30:].sum(axis=1), 50)
    # every request is drawn: the blocks wrap around (circular), so the ends are not rarer
    ends = w[:, [0, 29]].mean(axis=0)
    middle = w[:, 10:20].mean()
    assert np.all(np.abs(ends - middle) < 0.5)


def test_student_t_against_tabulated_quantiles() -> None:
    table = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 10: 2.2281, 30: 2.0423}
    for df, value in table.items():
        assert t_quantile(0.975, df) == pytest.approx(value, rel=2e-3)


def test_between_trial_spread_widens_the_interval_and_takes_t() -> None:
    quiet = _Spread(within=1e-4, trials=(0.0, 0.001, -0.001))
    noisy = _Spread(within=1e-4, trials=(0.0, 0.05, -0.05))
    se_quiet, df = log_ratio_se(quiet, quiet)
    se_noisy, _ = log_ratio_se(noisy, noisy)
    assert df == 4
    # quiet trials: their spread is what the within-run variance explains: no run effect
    assert se_quiet == pytest.approx(math.sqrt(2e-4))
    # noisy: tau^2 = 0.0025 - 3 x 1e-4, added / 3 per side
    assert se_noisy == pytest.approx(math.sqrt(2e-4 + 2 * (0.0025 - 3e-4) / 3))
    single, none = log_ratio_se(_Spread(1e-4, ()), _Spread(1e-4, ()))
    assert none is None and single == pytest.approx(math.sqrt(2e-4))


def test_an_assumed_run_noise_widens_only_a_one_trial_interval() -> None:
    one = _Spread(1e-4, ())
    se, df = log_ratio_se(one, one, 0.02)
    # a known variance per side: tau^2 = 0.02^2 each, the interval stays normal
    assert df is None and se == pytest.approx(math.sqrt(2e-4 + 2 * 0.02**2))
    # with trials the run effect is measured: the assumed figure is not used
    quiet = _Spread(within=1e-4, trials=(0.0, 0.001, -0.001))
    assert log_ratio_se(quiet, quiet, 0.02) == log_ratio_se(quiet, quiet)


def test_a_one_trial_verdict_says_the_run_noise_it_assumed() -> None:
    rng = np.random.default_rng(3)
    base = list(5.0 + rng.normal(0, 0.05, 160))
    a, b = series(base), series([v * 1.06 for v in base[::-1]])
    zero = dict.fromkeys(RUN_NOISE, 0.0)
    bare = {r.metric: r for r in judge(("a", "b"), 4, (a, b), rng, run_noise=zero)}
    assert bare["p50_tpot_ms"].verdict is Verdict.WORSE
    assert bare["p50_tpot_ms"].run_to_run == "not_measured"
    assert bare["p50_tpot_ms"].run_noise is None
    # +6 % inside what two runs of one build may differ by at 5 % each: not a verdict
    noisy = {**zero, "p50_tpot_ms": 0.05}
    rows = {r.metric: r for r in judge(("a", "b"), 4, (a, b), rng, run_noise=noisy)}
    row = rows["p50_tpot_ms"]
    assert row.verdict is Verdict.NO_DIFFERENCE and row.effect == bare["p50_tpot_ms"].effect
    assert row.run_to_run == "assumed" and row.run_noise == 0.05
    assert row.mde is not None and bare["p50_tpot_ms"].mde is not None
    assert row.mde > bare["p50_tpot_ms"].mde + 0.1  # (1.96 + 0.84) x 5 % x sqrt(2) ~ 20 %
    assert rows["output_throughput"].run_to_run == "not_measured"


def test_a_correlated_sequence_gets_a_wider_interval_than_an_independent_one() -> None:
    rng = np.random.default_rng(7)
    independent = [float(v) for v in 5.0 + rng.normal(0, 0.5, 240)]
    # the same spread in runs of 24 consecutive requests (what a shared slow step does)
    drift = [float(v) for v in np.repeat(5.0 + rng.normal(0, 0.5, 10), 24)]
    widths: dict[str, float] = {}
    for name, values in (("independent", independent), ("correlated", drift)):
        a, b = series(values), series(values[::-1])
        row = next(
            r
            for r in judge(("a", "b"), 4, (a, b), np.random.default_rng(0))
            if r.metric == "p50_tpot_ms"
        )
        assert row.interval is not None
        widths[name] = row.interval[1] - row.interval[0]
    assert widths["correlated"] > 2 * widths["independent"]


def test_a_clear_slowdown_is_worse_and_the_same_run_is_no_difference() -> None:
    rng = np.random.default_rng(3)
    base = list(5.0 + rng.normal(0, 0.2, 160))
    slower = [v * 1.10 for v in base[::-1]]
    a, b = series(base), series(slower)
    rows = {r.metric: r for r in judge(("a", "b"), 4, (a, b), np.random.default_rng(0))}
    assert rows["p50_tpot_ms"].verdict is Verdict.WORSE
    assert rows["p50_tpot_ms"].effect == pytest.approx(0.10, abs=0.02)
    assert rows["output_throughput"].verdict is Verdict.WORSE
    same = {r.metric: r for r in judge(("a", "a"), 4, (a, a), np.random.default_rng(0))}
    assert same["p50_tpot_ms"].verdict is Verdict.NO_DIFFERENCE
    assert same["p50_tpot_ms"].effect == 0.0


def test_too_few_requests_is_said_not_judged() -> None:
    a = series([5.0] * 12, conc=4)  # 12 requests in blocks of 4: 3 blocks
    rows = judge(("a", "b"), 4, (a, a), np.random.default_rng(0))
    assert rows and all(r.verdict is None and r.interval is None for r in rows)
    assert all(r.reason and "too few requests" in r.reason for r in rows)
    assert f"at least {MIN_BLOCKS} blocks" in (rows[0].reason or "")
    # enough requests for the medians, too few for a p99 (fewer than 5 beyond it)
    b = series([5.0] * 100, conc=4)
    by = {r.metric: r for r in judge(("a", "b"), 4, (b, b), np.random.default_rng(0))}
    assert by["p50_ttft_ms"].verdict is Verdict.NO_DIFFERENCE
    assert by["p99_ttft_ms"].verdict is None
    assert "at least 500" in (by["p99_ttft_ms"].reason or "")


def test_the_same_seed_gives_the_same_verdict() -> None:
    rng = np.random.default_rng(5)
    a, b = series(list(5 + rng.normal(0, 1, 120))), series(list(5 + rng.normal(0, 1, 120)))
    one = judge(("a", "b"), 4, (a, b), np.random.default_rng(11))
    two = judge(("a", "b"), 4, (a, b), np.random.default_rng(11))
    assert one == two
