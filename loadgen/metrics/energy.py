"""GPU energy over a point's window, InferenceX's definition (utils/aggregate_power.py).

Pure: the sampler (client/gpu_metrics.py) hands in each --gpu-metrics URL's stamped
samples; the window is the throughput figures' own (first send to last completion,
metrics/throughput.py `measured_window`), on the same monotonic clock. Per GPU:
- the energy counter's delta when every sample around the window has one (dcgm-exporter
  `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, AMD `gpu_energy_consumed`), linearly
  interpolated at the window's ends;
- else the trapezoidal integral of power, linearly interpolated at the window's ends,
  exactly as InferenceX integrates nvidia-smi's power.draw.
The point is valid only if every GPU's samples bracket the window with no gap over 3 s.
Reason codes are InferenceX's (sampling_gap_exceeded, benchmark_window_not_bracketed,
insufficient_power_samples, expected_gpu_count_mismatch, no_usable_power_samples), plus
loadgen's own: exporter_unanswered (a scrape of the point failed or timed out: the
exporter stopped answering, or missed a beat), counter_reset (the
energy counter went down) and gpu_missing (a GPU absent from some of its URL's samples).
Averages are InferenceX's: avg_power_w is per GPU (total / window / GPUs).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from loadgen.metrics.gpu_power import GpuReading, gpu_ids
from loadgen.results.point import EnergyMetrics, GpuEnergy

MAX_SAMPLE_GAP_S = 3.0  # InferenceX's _DEFAULT_MAX_SAMPLE_GAP_S
NS_PER_S = 1e9


@dataclass(frozen=True, slots=True)
class PowerSample:
    """One scrape of one URL: stamped on the monotonic clock (durations) and the wall
    clock (gpu_power.csv's timestamps); `readings` None when the scrape failed."""

    mono_ns: int
    unix_ns: int
    readings: Mapping[str, GpuReading] | None


@dataclass(frozen=True, slots=True)
class PowerSeries:
    source: str  # the URL, redacted
    samples: Sequence[PowerSample]


@dataclass(frozen=True, slots=True)
class PointTotals:
    """The point's counts energy is normalized by (the result file's own fields)."""

    completed: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class PowerInput:
    """What a point with --gpu-metrics hands the assembler."""

    series: Sequence[PowerSeries]
    interval_s: float
    expected_gpus: int | None  # --num-gpus


@dataclass(frozen=True, slots=True)
class _Device:
    energy_j: float | None
    source: str | None
    max_gap_s: float | None
    issues: tuple[str, ...]
    trapezoid_j: float | None = None  # the power integral, also when the counter is used


def mono_to_unix_ns(starts: Sequence[tuple[int, float]]) -> int | None:
    """The result file's mapping of monotonic onto wall-clock time from the requests'
    (start_ns, sent_unix): its window starts at the first one's `sent_unix`
    (benchmark_start_time_unix), paired with its monotonic start."""
    if not starts:
        return None
    start_ns, sent_unix = min(starts)
    return round(sent_unix * 1e9) - start_ns


def csv_power_series(
    rows: Mapping[str, Sequence[tuple[float, float]]],
    source: str,
    offset_ns: int,
    window_ns: tuple[int, int],
    margin_s: float = 10.0,
) -> list[PowerSeries]:
    """A telemetry CSV's rows (GPU -> (epoch s, W), metrics/gpu_power.parse_power_csv) as
    one series per GPU on the monotonic clock (`offset_ns` = mono_to_unix_ns), keeping the
    rows within `margin_s` of the window: all its integral and checks can use."""
    low = window_ns[0] - margin_s * NS_PER_S
    high = window_ns[1] + margin_s * NS_PER_S
    series = []
    for gpu, points in rows.items():
        samples = []
        for unix_s, watts in points:
            unix_ns = round(unix_s * NS_PER_S)
            mono_ns = unix_ns - offset_ns
            if low <= mono_ns <= high:
                samples.append(PowerSample(mono_ns, unix_ns, {gpu: GpuReading(watts, None)}))
        series.append(PowerSeries(source, samples))
    return series


def _interpolate(times: Sequence[float], values: Sequence[float], at: float) -> float:
    """Linear interpolation at `at`, which the samples bracket."""
    right = bisect.bisect_left(times, at)
    if times[right] == at:
        return values[right]
    left = right - 1
    fraction = (at - times[left]) / (times[right] - times[left])
    return values[left] + fraction * (values[right] - values[left])


def trapezoid_j(times: Sequence[float], powers: Sequence[float], end: float) -> float:
    """∫ power over [0, end] (times in s from the window start, bracketing it)."""
    inside = [(t, p) for t, p in zip(times, powers, strict=True) if 0.0 < t < end]
    points = [
        (0.0, _interpolate(times, powers, 0.0)),
        *inside,
        (end, _interpolate(times, powers, end)),
    ]
    return sum((t1 - t0) * (p0 + p1) / 2.0 for (t0, p0), (t1, p1) in pairwise(points))


def _device(samples: Sequence[tuple[float, GpuReading]], end: float, max_gap_s: float) -> _Device:
    """One GPU: its samples as (seconds from the window start, reading), in time order."""
    if len(samples) < 2:
        return _Device(None, None, None, ("insufficient_power_samples",))
    times = [t for t, _ in samples]
    if times[0] > 0.0 or times[-1] < end:
        return _Device(None, None, None, ("benchmark_window_not_bracketed",))
    left = bisect.bisect_right(times, 0.0) - 1
    right = bisect.bisect_left(times, end)
    relevant = samples[left : right + 1]
    rel_times = times[left : right + 1]
    max_gap = max((b - a for a, b in pairwise(rel_times)), default=0.0)
    issues = ["sampling_gap_exceeded"] if max_gap > max_gap_s else []
    powers = [r.power_w for _, r in relevant]
    trapezoid = (
        None
        if any(p is None for p in powers)
        else trapezoid_j(rel_times, [float(p) for p in powers if p is not None], end)
    )
    counters = [r.energy_j for _, r in relevant]
    if all(c is not None for c in counters):
        values = [float(c) for c in counters if c is not None]
        if any(b < a for a, b in pairwise(values)):
            issues.append("counter_reset")
        energy = _interpolate(rel_times, values, end) - _interpolate(rel_times, values, 0.0)
        return _Device(energy, "counter", max_gap, tuple(issues), trapezoid)
    if trapezoid is None:
        return _Device(None, None, max_gap, (*issues, "no_usable_power_samples"))
    return _Device(trapezoid, "power", max_gap, tuple(issues), trapezoid)


def _gpu_samples(
    series: PowerSeries, start_ns: int
) -> tuple[dict[str, list[tuple[float, GpuReading]]], bool]:
    """GPU id -> its (seconds from start, reading) list; whether some GPU was missing
    from a successful scrape that showed others."""
    per_gpu: dict[str, list[tuple[float, GpuReading]]] = {}
    seen: set[str] = set()
    for sample in series.samples:
        if sample.readings:
            seen |= set(sample.readings)
    missing = False
    for sample in sorted(series.samples, key=lambda s: s.mono_ns):
        if sample.readings is None:
            continue
        t = (sample.mono_ns - start_ns) / NS_PER_S
        missing = missing or (bool(sample.readings) and set(sample.readings) != seen)
        for gpu, reading in sample.readings.items():
            per_gpu.setdefault(gpu, []).append((t, reading))
    return {gpu: per_gpu[gpu] for gpu in gpu_ids(per_gpu)}, missing


def _append(reasons: list[str], reason: str) -> None:
    if reason not in reasons:
        reasons.append(reason)


def point_energy(
    series: Sequence[PowerSeries],
    window_ns: tuple[int, int] | None,
    totals: PointTotals,
    *,
    interval_s: float,
    expected_gpus: int | None,
    max_gap_s: float = MAX_SAMPLE_GAP_S,
) -> EnergyMetrics:
    """The point's EnergyMetrics from every URL's samples over `window_ns` (monotonic)."""
    reasons: list[str] = []
    gpus: list[GpuEnergy] = []
    if window_ns is None or window_ns[1] <= window_ns[0]:
        return _metrics(["invalid_benchmark_window"], gpus, None, interval_s, totals)
    end = (window_ns[1] - window_ns[0]) / NS_PER_S
    for one in series:
        # a point's samples span its window only: any failure is the window's
        if any(s.readings is None for s in one.samples):
            _append(reasons, "exporter_unanswered")
        per_gpu, missing = _gpu_samples(one, window_ns[0])
        if missing:
            _append(reasons, "gpu_missing")
        if not per_gpu:
            _append(reasons, "no_usable_power_samples")
        for gpu, samples in per_gpu.items():
            device = _device(samples, end, max_gap_s)
            for issue in device.issues:
                _append(reasons, issue)
            uuid = next((r.uuid for _, r in samples if r.uuid), None)
            gpus.append(
                GpuEnergy(
                    source=one.source,
                    gpu=gpu,
                    uuid=uuid,
                    energy_j=device.energy_j,
                    avg_power_w=device.energy_j / end if device.energy_j is not None else None,
                    energy_source=device.source,
                    trapezoid_energy_j=device.trapezoid_j,
                    samples=len(samples),
                    max_sample_gap_s=device.max_gap_s,
                    issues=list(device.issues),
                )
            )
    if expected_gpus is not None and len(gpus) != expected_gpus:
        _append(reasons, "expected_gpu_count_mismatch")
    if not gpus:
        _append(reasons, "no_usable_power_samples")
    return _metrics(reasons, gpus, end, interval_s, totals)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _metrics(
    reasons: list[str],
    gpus: list[GpuEnergy],
    seconds: float | None,
    interval_s: float,
    totals: PointTotals,
) -> EnergyMetrics:
    valid = not reasons and bool(gpus)
    energy = sum(g.energy_j for g in gpus if g.energy_j is not None) if valid else None
    sources = {g.energy_source for g in gpus}
    source = (sources.pop() if len(sources) == 1 else "mixed") if valid else None
    total_power = _ratio(energy, seconds)
    return EnergyMetrics(
        power_valid=valid,
        power_invalid_reasons=reasons,
        energy_source=source,
        gpu_metrics_interval_s=interval_s,
        power_num_gpus=len(gpus),
        avg_power_w=_ratio(total_power, len(gpus)),
        avg_total_gpu_power_w=total_power,
        total_gpu_energy_j=energy,
        joules_per_output_token=_ratio(energy, totals.output_tokens),
        joules_per_input_token=_ratio(energy, totals.input_tokens),
        joules_per_total_token=_ratio(energy, totals.input_tokens + totals.output_tokens),
        joules_per_request=_ratio(energy, totals.completed),
        output_tokens_per_joule=_ratio(totals.output_tokens, energy),
        gpu_energy=gpus,
    )
