"""The server's /metrics over a point as time series, per URL and label set (pure: scraped
texts in, series and their statistics out).

A point with `--aiperf-artifacts` keeps the raw text of every scrape of every URL (read
every `series_interval_s` during the measured phase, the first right after the counters
were read at its start, the last right before they are read at its end: run/point.py),
and this module turns them into one series per (URL, metric, label set), which the AIPerf
sink spells as server_metrics_export.json. Counters and gauges only: histogram buckets
are left out (InferenceX's aggregation reads neither).

- counter: `total` = the increase over the point (a drop is a restart: counted from 0),
  `rate` = total / seconds between the first and the last scrape; one slice per pair of
  consecutive scrapes with its own increase and rate;
- gauge: `avg`, `min`, `max` over the scrapes; one slice per scrape (from the previous
  one) holding its value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from loadgen.records import RequestRecord

KINDS = ("counter", "gauge")
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ScrapeText:
    """One scrape of one URL: when (perf_counter_ns, read as the body arrived) and what."""

    url: str
    ns: int
    text: str


@dataclass(frozen=True, slots=True)
class PointCapture:
    """What a point keeps for `--aiperf-artifacts` beyond its records and result (the run
    engine hands it to its outputs: run/observers.RunOutputs.point_written)."""

    warmup: tuple[RequestRecord, ...]  # warmup requests and primers, as they ended
    scrapes: tuple[ScrapeText, ...]  # every /metrics scrape of the measured phase
    offset_ns: int  # add to a perf_counter_ns reading of this process for wall-clock ns
    metrics_urls: tuple[str, ...]  # the URLs scraped


@dataclass(frozen=True, slots=True)
class Series:
    """One (URL, metric, label set) over the point: its readings in scrape order."""

    url: str
    name: str  # the family name: a counter without `_total` (as AIPerf names it)
    kind: str  # counter | gauge
    labels: tuple[tuple[str, str], ...]
    points: tuple[tuple[int, float], ...]  # (ns, value)
    description: str = ""  # the family's HELP text (AIPerf's export requires one)


@dataclass(frozen=True, slots=True)
class Slice:
    start_ns: int
    end_ns: int
    total: float | None = None  # counter: increase in the slice
    rate: float | None = None  # counter: per second
    value: float | None = None  # gauge: the reading at end_ns


@dataclass(frozen=True, slots=True)
class SeriesStats:
    total: float | None = None
    rate: float | None = None
    avg: float | None = None
    min: float | None = None
    max: float | None = None


def _readings(
    scrape: ScrapeText,
) -> list[tuple[str, str, tuple[tuple[str, str], ...], float, str]]:
    """(family, kind, labels, value, HELP text) of the counters and gauges of one scrape;
    a text that is not Prometheus format gives none (the point's own scrapes say so
    already)."""
    found = []
    try:
        for family in text_string_to_metric_families(scrape.text):
            if family.type not in KINDS:
                continue
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                found.append(
                    (
                        family.name,
                        family.type,
                        tuple(sorted(sample.labels.items())),
                        float(sample.value),
                        family.documentation,
                    )
                )
    except ValueError:
        return []
    return found


def build_series(scrapes: Sequence[ScrapeText]) -> list[Series]:
    """Every counter and gauge series of the scrapes, by URL then name then labels."""
    table: dict[tuple[str, str, Labels], tuple[str, str, list[tuple[int, float]]]] = {}
    for scrape in sorted(scrapes, key=lambda s: s.ns):
        for name, kind, labels, value, description in _readings(scrape):
            entry = table.setdefault((scrape.url, name, labels), (kind, description, []))
            entry[2].append((scrape.ns, value))
    return [
        Series(url, name, kind, labels, tuple(points), description)
        for (url, name, labels), (kind, description, points) in sorted(table.items())
    ]


def _increase(before: float, after: float) -> float:
    return after - before if after >= before else after


def slices(series: Series) -> list[Slice]:
    pairs = zip(series.points, series.points[1:], strict=False)
    if series.kind == "counter":
        return [
            Slice(
                t0,
                t1,
                total=_increase(v0, v1),
                rate=_increase(v0, v1) / ((t1 - t0) / 1e9) if t1 > t0 else None,
            )
            for (t0, v0), (t1, v1) in pairs
        ]
    return [Slice(t0, t1, value=v1) for (t0, _), (t1, v1) in pairs]


def series_stats(series: Series) -> SeriesStats:
    values = [v for _, v in series.points]
    if series.kind == "counter":
        total = sum(s.total or 0.0 for s in slices(series))
        seconds = (series.points[-1][0] - series.points[0][0]) / 1e9
        return SeriesStats(total=total, rate=total / seconds if seconds > 0 else None)
    return SeriesStats(avg=sum(values) / len(values), min=min(values), max=max(values))
