"""The telemetry part: what is scraped beside the requests, server metrics, GPU exporters,
power (`spec.telemetry`): its flags, its struct and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.config import limits
from loadgen.config.fields import Field, default_of, flag
from loadgen.config.parsers import SpecError
from loadgen.config.redact import redact_url


@dataclass(frozen=True, slots=True)
class TelemetrySpec:
    """What is scraped beside the requests: server metrics, GPU exporters, power."""

    server_metrics: tuple[str, ...] = ()  # /metrics URLs scraped instead of the target's
    gpu_metrics: tuple[str, ...] = ()  # GPU exporters sampled during every point (energy)
    gpu_metrics_interval_s: float = 1.0
    gpu_power_csv: Path | None = None  # nvidia-smi/amd-smi telemetry recorded meanwhile
    series_interval_s: float = 1.0  # the server series of --aiperf-artifacts


# What a --server-metrics URL serves in a disaggregated deployment (a Dynamo frontend over
# prefill and decode workers): a plain URL is a worker's.
ROLES = ("frontend", "prefill", "decode", "worker")


def metrics_source(entry: str) -> tuple[str, str]:
    """A --server-metrics entry -> (role, URL): `ROLE=URL`, or a plain URL (a worker's)."""
    role, sep, url = entry.partition("=")
    if sep and role in ROLES:
        return role, url
    return "worker", entry


FIELDS: tuple[Field, ...] = (
    flag(
        "--server-metrics",
        action="append",
        default=[],
        metavar="[ROLE=]URL",
        help="scrape this Prometheus /metrics instead of the target's, repeatable: "
        "the workers behind a router or a Dynamo frontend; counters are summed, "
        "each URL's own figures kept (a URL without a path gets /metrics; "
        "list the target too to keep it); ROLE (frontend, prefill, decode, worker: "
        "the default) groups the URLs' figures per role (default: the target's)",
        fills="server_metrics",
        to=tuple,
        section="target",
    ),
    flag(
        "--gpu-metrics",
        action="append",
        default=[],
        metavar="URL",
        help="a GPU exporter's Prometheus endpoint (NVIDIA dcgm-exporter, AMD "
        "device-metrics-exporter; `loadgen sim`'s /gpu/metrics; `sim` with --sim), "
        "repeatable: one per node; sampled during every point for energy per "
        "token (a URL without a path gets /metrics) (default: none)",
        fills="gpu_metrics",
        to=tuple,
        section="target",
    ),
    flag(
        "--gpu-metrics-interval",
        type=float,
        default=default_of(TelemetrySpec, "gpu_metrics_interval_s"),
        metavar="SECONDS",
        help="seconds between --gpu-metrics samples (at most 3: a longer gap "
        "makes a point's energy invalid, as in InferenceX)",
        fills="gpu_metrics_interval_s",
        section="target",
    ),
    flag(
        "--gpu-power-csv",
        type=Path,
        default=None,
        metavar="FILE",
        help="a GPU power telemetry CSV being recorded during the run, e.g. by "
        "`nvidia-smi --query-gpu=timestamp,index,power.draw --format=csv -lms "
        "500 -f FILE` (or amd-smi): each point's energy integrated from it, "
        "as InferenceX does (default: none)",
        fills="gpu_power_csv",
        section="target",
    ),
)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_urls(telemetry: TelemetrySpec) -> None:
    """URLs and the sampling interval (`sim` only with --sim: spec.py, which sees both)."""
    for entry in telemetry.server_metrics:
        url = metrics_source(entry)[1]
        _check(
            url.startswith(("http://", "https://")),
            f"--server-metrics {redact_url(entry)!r}: must be [ROLE=]URL, ROLE one of "
            f"{', '.join(ROLES)} and the URL starting with http:// or https://",
        )
    for url in telemetry.gpu_metrics:
        _check(
            url.startswith(("http://", "https://")) or url == "sim",
            f"--gpu-metrics {url!r}: must start with http:// or https:// (or be `sim`, "
            "with --sim: the embedded simulator's /gpu/metrics)",
        )
    twice = sorted({url for url in telemetry.gpu_metrics if telemetry.gpu_metrics.count(url) > 1})
    _check(
        not twice,
        f"--gpu-metrics {', '.join(map(redact_url, twice))}: given twice, its GPUs would be "
        "counted twice; name every exporter once",
    )
    _check(
        0 < telemetry.gpu_metrics_interval_s <= 3.0,
        f"--gpu-metrics-interval {telemetry.gpu_metrics_interval_s:g}: must be in (0, 3] "
        "seconds (samples more than 3 s apart make a point's energy invalid)",
    )


def _check_series(telemetry: TelemetrySpec) -> None:
    _check(telemetry.series_interval_s > 0, "--slice-duration: must be > 0 seconds")


def _check_limits(telemetry: TelemetrySpec) -> None:
    # `loadgen profile`'s slices are a /metrics scrape of the server each
    limits.seconds(telemetry.series_interval_s, "--slice-duration", limits.MIN_SERIES_SECONDS)


def check(telemetry: TelemetrySpec) -> None:
    """The telemetry's own checks, in the order the first error is reported."""
    _check_urls(telemetry)
    _check_series(telemetry)
    _check_limits(telemetry)
