"""What a point watches beside its requests: the KV-cache and queue gauges, the GPU
exporters' power (--gpu-metrics) and the power CSV's rows (--gpu-power-csv), and every
/metrics scrape (--aiperf-artifacts). Started around the measured phase, stopped after
it (or cancelled when the point is interrupted, keeping what was sampled so far); the
point's per-URL server fields, energy, KV samples and gpu_power CSV are made of what
they hold."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadgen.client.gpu_metrics import PowerCsvTail, PowerSampler, gpu_metrics_urls, point_power_csv
from loadgen.client.server_metrics import GaugeWatch
from loadgen.client.server_series import SeriesWatch
from loadgen.config.spec import RunSpec
from loadgen.metrics.energy import PowerInput, PowerSeries
from loadgen.metrics.gpu_power_csv import point_gpu_power_csv
from loadgen.metrics.server_series import ScrapeText
from loadgen.metrics.server_urls import per_url_fields
from loadgen.metrics.summary import client_maxima
from loadgen.records import RequestRecord
from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import PointParts
from loadgen.run.backend import Backend
from loadgen.run.extension import Extension, Measured
from loadgen.run.point_fields import kv_samples


class PointTelemetry(Extension):
    """The watchers of one point and what they gathered."""

    def __init__(
        self,
        spec: RunSpec,
        backend: Backend,
        power_csv: PowerCsvTail | None,
        conc: int,
        trial: int | None,
    ) -> None:
        self.spec = spec
        self.conc = conc
        self.trial = trial  # the point file's trial, which its gpu_power file shares
        self.backend = backend
        self.power_csv = power_csv
        self.gauge_watch: GaugeWatch | None = None
        self.gauges: dict[str, dict[str, list[float]]] = {}
        self.gauge_times: dict[str, dict[str, list[int]]] = {}  # each sample's perf_counter_ns
        self.power: PowerSampler | None = None  # --gpu-metrics, during the measured phase
        self.power_series: list[PowerSeries] | None = None
        self.series_watch: SeriesWatch | None = None
        self.scrapes_kept: list[ScrapeText] = []

    async def before_measure(self) -> None:
        await self.start_power()
        await self.open_series()

    def measure_started(self) -> None:
        self.start_gauges()

    async def after_measure(self, records: Sequence[RequestRecord]) -> None:
        await self.stop(records)

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        spec = self.spec
        after = measured.after
        return dataclasses.replace(
            parts,
            server_metrics_by_url=per_url_fields(
                list(measured.before.each),
                measured.before.each,
                after.each,
                self.gauges,
                spec.scoring.spec_tokens,
                client_maxima(measured.records),
            )
            if spec.telemetry.server_metrics and after
            else None,
            power=PowerInput(
                self.power_series, spec.telemetry.gpu_metrics_interval_s, spec.scoring.num_gpus
            )
            if self.power_series is not None
            else None,
            kv_samples=kv_samples(self.gauges, self.gauge_times),
        )

    def write_files(self, store: ResultsDir, result: PointResult, measured: Measured) -> None:
        if self.power_series is not None:
            write_atomic(
                store.gpu_power_file(self.conc, self.trial),
                point_gpu_power_csv(self.power_series, measured.records).encode(),
            )

    def scrapes(self) -> Sequence[ScrapeText]:
        return self.scrapes_kept

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
            self.scrapes_kept, self.series_watch = await self.series_watch.stop(), None

    def cancel(self) -> None:
        """Interrupted: no watcher outlives the point; what was sampled so far is kept."""
        if self.gauge_watch is not None:
            self.gauge_watch.cancel()
        if self.power is not None:
            self.power.cancel()
            self.power_series, self.power = self.power.series(), None
        if self.series_watch is not None:
            self.series_watch.cancel()
            self.scrapes_kept = self.series_watch.scrapes
