"""A GPU exporter's Prometheus text -> per-GPU power and energy readings (pure).

The names and units are the exporters' documented ones:
- NVIDIA dcgm-exporter (default counters): `DCGM_FI_DEV_POWER_USAGE` gauge in W and
  `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` counter in mJ, labels `gpu` (index), `UUID`.
- AMD device-metrics-exporter: `gpu_power_usage` in W and `gpu_energy_consumed` in uJ
  (its metric table: "Accumulated energy consumed by the GPU in Micro Jules"), labels
  `gpu_id` and `gpu_uuid` (label names assumed from its docs' examples; not checked
  against a live exporter).
prometheus_client's parser names a counter's samples `<name>_total` even when the
exposition has no suffix (dcgm-exporter writes none), so both spellings match.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class ExporterNames:
    vendor: str
    power: str  # gauge, W
    energy: str  # accumulated energy, in `energy_unit_j` joules per unit
    energy_unit_j: float
    gpu_label: str
    uuid_label: str


EXPORTERS = (
    ExporterNames("nvidia", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                  1e-3, "gpu", "UUID"),
    ExporterNames("amd", "gpu_power_usage", "gpu_energy_consumed", 1e-6, "gpu_id", "gpu_uuid"),
)
POWER_NAMES = tuple(e.power for e in EXPORTERS)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one scrape: power (W) and the energy counter (J), either may be absent."""

    power_w: float | None
    energy_j: float | None
    uuid: str | None = None


class GpuMetricsParseError(ValueError):
    """The text is not Prometheus exposition format."""


def parse_gpu_metrics(text: str) -> dict[str, GpuReading]:
    """GPU id (the exporter's index label) -> its reading; {} when the text has no GPU
    power or energy series of a known exporter."""
    names = {e.power: e for e in EXPORTERS} | {e.energy: e for e in EXPORTERS}
    power: dict[str, float] = {}
    energy: dict[str, float] = {}
    uuids: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name.removesuffix("_total")
                exporter = names.get(name)
                if exporter is None or exporter.gpu_label not in sample.labels:
                    continue
                gpu = sample.labels[exporter.gpu_label]
                if exporter.uuid_label in sample.labels:
                    uuids[gpu] = sample.labels[exporter.uuid_label]
                if name == exporter.power:
                    power[gpu] = float(sample.value)
                else:
                    energy[gpu] = float(sample.value) * exporter.energy_unit_j
    except (ValueError, TypeError, IndexError) as exc:
        raise GpuMetricsParseError(f"not Prometheus text ({exc})") from None
    return {gpu: GpuReading(power.get(gpu), energy.get(gpu), uuids.get(gpu))
            for gpu in sorted(power.keys() | energy.keys(), key=_gpu_order)}


def _gpu_order(gpu: str) -> tuple[int, int | str]:
    return (0, int(gpu)) if gpu.isdigit() else (1, gpu)


def gpu_ids(gpus: Iterable[str]) -> list[str]:
    """GPU ids in index order (numeric ids numerically, then the others)."""
    return sorted(gpus, key=_gpu_order)
