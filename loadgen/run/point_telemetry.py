"""What a point watches beside its requests: the KV-cache and queue gauges, the GPU
exporters' power (--gpu-metrics) and the power CSV's rows (--gpu-power-csv), and every
/metrics scrape (--aiperf-artifacts). Started around the measured phase, stopped after
it (or cancelled when the point is interrupted, keeping what was sampled so far); the
point's result is made of what they hold (run/point_records.py)."""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.client.gpu_metrics import PowerCsvTail, PowerSampler, gpu_metrics_urls, point_power_csv
from loadgen.client.server_metrics import GaugeWatch
from loadgen.client.server_series import SeriesWatch
from loadgen.config.spec import RunSpec
from loadgen.metrics.energy import PowerSeries
from loadgen.metrics.server_series import ScrapeText
from loadgen.records import RequestRecord
from loadgen.run.backend import Backend


class PointTelemetry:
    """The watchers of one point and what they gathered."""

    def __init__(self, spec: RunSpec, backend: Backend, power_csv: PowerCsvTail | None) -> None:
        self.spec = spec
        self.backend = backend
        self.power_csv = power_csv
        self.gauge_watch: GaugeWatch | None = None
        self.gauges: dict[str, dict[str, list[float]]] = {}
        self.gauge_times: dict[str, dict[str, list[int]]] = {}  # each sample's perf_counter_ns
        self.power: PowerSampler | None = None  # --gpu-metrics, during the measured phase
        self.power_series: list[PowerSeries] | None = None
        self.series_watch: SeriesWatch | None = None
        self.scrapes: list[ScrapeText] = []

    async def start_power(self) -> None:
        """--gpu-metrics: sampled once before the measured phase starts, so the samples
        bracket its first send."""
        telemetry = self.spec.telemetry
        if telemetry.gpu_metrics:
            self.power = PowerSampler(
                gpu_metrics_urls(telemetry.gpu_metrics, self.backend.base_url),
                telemetry.gpu_metrics_interval_s,
            )
            await self.power.start()

    async def open_series(self) -> None:
        """--aiperf-artifacts: the server series' first scrape, awaited before the
        counters are read for the measured phase (so no request falls before it)."""
        self.series_watch = self.backend.series_watch()
        if self.series_watch is not None:
            await self.series_watch.start()

    def start_gauges(self) -> None:
        """The measured phase starts now: the gauges are watched during it."""
        self.gauge_watch = self.backend.gauge_watch()
        if self.gauge_watch is not None:
            self.gauge_watch.start()

    async def stop(self, records: Sequence[RequestRecord]) -> None:
        """The measured phase is over: the gauges watched during it, the power sampled
        once more (after the last completion), the CSV's rows up to past it, the series."""
        if self.gauge_watch is not None:
            self.gauge_times = self.gauge_watch.times
            self.gauges, self.gauge_watch = await self.gauge_watch.stop(), None
        if self.power is not None:
            self.power_series, self.power = await self.power.stop(), None
        if self.power_csv is not None:
            self.power_series = [
                *(self.power_series or ()),
                *await point_power_csv(self.power_csv, records),
            ]
        if self.series_watch is not None:
            self.scrapes, self.series_watch = await self.series_watch.stop(), None

    def cancel(self) -> None:
        """Interrupted: no watcher outlives the point; what was sampled so far is kept."""
        if self.gauge_watch is not None:
            self.gauge_watch.cancel()
        if self.power is not None:
            self.power.cancel()
            self.power_series, self.power = self.power.series(), None
        if self.series_watch is not None:
            self.series_watch.cancel()
            self.scrapes = self.series_watch.scrapes
