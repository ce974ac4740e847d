"""vLLM's ramp-up schedule (workload/ramp.py) and its flags."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.spec import RunSpec, SpecError
from loadgen.run.arrivals import point_offsets_ns
from loadgen.workload.ramp import ramp_offsets_ns, ramp_rates


def test_linear_rates_are_interpolated_over_the_request_count() -> None:
    rates = ramp_rates(5, "linear", 2.0, 10.0)
    assert rates == pytest.approx([2.0, 4.0, 6.0, 8.0, 10.0])
    assert ramp_rates(1, "linear", 2.0, 10.0) == [2.0]  # vLLM: max(N - 1, 1)


def test_exponential_rates_are_geometric() -> None:
    rates = ramp_rates(5, "exponential", 1.0, 16.0)
    assert rates == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0])
    with pytest.raises(ValueError):
        ramp_rates(3, "cubic", 1.0, 2.0)


def test_each_gap_has_its_own_requests_rate() -> None:
    """Gap i has mean 1 / r_i: over many seeded draws, the mean gap of the first requests
    of a 1 -> 100 req/s ramp is ~1 s and of the last ~10 ms (Poisson: std = mean)."""
    rates = ramp_rates(200, "linear", 1.0, 100.0)
    draws = np.array([np.diff([0, *ramp_offsets_ns(rates, 1.0, np.random.default_rng(s))])
                      for s in range(400)]) / 1e9
    mean_gap = draws.mean(axis=0)
    expected = 1 / np.asarray(rates)
    # 400 draws: the standard error of each mean gap is expected / 20; 5 of them
    assert np.all(np.abs(mean_gap - expected) < 5 * expected / 20)
    offsets = ramp_offsets_ns(rates, 1.0, np.random.default_rng(0))
    assert offsets == sorted(offsets) and offsets[0] > 0  # vLLM waits a gap before the first


def test_burstiness_keeps_the_mean_and_changes_the_spread() -> None:
    rates = [10.0] * 20000
    smooth = np.diff(ramp_offsets_ns(rates, 4.0, np.random.default_rng(1))) / 1e9
    assert smooth.mean() == pytest.approx(0.1, rel=0.03)
    assert smooth.std() / smooth.mean() == pytest.approx(1 / math.sqrt(4.0), rel=0.05)


def test_the_point_uses_the_ramp_from_its_seed(tmp_path: Path) -> None:
    spec = RunSpec(conc=(4,), isl=64, osl=8, sim=True, ramp_up_strategy="exponential",
                   ramp_up_start_rps=1.0, ramp_up_end_rps=50.0, results_dir=tmp_path)
    assert spec.open_loop
    first = point_offsets_ns(spec, 4)
    assert first == point_offsets_ns(spec, 4) and len(first) == 40  # seeded, conc x 10
    assert first != point_offsets_ns(dataclasses.replace(spec, seed=1), 4)
    rates = ramp_rates(40, "exponential", 1.0, 50.0)
    gaps = np.diff([0, *first])
    assert gaps[:5].mean() > 10 * gaps[-5:].mean()  # slow at first, fast at the end
    assert rates[0] == 1.0 and rates[-1] == pytest.approx(50.0)


@pytest.mark.parametrize(("flags", "message"), [
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "both"),
    (["--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2"], "need --ramp-up-strategy"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "5", "--ramp-up-end-rps", "2"],
     "a ramp goes up"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "2"],
     "> 0"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2",
      "--request-rate", "3"], "drop --request-rate"),
    (["--slice-duration", "0"], "--slice-duration"),
    (["--saturation-window", "-1"], "--saturation-window"),
])
def test_bad_load_flags_are_one_line(flags: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=message):
        spec_from_argv(["--sim", "--conc", "4", "--isl", "64", "--osl", "8",
                        "--results", str(tmp_path / "r"), *flags])


def test_the_flags_reach_the_spec(tmp_path: Path) -> None:
    spec = spec_from_argv(["--sim", "--conc", "4", "--isl", "64", "--osl", "8",
                           "--results", str(tmp_path / "r"), "--ramp-up-strategy", "linear",
                           "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "9",
                           "--slice-duration", "2.5", "--no-saturation-stop"])
    assert (spec.ramp_up_strategy, spec.ramp_up_start_rps, spec.ramp_up_end_rps) == \
        ("linear", 1.0, 9.0)
    assert spec.slice_duration_s == 2.5 and spec.saturation_stop is False and spec.open_loop
