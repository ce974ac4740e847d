"""Live Prometheus metrics: loadgen's instruments (instruments.py; labels and buckets in
buckets.py; the session view in sessions.py), the observer that feeds them from the
runner's hooks (observer.py), and /metrics over HTTP (server.py)."""

from loadgen.sinks.prometheus.buckets import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    POINT_LABELS,
    RUN_LABELS,
    TTFT_BUCKETS,
)
from loadgen.sinks.prometheus.instruments import LoadgenMetrics
from loadgen.sinks.prometheus.observer import MetricsObserver, observe_completed
from loadgen.sinks.prometheus.server import (
    MetricsServer,
    WithLabels,
    live_metrics,
    metrics_handler,
    serve_metrics,
)

__all__ = [
    "E2E_BUCKETS",
    "ITL_BUCKETS",
    "POINT_LABELS",
    "RUN_LABELS",
    "TTFT_BUCKETS",
    "LoadgenMetrics",
    "MetricsObserver",
    "MetricsServer",
    "WithLabels",
    "live_metrics",
    "metrics_handler",
    "observe_completed",
    "serve_metrics",
]
