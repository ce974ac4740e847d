"""The scoring part: what the figures are computed with and held to (`spec.scoring`): GPUs
and draft tokens, goodput SLOs, percentiles, the golden acceptance curve; its flags, its
struct and its checks."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.config import limits
from loadgen.config.endpoints_profile import PROFILES
from loadgen.config.fields import Field, flag
from loadgen.config.golden import DEFAULT_TOLERANCE, MODES, GoldenAL, read_golden
from loadgen.config.objectives import parse_slo_flag, slo_pairs
from loadgen.config.parsers import (
    SLO_METRICS,
    SpecError,
    conc_list,
    parse_conc,
    parse_percentiles,
    percentile_list,
)

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
ACCURACY_TASKS = ("gsm8k",)
ACCURACY_MIN_CONC = 16  # InferenceX's MIN_EVAL_CONC: lower points are not evaluated
SESSION_PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9)  # InferenceX's agentic set


@dataclass(frozen=True, slots=True)
class ScoringSpec:
    """What the figures are computed with and held to."""

    num_gpus: int | None = None
    spec_tokens: int | None = None
    golden_al: GoldenAL | None = None  # --golden-al: the curve each point is held to
    slos_ms: Mapping[str, float] = field(default_factory=dict)
    percentiles: tuple[float, ...] = PERCENTILES
    # `loadgen profile --scenario ...` (config/aiperf_profile.py): the scenario whose
    # submission rules each point is checked against (metrics/submission.py)
    scenario: str | None = None
    unsafe_override: bool = False
    # The server accepts drafts synthetically (vLLM rejection_sample_method: synthetic):
    # its outputs are not the target's, and the lossless check never calls them lossless
    spec_synthetic: bool = False
    # A sweep file's own comparison exits 1 when a lane's outputs differ from the
    # baseline's beyond run-to-run noise (metrics/lossless.py)
    require_lossless: bool = False
    # A sweep file's own comparison also judges each lane against the baseline lane
    # (metrics/verdict.py) and writes verdict.json in the tree
    verdict: bool = False
    # --profile mlperf-endpoints: a rehearsal of an MLPerf Endpoints curve
    # (config/endpoints_profile.py, orchestrate/endpoints_profile.py)
    profile: str | None = None
    # --accuracy gsm8k: an accuracy point per --accuracy-conc after the sweep
    # (orchestrate/accuracy.py), scored by metrics/gsm8k.py
    accuracy: str | None = None
    accuracy_data: Path | None = None
    accuracy_shots: Path | None = None
    accuracy_conc: tuple[int, ...] = ()  # (): the sweep's highest and median conc >= 16
    accuracy_min: float | None = None
    accuracy_max_tokens: int = 2048

    def accuracy_concs(self, sweep: tuple[int, ...]) -> tuple[int, ...]:
        """--accuracy-conc, else as InferenceX picks: of the sweep's concurrencies >= 16,
        the highest and the median (the upper one of an even count); none >= 16: the
        highest."""
        if self.accuracy_conc:
            return self.accuracy_conc
        eligible = sorted({c for c in sweep if c >= ACCURACY_MIN_CONC})
        if not eligible:
            return (max(sweep),)
        return tuple(sorted({eligible[len(eligible) // 2], eligible[-1]}))


FIELDS: tuple[Field, ...] = (
    flag(
        "--num-gpus",
        type=int,
        default=None,
        metavar="N",
        help="GPUs behind the server, for per-GPU throughput",
        fills="num_gpus",
    ),
    flag(
        "--spec-tokens",
        type=int,
        default=None,
        metavar="K",
        help="draft tokens per step for the acceptance rate (default: from the server's /metrics)",
        fills="spec_tokens",
    ),
    flag(
        "--spec-synthetic",
        action="store_true",
        help="the server accepts drafts synthetically (vLLM rejection_sample_method: "
        "synthetic): `loadgen compare` labels its outputs not verified by the target "
        "and never lossless",
        fills="spec_synthetic",
    ),
    flag(
        "--require-lossless",
        action="store_true",
        help="a sweep file's comparison exits 1 when a lane's outputs differ from the "
        "baseline lane's beyond run-to-run noise (needs --record-outputs, on by "
        "default in such a sweep file)",
        fills="require_lossless",
    ),
    flag(
        "--verdict",
        action="store_true",
        help="a sweep file's comparison also judges every lane against the baseline "
        "lane per point and metric (better, worse or no difference, with its interval "
        "and minimum detectable effect) and writes verdict.json in the results tree",
        fills="verdict",
    ),
    flag(
        "--profile",
        choices=PROFILES,
        default=None,
        metavar="NAME",
        help="mlperf-endpoints: rehearse an MLPerf Endpoints curve (not the official "
        "client): 7 fixed-concurrency points placed in the rules' log2 regions between "
        "the lowest and highest --conc, TPOT p90 and TTFT p90 as the headline, --accuracy "
        "gsm8k right after each mandatory point, outputs kept for the lossless check, and "
        "a summary naming every rule checked and which the run does not meet",
        fills="profile",
    ),
    flag(
        "--slo",
        shape="slo",
        type=parse_slo_flag,
        read=slo_pairs,
        default={},
        metavar="M=T,...",
        help="goodput SLOs, e.g. ttft=2s,tpot=50ms (metrics ttft, tpot, itl, e2el; "
        "units us, ms, s; bare numbers are ms); with --find-max also objectives "
        "per percentile, ttft:p99=2s (plain M=T: p99) (default: none: no "
        "goodput figure)",
    ),
    flag(
        "--percentiles",
        shape="numbers",
        type=parse_percentiles,
        read=percentile_list,
        default=None,
        metavar="P,...",
        help="percentiles to report (default: 50,90,99,99.9; session runs add 75,95)",
    ),
    flag(
        "--golden-al",
        type=Path,
        default=None,
        metavar="FILE",
        help="check each point's acceptance length against an InferenceX golden "
        "file (golden_al_distribution/*.yaml); a point outside tolerance makes "
        "the exit status 1 (default: no check)",
    ),
    flag(
        "--golden-al-model",
        default=None,
        metavar="NAME",
        help="the golden file's model key (default: --model)",
    ),
    flag(
        "--accuracy",
        default=None,
        choices=ACCURACY_TASKS,
        help="after the sweep, run the task's accuracy point(s) at --accuracy-conc: "
        "GSM8K 5-shot chat as InferenceX runs it with lm-eval, timed like any point "
        "(default: none)",
        fills="accuracy",
    ),
    flag(
        "--accuracy-data",
        type=Path,
        default=None,
        metavar="FILE",
        help="the questions: GSM8K's test split as JSONL (Hugging Face openai/gsm8k, config main)",
        fills="accuracy_data",
    ),
    flag(
        "--accuracy-shots",
        type=Path,
        default=None,
        metavar="FILE",
        help="the 5-shot examples' pool: GSM8K's train split as JSONL, drawn per question "
        "as lm-eval draws them (seed 1234)",
        fills="accuracy_shots",
    ),
    flag(
        "--accuracy-conc",
        shape="numbers",
        type=parse_conc,
        read=conc_list,
        default=None,
        metavar="N,...",
        help="concurrency of the accuracy point(s) (default: the sweep's highest and "
        "median conc >= 16, as InferenceX picks)",
        fills="accuracy_conc",
    ),
    flag(
        "--accuracy-min",
        type=float,
        default=None,
        metavar="FRACTION",
        help="exit status 1 when an accuracy point's strict-match exact match is below "
        "this, e.g. 0.91 (InferenceX's dsv4 threshold) (default: no gate)",
        fills="accuracy_min",
    ),
    flag(
        "--accuracy-max-tokens",
        type=int,
        default=None,
        metavar="N",
        help="max_tokens of each accuracy request (default: 2048)",
        fills="accuracy_max_tokens",
    ),
    flag(
        "--golden-al-tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        metavar="FRACTION",
        help=f"relative tolerance (default: {DEFAULT_TOLERANCE})",
    ),
)


def percentiles(values: argparse.Namespace, sessions: bool) -> tuple[float, ...]:
    """--percentiles, else the run kind's set; vLLM's --metric-percentiles are added."""
    chosen: tuple[float, ...] = values.percentiles or (
        SESSION_PERCENTILES if sessions else PERCENTILES
    )
    if values.metric_percentiles:  # vLLM's --metric-percentiles are reported too
        chosen = tuple(sorted({*chosen, *values.metric_percentiles}))
    return chosen


def golden_al(
    values: argparse.Namespace, thinking: str, spec_tokens: int | None
) -> GoldenAL | None:
    """The --golden-al curve; a missing model/mode/K entry is one line now, before anything
    runs (K only when --spec-tokens names it)."""
    if values.golden_al is None:
        return None
    tolerance = values.golden_al_tolerance
    if not (math.isfinite(tolerance) and 0 < tolerance < 1):
        raise SpecError(
            f"--golden-al-tolerance {tolerance}: give a fraction in (0, 1), e.g. 0.03 for 3%"
        )
    model = values.golden_al_model or values.model
    if not model:
        raise SpecError(
            "--golden-al: name the golden file's model with --golden-al-model (or --model)"
        )
    golden = read_golden(values.golden_al, model, MODES.get(thinking, thinking), tolerance)
    if spec_tokens is not None and golden.al_for(spec_tokens) is None:
        raise SpecError(
            f"--golden-al {golden.path}: {model}/{golden.mode} has no entry for "
            f"K={spec_tokens} (it has K={golden.ks})"
        )
    return golden


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_values(scoring: ScoringSpec) -> None:
    _check(scoring.num_gpus is None or scoring.num_gpus >= 1, "--num-gpus: must be >= 1")
    _check(
        scoring.spec_tokens is None or scoring.spec_tokens >= 1,
        "--spec-tokens: must be >= 1",
    )
    _check(
        all(k in SLO_METRICS and v > 0 for k, v in scoring.slos_ms.items()),
        f"--slo: metrics must be among {', '.join(SLO_METRICS)} with positive limits",
    )
    _check(
        bool(scoring.percentiles) and all(0 < p < 100 for p in scoring.percentiles),
        "--percentiles: each must be strictly between 0 and 100",
    )
    _check_accuracy(scoring)


def _check_accuracy(scoring: ScoringSpec) -> None:
    """The --accuracy options hang together; the files are read when the run starts
    (orchestrate/accuracy.py), where a missing one is one line saying where to get it."""
    _check(scoring.accuracy_max_tokens >= 1, "--accuracy-max-tokens: must be >= 1")
    limits.tokens(scoring.accuracy_max_tokens, "--accuracy-max-tokens")
    if scoring.accuracy is None:
        given = [
            flag
            for flag, value in (
                ("--accuracy-data", scoring.accuracy_data),
                ("--accuracy-shots", scoring.accuracy_shots),
                ("--accuracy-conc", scoring.accuracy_conc or None),
                ("--accuracy-min", scoring.accuracy_min),
            )
            if value is not None
        ]
        _check(not given, f"{', '.join(given)}: only with --accuracy gsm8k")
        return
    _check(
        scoring.accuracy in ACCURACY_TASKS,
        f"--accuracy {scoring.accuracy!r}: allowed: {', '.join(ACCURACY_TASKS)}",
    )
    where = (
        "GSM8K is the Hugging Face dataset openai/gsm8k (config main): its test split as "
        "JSONL for --accuracy-data, its train split for --accuracy-shots"
    )
    _check(
        scoring.accuracy_data is not None, f"--accuracy gsm8k needs --accuracy-data FILE; {where}"
    )
    _check(
        scoring.accuracy_shots is not None, f"--accuracy gsm8k needs --accuracy-shots FILE; {where}"
    )
    _check(all(c >= 1 for c in scoring.accuracy_conc), "--accuracy-conc: each must be >= 1")
    _check(
        scoring.accuracy_min is None
        or (math.isfinite(scoring.accuracy_min) and 0 <= scoring.accuracy_min <= 1),
        "--accuracy-min: give a fraction in [0, 1], e.g. 0.91",
    )


def _check_finite(scoring: ScoringSpec) -> None:
    _check(
        all(math.isfinite(v) for v in scoring.slos_ms.values()),
        "--slo: each limit must be a finite duration",
    )


def check(scoring: ScoringSpec) -> None:
    """The scoring's own checks, in the order the first error is reported."""
    _check_finite(scoring)
    _check_values(scoring)
