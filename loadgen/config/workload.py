"""The workload part: what each request asks, the prompts (synthetic or a dataset) and the
sampling (`spec.workload`), and the run's seed: its flags, its struct and its checks."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from encoders import ENCODERS
from loadgen.config import limits
from loadgen.config.dataset_format import (
    DATASET_FORMATS,
    FORMAT_CHOICES,
    MAX_CONVERSATION_BYTES,
    MAX_DATASET_BYTES,
    TRACE_FORMATS,
    DatasetFormat,
    detect_format,
    spec_format,
)
from loadgen.config.fields import Field, default_of, flag
from loadgen.config.parsers import SpecError, check_finite

ThinkingMode = Literal["chat", "thinking"]
ReasoningEffort = Literal["low", "high", "max"]
ENCODER_NAMES: tuple[str, ...] = tuple(ENCODERS)
THINKING_MODES: tuple[str, ...] = ("chat", "thinking")
REASONING_EFFORTS: tuple[str, ...] = ("low", "high", "max")
# --reasoning-effort's choices: DeepSeek-V4's three modes (docs/results.md, thinking
# phases); `none` is Non-think (--thinking chat), the others think at that effort
EFFORT_CHOICES: tuple[str, ...] = ("none", *REASONING_EFFORTS)
MAX_SEED = 2**63 - 1  # numpy's SeedSequence takes any such int, vLLM's request seed an int64
# Trace replay takes its lengths from the trace; --isl/--osl then only size the probe.
TRACE_PROBE_ISL, TRACE_PROBE_OSL = 256, 64


@dataclass(frozen=True, slots=True)
class SpeedBenchOptions:
    """`--dataset-name speed_bench`: which file of the directory and which rows of it."""

    subset: str = "qualitative"  # reads <dataset>/<subset>.jsonl
    category: str | None = None  # None: every row


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What each request asks: the prompts (synthetic or a dataset) and the sampling,
    which belongs here because it shapes the replies as much as the lengths do."""

    isl: int | None  # None only with a dataset: lengths come from the data
    osl: int | None  # None only with a dataset that carries output lengths (ShareGPT)
    encoder: str = "dsv4"  # one of encoders.ENCODERS (a registry, so not a Literal)
    thinking: ThinkingMode = "thinking"
    reasoning_effort: ReasoningEffort | None = None
    range_ratio: float = 1.0
    dataset: Path | None = None
    # auto: told apart by content (trace formats are resolved when the spec is built)
    dataset_format: DatasetFormat = "auto"
    sharegpt_limits: bool = False  # vLLM's ShareGPT length pruning (--dataset-name sharegpt)
    speed_bench: SpeedBenchOptions | None = None  # with dataset_format "speed_bench"
    temperature: float = 0.0
    top_p: float | None = None  # None: not sent (the server's default, 1.0 on vLLM)
    max_context_length: int | None = None

    @property
    def probe_lengths(self) -> tuple[int, int]:
        """(isl, osl) of a synthetic prompt standing in for this workload: the lengths
        given, else the probe's (a dataset alone gives them)."""
        return probe_lengths(self.isl, self.osl)


def probe_lengths(isl: int | None, osl: int | None) -> tuple[int, int]:
    """The one place the probe's default lengths apply."""
    return isl or TRACE_PROBE_ISL, osl or TRACE_PROBE_OSL


