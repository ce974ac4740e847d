"""The results and scale-out run flags: where results go, what is reported, how the
client scales (table entries, config/fields.py)."""

from __future__ import annotations

from pathlib import Path

from loadgen.config.fields import Field, flag
from loadgen.config.objectives import parse_slo_flag
from loadgen.config.parsers import (
    SpecError,
    parse_cpu_list,
    parse_percentiles,
    parse_shard,
    parse_workers,
)
from loadgen.config.spec import DEFAULT_HTTP_TIMEOUT_S, DEFAULT_STREAM_IDLE_TIMEOUT_S


def parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise SpecError(f"--metrics-port {text!r}: need a port number 0..65535") from None
    if not 0 <= port <= 65535:
        raise SpecError(f"--metrics-port {port}: need 0..65535")
    return port


RESULTS_FIELDS: tuple[Field, ...] = (
    flag(
        "--results",
        type=Path,
        default=None,
        metavar="DIR",
        help="output directory; one that already holds a run is refused "
        "(default: ./results/<timestamp>)",
    ),
    flag(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the interrupted sweep in DIR from its first incomplete "
        "point; give the same flags as the first run (default: none)",
    ),
    flag(
        "--overwrite",
        action="store_true",
        help="replace the run already in --results DIR (its result files are deleted first)",
    ),
    flag(
        "--num-gpus",
        type=int,
        default=None,
        metavar="N",
        help="GPUs behind the server, for per-GPU throughput",
    ),
    flag(
        "--spec-tokens",
        type=int,
        default=None,
        metavar="K",
        help="draft tokens per step for the acceptance rate (default: from the server's /metrics)",
    ),
    flag(
        "--slo",
        shape="slo",
        type=parse_slo_flag,
        default={},
        metavar="M=T,...",
        help="goodput SLOs, e.g. ttft=2s,tpot=50ms (metrics ttft, tpot, itl, e2el; "
        "units us, ms, s; bare numbers are ms); with --find-max also objectives "
        "per percentile, ttft:p99=2s (plain M=T: p99) (default: none: no "
        "goodput figure)",
    ),
    flag(
        "--trials",
        type=int,
        default=1,
        metavar="N",
        help="measure every point N times (fresh connections, a seed per trial) "
        "and report each headline figure's mean, sd, CV and 95%% CI (default: 1)",
    ),
    flag(
        "--percentiles",
        shape="numbers",
        type=parse_percentiles,
        default=None,
        metavar="P,...",
        help="percentiles to report (default: 50,90,99,99.9; session runs add 75,95)",
    ),
    flag(
        "--request-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give up on a streamed request this long after it was sent, "
        "however steadily it streams (default: no timeout)",
    ),
    flag(
        "--stream-idle-timeout",
        type=float,
        default=DEFAULT_STREAM_IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help="a streamed request that receives no byte for this long (waiting "
        "for the first token included) ends as a timeout",
    ),
    flag(
        "--http-timeout",
        type=float,
        default=DEFAULT_HTTP_TIMEOUT_S,
        metavar="SECONDS",
        help="deadline of each non-streaming call: /v1/models, /version, "
        "/tokenize, /metrics scrapes",
    ),
    flag(
        "--max-error-rate",
        type=float,
        default=None,
        metavar="FRACTION",
        help="exit non-zero when a point's failed share exceeds this "
        "(results are written anyway) (default: 0.05; 0.10 for session runs, "
        "InferenceX's agentic gate)",
    ),
    flag(
        "--tokenizer",
        metavar="PATH|ORG/NAME",
        help="tokenizer.json, model dir or Hugging Face Hub id (HF cache and "
        "HF_HUB_OFFLINE honoured) (default: official DeepSeek-V4)",
    ),
    flag(
        "--aiperf-artifacts",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write each point as AIPerf's profile_export.jsonl, "
        "profile_export_aiperf.json and server_metrics_export.json (the server "
        "scraped every second) for InferenceX's agentic aggregation; several "
        "points: DIR/conc_<N>/ (default: off)",
    ),
    flag("--no-progress", action="store_true", help="no progress line on stderr"),
    flag(
        "--metrics-port",
        type=parse_port,
        default=None,
        metavar="PORT",
        help="serve live Prometheus metrics on 127.0.0.1:PORT during the run "
        "(0 = any free port, printed) (default: off)",
    ),
    flag(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --metrics-port; 0.0.0.0 lets Prometheus in a cluster "
        "scrape a loadgen pod",
    ),
)


SCALE_FIELDS: tuple[Field, ...] = (
    flag(
        "--workers",
        type=parse_workers,
        default=1,
        metavar="N|auto",
        help="client processes on this machine, each with its own event loop, "
        "connections and share of every point's concurrency; auto picks from the "
        "cores and the largest --conc and says what it chose (1 = this process)",
    ),
    flag(
        "--cpu-affinity",
        type=parse_cpu_list,
        default=(),
        metavar="CPUS",
        help="pin worker i to the i-th CPU of this list (taskset syntax, e.g. 2-7) "
        "(default: not pinned)",
    ),
    flag(
        "--shard",
        type=parse_shard,
        default=(0, 1),
        metavar="I/N",
        help="run shard I (from 0) of N of every point, for `loadgen merge` to "
        "combine with the other shards' results (default: 0/1, the whole point)",
    ),
    flag(
        "--shard-sync",
        type=Path,
        default=None,
        metavar="DIR",
        help="a directory every shard can write (e.g. on the shared results "
        "volume), empty for each run: shards start each point's measured phase "
        "together, so their points overlap (default: shards run independently)",
    ),
)
