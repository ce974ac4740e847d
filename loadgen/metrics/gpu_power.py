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

Also a telemetry CSV (--gpu-power-csv), as `nvidia-smi --query-gpu=timestamp,index,
power.draw --format=csv -lms 500` or amd-smi write it: parse_power_csv.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

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
    ExporterNames(
        "nvidia",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        1e-3,
        "gpu",
        "UUID",
    ),
    ExporterNames("amd", "gpu_power_usage", "gpu_energy_consumed", 1e-6, "gpu_id", "gpu_uuid"),
)
POWER_NAMES = tuple(e.power for e in EXPORTERS)
SERIES_NAMES = tuple(name for e in EXPORTERS for name in (e.power, e.energy))
MAX_LINES_PER_SERIES = 1024  # GPUs (or MIG slices) one exporter reports: far above any node


def gpu_lines(text: str) -> str:
    """The page's sample lines of the known exporters' power and energy series, as they
    are, for parse_gpu_metrics later. This runs on the event loop while a point measures,
    so it finds the lines with str.find (a C scan: microseconds for a dcgm-exporter page,
    about a millisecond per megabyte) instead of parsing the page (milliseconds of Python
    per scrape), and keeps a few hundred bytes per scrape instead of the whole page.
    A longer name sharing a prefix (DCGM_FI_DEV_POWER_USAGE_INSTANT) is kept too: the
    parser tells them apart."""
    lines: list[str] = []
    for name in SERIES_NAMES:
        at = 0 if text.startswith(name) else _line_start(text, name, 0)
        for _ in range(MAX_LINES_PER_SERIES):
            if at < 0:
                break
            end = text.find("\n", at)
            end = len(text) if end < 0 else end + 1
            lines.append(text[at:end].rstrip("\r\n") + "\n")
            at = _line_start(text, name, end - 1)
    return "".join(lines)


def _line_start(text: str, name: str, start: int) -> int:
    at = text.find("\n" + name, start)
    return at + 1 if at >= 0 else -1


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
    return {
        gpu: GpuReading(power.get(gpu), energy.get(gpu), uuids.get(gpu))
        for gpu in sorted(power.keys() | energy.keys(), key=_gpu_order)
    }


def _gpu_order(gpu: str) -> tuple[int, int | str]:
    return (0, int(gpu)) if gpu.isdigit() else (1, gpu)


def gpu_ids(gpus: Iterable[str]) -> list[str]:
    """GPU ids in index order (numeric ids numerically, then the others)."""
    return sorted(gpus, key=_gpu_order)


# A telemetry CSV's columns, found by name as InferenceX's aggregate_power.py finds them:
# the first column naming a time, the first naming power that is no limit, cap, max or min,
# and a GPU identity column; nvidia-smi writes "timestamp, index, power.draw [W]".
_TIME_COLUMN = re.compile(r"time", re.IGNORECASE)
_POWER_COLUMN = re.compile(r"power", re.IGNORECASE)
_NOT_POWER = re.compile(r"limit|cap|max|min", re.IGNORECASE)
_GPU_COLUMN = re.compile(r"^(index|gpu|gpu_id|gpu_index|card|device)$", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class PowerCsvError(ValueError):
    """A --gpu-power-csv file lacks the columns it needs; str() names them."""


def parse_csv_timestamp(text: str) -> float | None:
    """Epoch seconds (or ms), nvidia-smi's local "YYYY/MM/DD HH:MM:SS.fff", or ISO 8601
    (naive: local time, as nvidia-smi writes) -> epoch seconds; None if none of those."""
    text = text.strip()
    if _NUMBER.fullmatch(text):
        value = float(text)
        return value / 1000.0 if value > 1e12 else value
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        with contextlib.suppress(ValueError):
            return datetime.strptime(text, fmt).timestamp()
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class PowerCsvColumns:
    """A telemetry CSV's header and the columns energy reads from it."""

    header: tuple[str, ...]
    when: str
    power: str
    gpu: str


def power_csv_columns(header_line: str) -> PowerCsvColumns:
    """The header's time, power and GPU columns; PowerCsvError naming the missing ones."""
    header = [name.strip() for name in next(csv.reader([header_line]), [])]
    when = next((c for c in header if _TIME_COLUMN.search(c)), None)
    power = next((c for c in header if _POWER_COLUMN.search(c) and not _NOT_POWER.search(c)), None)
    gpu = next((c for c in header if _GPU_COLUMN.match(c)), None)
    missing = [
        name
        for name, column in (("timestamp", when), ("power", power), ("GPU index", gpu))
        if column is None
    ]
    if when is None or power is None or gpu is None:
        raise PowerCsvError(f"its header {header} has no {' / '.join(missing)} column")
    return PowerCsvColumns(tuple(header), when, power, gpu)


def power_csv_rows(columns: PowerCsvColumns, body: str) -> dict[str, list[tuple[float, float]]]:
    """The body's rows (no header) as GPU id -> (epoch seconds, watts) in file order; rows
    whose time or power does not parse ("[N/A]") are left out."""
    reader = csv.DictReader(io.StringIO(body), fieldnames=columns.header, skipinitialspace=True)
    rows: dict[str, list[tuple[float, float]]] = {}
    for row in reader:
        stamp = parse_csv_timestamp(row.get(columns.when) or "")
        watts = _NUMBER.search(row.get(columns.power) or "")
        device = (row.get(columns.gpu) or "").strip()
        if stamp is not None and watts is not None and device:
            rows.setdefault(device, []).append((stamp, float(watts.group(0))))
    return rows


def parse_power_csv(text: str) -> dict[str, list[tuple[float, float]]]:
    """A whole telemetry CSV: GPU id -> its (epoch seconds, watts) rows in time order."""
    header, _, body = text.partition("\n")
    rows = power_csv_rows(power_csv_columns(header), body)
    return {device: sorted(rows[device]) for device in gpu_ids(rows)}