FIELDS: tuple[Field, ...] = (
    flag(
        "--isl",
        type=int,
        metavar="TOKENS",
        help="input length in tokens (chat template and BOS included) (required "
        "unless --dataset: then each prompt's own length; for trace replay it "
        "only sizes the preflight probe)",
        section="workload",
    ),
    flag(
        "--osl",
        type=int,
        metavar="TOKENS",
        help="output length in tokens (max_tokens, with ignore_eos) (required "
        "unless a ShareGPT --dataset: then each answer's length)",
        section="workload",
    ),
    flag(
        "--range-ratio",
        type=float,
        default=None,
        metavar="R",
        help="lengths uniform in [R*L, L] for --isl and --osl (1.0 = exact) (default: 1.0)",
        fills="range_ratio",
        section="workload",
    ),
    flag(
        "--dataset",
        type=Path,
        metavar="FILE",
        help="prompts from a file instead of random ones: ShareGPT JSON "
        "(conversations of from/value; the first turn is the prompt, the second "
        "the reference answer) or JSONL, one OpenAI messages list (or {messages}, "
        "or vLLM custom {prompt, output_tokens}) per line; or agentic traces to "
        "replay as sessions (see --dataset-format, --multi-turn); read into "
        f"memory, so at most {MAX_DATASET_BYTES >> 30} GiB, each line at "
        f"most {MAX_CONVERSATION_BYTES >> 20} MiB (about 1M tokens) (default: none)",
        fills="dataset",
        section="workload",
    ),
    flag(
        "--dataset-format",
        choices=FORMAT_CHOICES,
        default="auto",
        help="format of --dataset: sharegpt (JSON list, or one conversation per "
        "line), messages (one OpenAI messages list per line), custom (vLLM "
        "{prompt, output_tokens} per line), weka (AgentX agentic traces: a JSONL "
        "file or a directory of .json traces), mooncake (JSONL); auto detects it "
        "from the first item (vLLM's --dataset-name sharegpt|custom also names it)",
    ),
    flag(
        "--encoder",
        choices=ENCODER_NAMES,
        default=None,
        help="prompt template loadgen applies (default: dsv4)",
        fills="encoder",
        section="workload",
    ),
    flag(
        "--thinking",
        choices=THINKING_MODES,
        default=None,
        help="DeepSeek-V4 thinking mode (default: thinking)",
        fills="thinking",
        section="workload",
    ),
    flag(
        "--reasoning-effort",
        choices=EFFORT_CHOICES,
        default=None,
        help="DeepSeek-V4 mode: none (Non-think, as --thinking chat), high (Think High), "
        "max (Think Max: the server needs --max-model-len >= 393216); low is the "
        "encoder's too. Default: thinking without an effort prefix",
        fills="reasoning_effort",
        section="workload",
    ),
    flag(
        "--temperature",
        type=float,
        default=default_of(WorkloadSpec, "temperature"),
        help="sampling temperature",
        fills="temperature",
        section="workload",
    ),
    flag(
        "--top-p",
        type=float,
        default=None,
        metavar="P",
        help="nucleus sampling top_p, sent in every body (acceptance depends on "
        "sampling) (default: not sent: the server's, 1.0 on vLLM)",
        fills="top_p",
        section="workload",
    ),
    flag(
        "--seed",
        type=int,
        default=0,
        help=f"seed for prompts, lengths, arrivals, 0..{MAX_SEED}",
        fills="seed",
        section="workload",
    ),
)


def dataset_format(values: argparse.Namespace, named: str) -> str:
    """RunSpec.dataset_format from --dataset-format and `named` (--dataset-name's format,
    "auto" without it); a trace file given as auto is resolved here, since it makes the
    run a session run. ShareGPT vs JSONL stays auto: the dataset reader tells them apart."""
    given = spec_format(values.dataset_format)
    if given != "auto" and named != "auto" and given != named:
        raise SpecError(
            f"--dataset-format {values.dataset_format} and --dataset-name name "
            "different formats: give one"
        )
    fmt = given if given != "auto" else named
    if values.dataset is not None and fmt == "auto" and values.dataset.exists():
        detected = detect_format(values.dataset)
        if detected in TRACE_FORMATS:
            fmt = detected
    return fmt


def asks_thinking(workload: WorkloadSpec, endpoint: str) -> bool:
    """Whether the requests ask the model to think: chat sends the template's `thinking`
    kwarg, completions only carry it in a prompt loadgen's DeepSeek-V4 encoder renders
    (a raw prompt asks nothing). The phases of a request that asked and was not told apart
    are unknown (metrics/phases.py)."""
    if workload.thinking != "thinking":
        return False
    return endpoint == "chat" or workload.encoder == "dsv4"


