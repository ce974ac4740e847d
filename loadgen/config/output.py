"""The output part: where the results go and in which extra formats, what stderr shows
(`spec.output`), and the live metrics endpoint: its flags, its struct and its checks."""

from __future__ import annotations

import argparse
import operator
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.config.fields import Field, flag
from loadgen.config.parsers import VLLM_PERCENTILE_METRICS, SpecError


@dataclass(frozen=True, slots=True)
class VllmResultOptions:
    """`--save-result`: also write each point as vLLM `bench serve --save-result` JSON."""

    result_dir: Path | None = None  # None: the run's results directory
    filename: str | None = None  # NAME of NAME.json / NAME_conc<N>.json; None: vLLM's name
    detailed: bool = False  # --save-detailed: the per-request lists
    # InferenceX's defaults (vLLM 0.32's are ttft,tpot,itl and 99): its dashboards read
    # p90/p99/p99.9 of TTFT, TPOT and E2EL.
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
    metric_percentiles: tuple[float, ...] = (90.0, 99.0, 99.9)
    label: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    model_id: str | None = None  # the model as the user named it (--model)
    tokenizer_id: str | None = None
    backend: str = "vllm"


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """Where the results go and in which extra formats; what stderr shows."""

    results_dir: Path | None = None  # None: ./results/<timestamp>
    progress: bool = True
    vllm_result: VllmResultOptions | None = None
    # AIPerf's three artifact files per point (sinks/aiperf_artifacts.py), for InferenceX's
    # agentic aggregation; the server series are scraped every series_interval_s meanwhile.
    aiperf_artifacts: Path | None = None
    resume: bool = False  # continue the interrupted sweep in results_dir
    overwrite: bool = False  # replace the earlier run's files in results_dir
    ignored_flags: tuple[str, ...] = ()  # accepted for compatibility, said once on stderr
    # Keep every request's output (token ids, text, digests, finish reason) on its record
    # (client/outputs.py); a sweep file turns it on where its lanes can be compared
    # output for output (orchestrate/lanes.py)
    record_outputs: bool = False


def parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise SpecError(f"--metrics-port {text!r}: need a port number 0..65535") from None
    if not 0 <= port <= 65535:
        raise SpecError(f"--metrics-port {port}: need 0..65535")
    return port


FIELDS: tuple[Field, ...] = (
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
        fills="overwrite",
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
        fills="aiperf_artifacts",
    ),
    flag(
        "--record-outputs",
        action="store_true",
        help="keep each request's output on its record (token ids as received, "
        "else the text; their digest; the finish reason) for `loadgen compare`'s "
        "lossless check and accuracy scoring (default: off; on in a sweep file whose "
        "lanes share seed, prompts and temperature 0)",
        fills="record_outputs",
    ),
    flag(
        "--no-progress",
        action="store_true",
        help="no progress line on stderr",
        fills="progress",
        to=operator.not_,
    ),
    # live metrics are the CLI's, not the run's: not in RunSpec (cli.py serves them)
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


def default_results_dir(now: float | None = None) -> Path:
    """./results/<timestamp>, with -2, -3, ... when a run started in the same second."""
    base = Path("results") / time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def derive(values: argparse.Namespace) -> dict[str, Any]:
    """Where the results go: --resume's directory, --results, or a fresh timestamped one."""
    if values.resume is not None and values.results is not None and values.results != values.resume:
        raise SpecError(
            f"--resume {values.resume} continues the run in that directory; "
            f"drop --results {values.results}"
        )
    return {
        "results_dir": values.resume or values.results or default_results_dir(),
        "resume": values.resume is not None,
    }


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_resume(output: OutputSpec) -> None:
    _check(
        not (output.resume and output.overwrite),
        "--resume and --overwrite exclude each other: continue the run, or replace it",
    )


def _check_vllm_result(output: OutputSpec) -> None:
    options = output.vllm_result
    if options is None:
        return
    unknown = [m for m in options.percentile_metrics if m not in VLLM_PERCENTILE_METRICS]
    _check(
        bool(options.percentile_metrics) and not unknown,
        f"--percentile-metrics: {','.join(unknown) or '(none)'} not reported; allowed: "
        f"{', '.join(VLLM_PERCENTILE_METRICS)}",
    )
    _check(
        bool(options.metric_percentiles) and all(0 < p < 100 for p in options.metric_percentiles),
        "--metric-percentiles: each must be strictly between 0 and 100",
    )
    if options.filename is not None:
        _check(
            bool(options.filename) and "/" not in options.filename and "\0" not in options.filename,
            f"--result-filename {options.filename!r}: a file name, not a path "
            "(use --result-dir for the directory)",
        )
    if options.label is not None:
        # The label starts vLLM's file name: a `/` in it would put the file elsewhere.
        _check(
            "/" not in options.label and "\0" not in options.label,
            f"--label {options.label!r}: a label, not a path: no `/` in it (use "
            "--result-dir for the directory)",
        )


def check(output: OutputSpec) -> None:
    """The output's own checks, in the order the first error is reported."""
    _check_resume(output)
    _check_vllm_result(output)
