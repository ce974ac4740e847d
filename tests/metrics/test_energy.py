"""metrics/energy.py and metrics/gpu_power.py: InferenceX's integration and reason codes.

Pure functions on hand-built samples (what the exporter would have answered): the
sampler, the exporters and the files are exercised over real sockets in
tests/metrics/test_energy_sim.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from loadgen.metrics.energy import PointTotals, PowerSample, PowerSeries, point_energy
from loadgen.metrics.gpu_power import GpuReading, parse_gpu_metrics

S = 1_000_000_000
T0 = 50 * S  # the window starts here on the monotonic clock
TOTALS = PointTotals(completed=10, input_tokens=3000, output_tokens=1000)


def series(
    points: Sequence[tuple[float, Mapping[str, GpuReading] | None]],
    source: str = "http://node0:9400/metrics",
) -> PowerSeries:
    """(seconds from the window start, readings) -> a URL's samples."""
    return PowerSeries(
        source,
        [
            PowerSample(T0 + int(t * S), 1_700_000_000 * S + int(t * S), readings)
            for t, readings in points
        ],
    )


def power(*watts: float) -> dict[str, GpuReading]:
    return {str(i): GpuReading(w, None) for i, w in enumerate(watts)}


def energy(power_w: float, joules: float) -> dict[str, GpuReading]:
    return {"0": GpuReading(power_w, joules)}


def window(seconds: float) -> tuple[int, int]:
    return T0, T0 + int(seconds * S)


def test_trapezoid_interpolates_power_at_the_window_boundaries() -> None:
    # power ramps linearly 100 -> 300 W over 0..4 s, sampled at -0.5, 1.5, 3.5, 4.5 s:
    # the trapezoid of a linear ramp is exact, so ∫ over 0..4 s is 4 * 200 = 800 J
    ramp = [(t, power(100 + 50 * t, 2 * (100 + 50 * t))) for t in (-0.5, 1.5, 3.5, 4.5)]
    result = point_energy([series(ramp)], window(4.0), TOTALS, interval_s=2.0, expected_gpus=2)
    assert result.power_valid and result.power_invalid_reasons == []
    assert result.energy_source == "power" and result.power_num_gpus == 2
    assert result.total_gpu_energy_j == pytest.approx(800.0 + 1600.0)
    assert result.avg_total_gpu_power_w == pytest.approx(600.0)
    assert result.avg_power_w == pytest.approx(300.0)  # per GPU, as InferenceX
    assert result.joules_per_output_token == pytest.approx(2.4)
    assert result.joules_per_input_token == pytest.approx(0.8)
    assert result.joules_per_total_token == pytest.approx(0.6)
    assert result.joules_per_request == pytest.approx(240.0)
    assert result.output_tokens_per_joule == pytest.approx(1000 / 2400)
    assert [g.energy_j for g in result.gpu_energy] == pytest.approx([800.0, 1600.0])
    assert result.gpu_energy[0].max_sample_gap_s == pytest.approx(2.0)


