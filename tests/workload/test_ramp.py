"""vLLM's ramp-up and rate stages (workload/ramp.py), and their flags."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.load import parse_rate_stages, stage_request_bound
from loadgen.config.spec import RunSpec, SpecError
from loadgen.run.shapes import Ramp, arrivals_rng, load_shape
from loadgen.workload.ramp import ramp_offsets_ns, ramp_rates, staged_offsets_ns


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
    draws = (
        np.array(
            [
                np.diff([0, *ramp_offsets_ns(rates, 1.0, np.random.default_rng(s))])
                for s in range(400)
            ]
        )
        / 1e9
    )
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
    spec = RunSpec.flat(
        conc=(4,),
        isl=64,
        osl=8,
        sim=True,
        ramp_up_strategy="exponential",
        ramp_up_start_rps=1.0,
        ramp_up_end_rps=50.0,
        results_dir=tmp_path,
    )
    assert spec.load.open_loop
    first = _ramp_offsets_ns(spec, 4)
    assert first == _ramp_offsets_ns(spec, 4) and len(first) == 40  # seeded, conc x 10
    assert first != _ramp_offsets_ns(spec.with_(seed=1), 4)
    rates = ramp_rates(40, "exponential", 1.0, 50.0)
    gaps = np.diff([0, *first])
    assert gaps[:5].mean() > 10 * gaps[-5:].mean()  # slow at first, fast at the end
    assert rates[0] == 1.0 and rates[-1] == pytest.approx(50.0)


def _ramp_offsets_ns(spec: RunSpec, conc: int) -> list[int]:
    """The point's whole schedule, as its measured phase draws it."""
    shape = load_shape(spec)
    assert isinstance(shape, Ramp)
    return shape.offsets_ns(spec.load.measured_requests(conc), arrivals_rng(spec, conc))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "both"),
        (["--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2"], "need --ramp-up-strategy"),
        (
            ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "5", "--ramp-up-end-rps", "2"],
            "a ramp goes up",
        ),
        (
            ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "2"],
            "> 0",
        ),
        (
            [
                "--ramp-up-strategy",
                "linear",
                "--ramp-up-start-rps",
                "1",
                "--ramp-up-end-rps",
                "2",
                "--request-rate",
                "3",
            ],
            "drop --request-rate",
        ),
        (["--slice-duration", "0"], "--slice-duration"),
        (["--saturation-window", "-1"], "--saturation-window"),
    ],
)
def test_bad_load_flags_are_one_line(flags: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=message):
        spec_from_argv(
            [
                "--sim",
                "--conc",
                "4",
                "--isl",
                "64",
                "--osl",
                "8",
                "--results",
                str(tmp_path / "r"),
                *flags,
            ]
        )


def test_the_flags_reach_the_spec(tmp_path: Path) -> None:
    spec = spec_from_argv(
        [
            "--sim",
            "--conc",
            "4",
            "--isl",
            "64",
            "--osl",
            "8",
            "--results",
            str(tmp_path / "r"),
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "1",
            "--ramp-up-end-rps",
            "9",
            "--slice-duration",
            "2.5",
            "--no-saturation-stop",
        ]
    )
    assert (spec.load.ramp_up_strategy, spec.load.ramp_up_start_rps, spec.load.ramp_up_end_rps) == (
        "linear",
        1.0,
        9.0,
    )
    assert (
        spec.load.slice_duration_s == 2.5
        and spec.load.saturation_stop is False
        and spec.load.open_loop
    )


def test_rate_stages_parse_with_units() -> None:
    assert parse_rate_stages("5@30s, 20@30,40@1m,2@500ms") == (
        (5.0, 30.0),
        (20.0, 30.0),
        (40.0, 60.0),
        (2.0, 0.5),
    )
    for bad in ("5", "5@", "0@3s", "5@-1s", "x@3s", "5@3h"):
        with pytest.raises(SpecError, match="--rate-stages"):
            parse_rate_stages(bad)


def test_each_stage_has_its_own_rate_and_none_spills_over() -> None:
    """5 req/s for 20 s, then 50 req/s for 10 s: ~100 and ~500 arrivals, every arrival
    inside the stages; the plan's bound leaves the rest after the end (never sent)."""
    stages = ((5.0, 20.0), (50.0, 10.0))
    count = stage_request_bound(stages, 1.0)
    assert count > 600
    firsts, seconds = [], []
    for seed in range(30):
        offsets = np.array(staged_offsets_ns(stages, 1.0, np.random.default_rng(seed), count))
        assert len(offsets) == count and np.all(np.diff(offsets) >= 0)
        sent = offsets[offsets < 30e9]
        assert np.all(offsets[len(sent) :] == 31e9)  # the unused tail, past the deadline
        firsts.append(int((sent < 20e9).sum()))
        seconds.append(int((sent >= 20e9).sum()))
    # Poisson means 100 and 500 (std 10 and 22): the means of 30 seeds within 3 std errors
    assert abs(np.mean(firsts) - 100) < 3 * 10 / np.sqrt(30)
    assert abs(np.mean(seconds) - 500) < 3 * 22.4 / np.sqrt(30)


def test_stages_set_the_points_duration_and_requests(tmp_path: Path) -> None:
    spec = spec_from_argv(
        [
            "--sim",
            "--conc",
            "8",
            "--isl",
            "64",
            "--osl",
            "8",
            "--results",
            str(tmp_path / "r"),
            "--rate-stages",
            "2@3s,10@2s",
        ]
    )
    assert spec.load.rate_stages == ((2.0, 3.0), (10.0, 2.0)) and spec.load.open_loop
    assert spec.load.point_duration_s == 5.0
    assert spec.load.measured_requests(8) == stage_request_bound(spec.load.rate_stages, 1.0)
    for extra, message in (
        (["--request-rate", "3"], "drop --request-rate"),
        (["--duration", "3"], "drop --duration"),
    ):
        with pytest.raises(SpecError, match=message):
            spec_from_argv(
                [
                    "--sim",
                    "--conc",
                    "8",
                    "--isl",
                    "64",
                    "--osl",
                    "8",
                    "--results",
                    str(tmp_path / "r"),
                    "--rate-stages",
                    "2@3s",
                    *extra,
                ]
            )


def test_a_sweep_file_gives_the_stages_as_a_list() -> None:
    from loadgen.config.sweepfile import load_yaml, parse_sweep

    text = """
conc: [8]
workload: {isl: 64, osl: 8}
lanes:
  - name: steps
    target: {sim: true}
    rate-stages: [2@10s, 8@10s, 32@5s]
"""
    plan = parse_sweep(load_yaml(text, source="s.yaml"), source="s.yaml")
    assert plan.lanes[0].spec.load.rate_stages == ((2.0, 10.0), (8.0, 10.0), (32.0, 5.0))
