"""A Prometheus histogram that takes a whole array of observations in one call.

prometheus-client's Histogram.observe() costs a lock and a bucket search per value. A
request at osl 1024 has ~1000 chunk gaps, and `request_finished` runs on the event loop
between other requests' chunks, so observing gap by gap would add milliseconds of loop
lag per finished request. Here the bucket counts of a whole record are one numpy
`searchsorted` + `bincount`, and the exposition is produced at scrape time by a custom
collector registered on the injected registry.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

_go_float = cast(Callable[[float], str], floatToGoString)


class HistogramSeries:
    """The bucket counts and sum of one label combination."""

    __slots__ = ("_bound_list", "_bounds", "_counts", "_lock", "_sum", "created")

    def __init__(self, bounds: npt.NDArray[np.float64], lock: threading.Lock) -> None:
        self._bounds = bounds
        self._bound_list: list[float] = bounds.tolist()
        self._counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # last: above every bound
        self._sum = 0.0
        self._lock = lock
        self.created = time.time()  # exposed as `_created`, like prometheus-client's own

    def observe(self, value: float, weight: int = 1) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le).
        index = bisect.bisect_left(self._bound_list, value)
        with self._lock:
            self._counts[index] += weight
            self._sum += value * weight

    def observe_many(
        self,
        values: npt.NDArray[np.float64],
        weights: npt.NDArray[np.int64] | None = None,
    ) -> None:
        """Observe every value (each `weights[i]` times when weights are given)."""
        if values.size == 0:
            return
        index = np.searchsorted(self._bounds, values, side="left")
        counts = np.bincount(index, weights=weights, minlength=len(self._counts))
        total = float(values.sum() if weights is None else np.dot(values, weights))
        with self._lock:
            self._counts += counts.astype(np.int64)
            self._sum += total

    def snapshot(self) -> tuple[list[int], float]:
        """Cumulative bucket counts (the last one is +Inf) and the sum."""
        with self._lock:
            return np.cumsum(self._counts).tolist(), self._sum


class BulkHistogram(Collector):
    """A labelled histogram family exposed on `registry` under `name`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = [float(b) for b in buckets if not math.isinf(b)]
        if bounds != sorted(set(bounds)) or not bounds:
            raise ValueError(f"{name}: buckets must be strictly increasing and finite")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = np.asarray(bounds, dtype=np.float64)
        # Spelled as prometheus-client (and so vLLM) spells them: "0.005", "1e-05", "+Inf".
        self._le = [_go_float(b) for b in bounds] + ["+Inf"]
        self._series: dict[tuple[str, ...], HistogramSeries] = {}
        self._lock = threading.Lock()
        registry.register(self)

    @property
    def bounds(self) -> tuple[float, ...]:
        return tuple(self._bounds.tolist())

    def labels(self, *values: str) -> HistogramSeries:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        series = self._series.get(values)
        if series is None:
            with self._lock:
                series = self._series.setdefault(
                    values, HistogramSeries(self._bounds, threading.Lock())
                )
        return series

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            items = list(self._series.items())
        for values, series in items:
            cumulative, total = series.snapshot()
            family.add_metric(
                list(values),
                buckets=list(zip(self._le, cumulative, strict=True)),
                sum_value=total,
            )
            family.add_sample(
                self.name + "_created",
                dict(zip(self.labelnames, values, strict=True)),
                series.created,
            )
        return [family]
