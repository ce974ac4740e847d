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
energy counter went down), gpu_missing (a GPU absent from some of its URL's samples),
power_not_finite / power_negative and counter_not_finite / counter_negative (a reading
no GPU can give), and the counter's cross-check against the power gauge:
- counter_stalled: the counter did not advance over the window while the power
  integral says the GPU drew more than COUNTER_SLACK_W on average;
- counter_power_mismatch: the counter's energy and the power integral are more than a
  factor COUNTER_POWER_RATIO apart (and more than COUNTER_SLACK_W x window). The gauge
  is sampled every interval while the counter accumulates every joule, so they differ
  under bursty load; a factor of 2 is far outside that and catches a stuck, glitched
  or mis-scaled counter.
A GPU is its UUID where the exporter gives one: a UUID already counted from an earlier
URL (the same exporter under two names) is counted once (the preflight refuses such
URLs, client/gpu_metrics.py; this holds should one appear mid-run).
Averages are InferenceX's: avg_power_w is per GPU (total / window / GPUs).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from loadgen.metrics.gpu_power import GpuReading, gpu_ids
from loadgen.results.point import EnergyMetrics, GpuEnergy

MAX_SAMPLE_GAP_S = 3.0  # InferenceX's _DEFAULT_MAX_SAMPLE_GAP_S
COUNTER_POWER_RATIO = 2.0  # the counter within [integral / 2, integral x 2]
COUNTER_SLACK_W = 5.0  # per GPU: below this average the gauge's resolution decides
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


def _value_issues(samples: Sequence[tuple[float, GpuReading]]) -> list[str]:
    """Readings no GPU can give: NaN/Inf or negative power or energy."""
    issues = []
    powers = [r.power_w for _, r in samples if r.power_w is not None]
    counters = [r.energy_j for _, r in samples if r.energy_j is not None]
    if not all(math.isfinite(p) for p in powers):
        issues.append("power_not_finite")
    elif any(p < 0 for p in powers):
        issues.append("power_negative")
    if not all(math.isfinite(c) for c in counters):
        issues.append("counter_not_finite")
    elif any(c < 0 for c in counters):
        issues.append("counter_negative")
    return issues


def counter_check(counter_j: float, integral_j: float, seconds: float) -> str | None:
    """The counter's energy against the power integral over the same window (module doc)."""
    slack = COUNTER_SLACK_W * seconds
    if counter_j == 0.0 and integral_j > slack:
        return "counter_stalled"
    low, high = sorted((counter_j, integral_j))
    if high - low > slack and (low <= 0.0 or high / low > COUNTER_POWER_RATIO):
        return "counter_power_mismatch"
    return None


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
    bad_values = _value_issues(relevant)
    if bad_values:  # no figure from a NaN, an infinity or a negative reading
        return _Device(None, None, max_gap, (*issues, *bad_values))
    powers = [r.power_w for _, r in relevant]
    trapezoid = (
        None
        if any(p is None for p in powers)
        else trapezoid_j(rel_times, [float(p) for p in powers if p is not None], end)
    )
    counters = [r.energy_j for _, r in relevant]
    if all(c is not None for c in counters):
        values = [float(c) for c in counters if c is not None]
        energy = _interpolate(rel_times, values, end) - _interpolate(rel_times, values, 0.0)
        if any(b < a for a, b in pairwise(values)):
            issues.append("counter_reset")  # its delta means nothing: no cross-check
        elif trapezoid is not None and (mismatch := counter_check(energy, trapezoid, end)):
            issues.append(mismatch)
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
        # an answer without GPUs (an empty or foreign page) between ones with them misses them
        missing = missing or set(sample.readings) != seen
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
    counted: set[str] = set()  # GPU UUIDs
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
            uuid = next((r.uuid for _, r in samples if r.uuid), None)
            if uuid is not None:
                if uuid in counted:
                    continue
                counted.add(uuid)
            device = _device(samples, end, max_gap_s)
            for issue in device.issues:
                _append(reasons, issue)
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