def fold_reasoning_effort(values: argparse.Namespace) -> None:
    """--reasoning-effort none|low|high|max and --thinking, as one mode: `none` is
    --thinking chat; an effort is thinking. A contradiction is one line."""
    effort, thinking = values.reasoning_effort, values.thinking
    if effort is None:
        return
    wanted = "chat" if effort == "none" else "thinking"
    if thinking not in (None, wanted):
        raise SpecError(
            f"--reasoning-effort {effort} is {'Non-think' if effort == 'none' else 'thinking'}"
            f", but the run also asks --thinking {thinking} (or --dsv4): give one of them"
        )
    values.thinking = wanted
    values.reasoning_effort = None if effort == "none" else effort


def derive(values: argparse.Namespace, fmt: str) -> dict[str, Any]:
    """The format, and the lengths: a trace replay's only size the preflight probe."""
    isl, osl = values.isl, values.osl
    if fmt in TRACE_FORMATS:
        isl, osl = probe_lengths(isl, osl)
    return {"dataset_format": fmt, "isl": isl, "osl": osl}


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_lengths(workload: WorkloadSpec) -> None:
    _check(
        workload.isl is not None or workload.dataset is not None,
        "--isl is required (or --dataset, whose prompts give the input lengths)",
    )
    _check(
        workload.osl is not None or workload.dataset is not None,
        "--osl is required (or a ShareGPT --dataset, whose answers give the output lengths)",
    )
    _check(workload.isl is None or workload.isl >= 1, f"--isl {workload.isl}: must be >= 1 token")
    _check(workload.osl is None or workload.osl >= 1, f"--osl {workload.osl}: must be >= 1 token")


def _check_limits(workload: WorkloadSpec) -> None:
    limits.tokens(workload.isl, "--isl")
    limits.tokens(workload.osl, "--osl")


def _check_dataset(workload: WorkloadSpec) -> None:
    _check(
        workload.dataset_format in DATASET_FORMATS,
        f"dataset format {workload.dataset_format!r}: allowed: {', '.join(DATASET_FORMATS)}",
    )
    _check(
        (workload.dataset_format == "speed_bench") == (workload.speed_bench is not None),
        "dataset format speed_bench goes with its options (--dataset-name speed_bench)",
    )


def _check_prompts(workload: WorkloadSpec) -> None:
    _check(
        workload.encoder in ENCODER_NAMES,
        f"--encoder {workload.encoder!r}: allowed: {', '.join(ENCODER_NAMES)}",
    )
    _check(
        workload.thinking in THINKING_MODES,
        f"--thinking {workload.thinking!r}: allowed: chat, thinking",
    )
    _check(
        workload.reasoning_effort is None or workload.reasoning_effort in REASONING_EFFORTS,
        f"--reasoning-effort {workload.reasoning_effort!r}: allowed: low, high, max",
    )


def _check_range_ratio(workload: WorkloadSpec) -> None:
    _check(
        0.0 <= workload.range_ratio <= 1.0,
        f"--range-ratio {workload.range_ratio}: must be in [0, 1]",
    )


def _check_sampling(workload: WorkloadSpec) -> None:
    _check(workload.temperature >= 0, "--temperature: must be >= 0")
    _check(
        workload.top_p is None or 0 < workload.top_p <= 1,
        f"--top-p {workload.top_p}: must be in (0, 1]",
    )


def _check_context(workload: WorkloadSpec) -> None:
    _check(
        workload.max_context_length is None or workload.max_context_length >= 1,
        "--max-context-length: must be >= 1 token",
    )


# floats: each must be a finite number
FLOATS = (("temperature", "--temperature"), ("top_p", "--top-p"), ("range_ratio", "--range-ratio"))


def check(workload: WorkloadSpec) -> None:
    """The workload's own checks, in the order the first error is reported; the bounds
    (config/limits.py) after the signs."""
    check_finite(workload, FLOATS)
    _check_lengths(workload)
    _check_dataset(workload)
    _check_prompts(workload)
    _check_range_ratio(workload)
    _check_sampling(workload)
    _check_context(workload)
    _check_limits(workload)