def test_counter_delta_wins_over_power_when_every_sample_has_it() -> None:
    # the gauge says 400 W but the counter grew 1000 J over the 2 s between samples
    # bracketing a 1 s window centred in them: the counter's 500 J, not the gauge's 400
    # (within the cross-check's factor of 2)
    samples = [(-0.5, energy(400.0, 5000.0)), (1.5, energy(400.0, 6000.0))]
    result = point_energy(
        [series(samples)], window(1.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert result.power_valid and result.energy_source == "counter"
    assert result.total_gpu_energy_j == pytest.approx(500.0)
    assert result.gpu_energy[0].trapezoid_energy_j == pytest.approx(400.0)


@pytest.mark.parametrize(
    ("watts", "counter_j", "reason"),
    [
        (300.0, (5000.0, 5000.0), "counter_stalled"),  # 300 W drawn, the counter stuck
        (300.0, (5000.0, 5000.0 + 2 * 283e6), "counter_power_mismatch"),  # a glitch: 283 MW
        (300.0, (5000.0, 5000.0 + 2 * 100.0), "counter_power_mismatch"),  # a third of it
        (100.0, (5000.0, 5000.0 + 2 * 201.0), "counter_power_mismatch"),  # just over 2x
        (100.0, (5000.0, 5000.0 + 2 * 199.0), None),  # just under 2x
        (300.0, (5000.0, 5000.0 + 2 * 151.0), None),  # just over half
        (2.0, (5000.0, 5000.0), None),  # an idle reading below the gauge's resolution
        (0.0, (5000.0, 5000.0 + 2 * 4.0), None),
    ],
)
def test_the_counter_is_cross_checked_against_the_power_integral(
    watts: float, counter_j: tuple[float, float], reason: str | None
) -> None:
    """The counter must lie within a factor of 2 of the power integral (or within 5 W
    per GPU of it on average): a counter that does not advance while power is drawn, or
    jumps, is not energy."""
    samples = [(-1.0, energy(watts, counter_j[0])), (1.0, energy(watts, counter_j[1]))]
    result = point_energy(
        [series(samples)], window(1.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert result.power_invalid_reasons == ([reason] if reason else [])
    assert result.power_valid is (reason is None)
    assert (result.total_gpu_energy_j is None) is (reason is not None)


@pytest.mark.parametrize(
    ("reading", "reason"),
    [
        (GpuReading(float("nan"), None), "power_not_finite"),
        (GpuReading(float("inf"), None), "power_not_finite"),
        (GpuReading(-300.0, None), "power_negative"),
        (GpuReading(300.0, float("nan")), "counter_not_finite"),
        (GpuReading(300.0, -1.0), "counter_negative"),
    ],
)
def test_readings_no_gpu_can_give_are_invalid_with_a_reason(
    reading: GpuReading, reason: str
) -> None:
    good = GpuReading(300.0, 5000.0 if reading.energy_j is not None else None)
    samples = [(-0.5, {"0": good}), (0.5, {"0": reading}), (1.5, {"0": good})]
    result = point_energy(
        [series(samples)], window(1.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert result.power_valid is False and reason in result.power_invalid_reasons
    assert result.gpu_energy[0].energy_j is None and result.gpu_energy[0].avg_power_w is None
    assert result.total_gpu_energy_j is None and result.joules_per_output_token is None


def test_a_gpu_uuid_two_urls_serve_is_counted_once() -> None:
    one = {"0": GpuReading(300.0, None, "GPU-a"), "1": GpuReading(100.0, None, "GPU-b")}
    samples = [(-0.5, one), (1.5, one)]
    result = point_energy(
        [series(samples, "http://a/metrics"), series(samples, "http://b/metrics")],
        window(1.0),
        TOTALS,
        interval_s=1.0,
        expected_gpus=2,
    )
    assert result.power_valid and result.power_num_gpus == 2
    assert result.total_gpu_energy_j == pytest.approx(400.0)
    assert [g.uuid for g in result.gpu_energy] == ["GPU-a", "GPU-b"]


def test_a_counter_that_goes_down_invalidates() -> None:
    samples = [
        (-0.5, energy(100.0, 5000.0)),
        (0.5, energy(100.0, 10.0)),
        (1.5, energy(100.0, 110.0)),
    ]
    result = point_energy(
        [series(samples)], window(1.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert not result.power_valid and result.power_invalid_reasons == ["counter_reset"]
    assert result.total_gpu_energy_j is None and result.joules_per_output_token is None


def test_gap_over_three_seconds_invalidates_with_inferencex_code() -> None:
    samples = [(-0.5, power(100.0)), (3.0, power(100.0)), (4.5, power(100.0))]
    result = point_energy(
        [series(samples)], window(4.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert not result.power_valid
    assert result.power_invalid_reasons == ["sampling_gap_exceeded"]
    assert result.gpu_energy[0].max_sample_gap_s == pytest.approx(3.5)
    # the per-GPU figure stays for diagnosis; the point's figures are null
    assert result.gpu_energy[0].energy_j == pytest.approx(400.0)
    assert result.avg_power_w is None


def test_samples_that_do_not_bracket_the_window() -> None:
    samples = [(0.2, power(100.0)), (1.2, power(100.0))]
    result = point_energy(
        [series(samples)], window(1.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert result.power_invalid_reasons == ["benchmark_window_not_bracketed"]
    one = point_energy(
        [series([(-1.0, power(100.0))])], window(1.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert one.power_invalid_reasons == ["insufficient_power_samples"]


def test_a_failed_scrape_marks_the_exporter_unanswered() -> None:
    samples = [(-0.5, power(100.0)), (0.5, None), (1.0, power(100.0)), (2.5, power(100.0))]
    result = point_energy(
        [series(samples)], window(2.0), TOTALS, interval_s=1.0, expected_gpus=None
    )
    assert not result.power_valid and result.power_invalid_reasons == ["exporter_unanswered"]


def test_missing_gpus_and_count_mismatch() -> None:
    samples = [(-0.5, power(100.0, 100.0)), (0.5, power(100.0)), (1.5, power(100.0, 100.0))]
    result = point_energy([series(samples)], window(1.0), TOTALS, interval_s=1.0, expected_gpus=4)
    assert result.power_invalid_reasons == ["gpu_missing", "expected_gpu_count_mismatch"]


def test_two_nodes_are_two_sets_of_gpus() -> None:
    a = series([(-0.5, power(100.0)), (1.5, power(100.0))], "http://a:9400/metrics")
    b = series([(-0.2, power(300.0)), (1.2, power(300.0))], "http://b:9400/metrics")
    result = point_energy([a, b], window(1.0), TOTALS, interval_s=1.0, expected_gpus=2)
    assert result.power_valid and result.total_gpu_energy_j == pytest.approx(400.0)
    assert [(g.source, g.gpu) for g in result.gpu_energy] == [
        ("http://a:9400/metrics", "0"),
        ("http://b:9400/metrics", "0"),
    ]


def test_empty_window_is_invalid() -> None:
    result = point_energy(
        [series([(-0.5, power(1.0)), (0.5, power(1.0))])],
        None,
        TOTALS,
        interval_s=1.0,
        expected_gpus=None,
    )
    assert result.power_invalid_reasons == ["invalid_benchmark_window"]


DCGM = """# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",device="nvidia1",Hostname="h"} 301.5
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",device="nvidia0",Hostname="h"} 72.25
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a",device="nvidia0",Hostname="h"} 123456
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",device="nvidia0",Hostname="h"} 40
"""

AMD = """# HELP gpu_power_usage GPU power usage in Watts
# TYPE gpu_power_usage gauge
gpu_power_usage{gpu_id="0",gpu_uuid="amd-0",hostname="h"} 512
# HELP gpu_energy_consumed Accumulated energy consumed by the GPU in uJ
# TYPE gpu_energy_consumed counter
gpu_energy_consumed{gpu_id="0",gpu_uuid="amd-0",hostname="h"} 2.5e+09
"""


def test_dcgm_exporter_names_and_units() -> None:
    readings = parse_gpu_metrics(DCGM)
    assert list(readings) == ["0", "1"]
    assert readings["0"] == GpuReading(72.25, 123.456, "GPU-a")  # mJ -> J
    assert readings["1"] == GpuReading(301.5, None, "GPU-b")


def test_amd_device_metrics_exporter_names_and_units() -> None:
    assert parse_gpu_metrics(AMD) == {"0": GpuReading(512.0, 2500.0, "amd-0")}  # uJ -> J


def test_text_without_gpu_power_has_no_readings() -> None:
    assert (
        parse_gpu_metrics(
            '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 3\n'
        )
        == {}
    )


def test_nvidia_smi_csv_rows_by_gpu_in_local_time() -> None:
    from datetime import datetime

    from loadgen.metrics.gpu_power import parse_power_csv

    text = (
        "timestamp, index, power.limit [W], power.draw [W]\n"
        "2026/12/02 01:30:00.500, 1, 700.00 W, 412.34 W\n"
        "2026/12/02 01:30:00.500, 0, 700.00 W, [N/A]\n"
        "2026/12/02 01:30:00.000, 1, 700.00 W, 400.00 W\n"
    )
    rows = parse_power_csv(text)
    at = datetime(2026, 12, 2, 1, 30, 0, 500_000).timestamp()  # local time, as nvidia-smi
    assert rows == {"1": [(at - 0.5, 400.0), (at, 412.34)]}  # limit column is not power
    assert parse_power_csv("time,gpu,power\n1764639000123,0,5\n") == {
        "0": [(1764639000.123, 5.0)]
    }  # epoch ms


def test_csv_series_sit_on_the_monotonic_clock_of_the_window() -> None:
    from loadgen.metrics.energy import csv_power_series, mono_to_unix_ns

    offset = mono_to_unix_ns([(T0 + 5, 1_700_000_000.0), (T0, 1_699_999_999.5)])
    assert offset == 1_699_999_999_500_000_000 - T0
    rows = {"0": [(1_699_999_999.0, 100.0), (1_700_000_001.0, 100.0), (1_700_000_900.0, 1.0)]}
    [one] = csv_power_series(rows, "f.csv", offset, window(1.0))
    assert [s.mono_ns for s in one.samples] == [T0 - S // 2, T0 + 3 * S // 2]  # far row cut
    result = point_energy([one], window(1.0), TOTALS, interval_s=1.0, expected_gpus=1)
    assert result.power_valid and result.total_gpu_energy_j == pytest.approx(100.0)
