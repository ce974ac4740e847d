"""GSM8K scoring as lm-evaluation-harness scores InferenceX's chat task: pure, no I/O.

Read at these commits (the protocol is theirs, re-stated here, not copied):
- EleutherAI/lm-evaluation-harness 4e7e0d47f33bc71070c1d38394bafbb52b117163:
  lm_eval/tasks/gsm8k/gsm8k.yaml (filters, metric kwargs), lm_eval/filters/extraction.py
  (RegexFilter: findall, group_select, a tuple match's first non-empty group, strip,
  fallback "[invalid]"), lm_eval/api/metrics.py (exact_match_hf_evaluate: each of
  regexes_to_ignore removed by re.sub from prediction and reference in order, then
  lower-cased; mean_stderr: sample standard deviation / sqrt(n)).
- SemiAnalysisAI/InferenceX 843c6254ff69b567f772f6a5fd97675af3d04431:
  utils/evals/gsm8k.yaml (the prompt: workload/gsm8k.py; both filters take the LAST match,
  group_select -1, where lm-eval's own strict-match takes the first) and
  utils/evals/thresholds.yaml (dsv4: em_strict >= 0.91).

The reference is the dataset's whole `answer` (reasoning, then `#### N`): the ignore
regex `(?s).*#### ` leaves N, as lm-eval compares it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

FALLBACK = "[invalid]"

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORED = (",", r"\$", r"(?s).*#### ", r"\.$")  # regexes_to_ignore, in order
MARK = "#### "
FILTERS = ("strict-match", "flexible-extract")


def extract(pattern: re.Pattern[str], response: str) -> str:
    """lm-eval's regex filter with group_select -1 and take_first: the last match; of a
    match with groups, its first non-empty group; stripped; else the fallback."""
    matches = pattern.findall(response)
    if not matches:
        return FALLBACK
    match = matches[-1]
    if isinstance(match, tuple):
        groups = [group for group in match if group]
        match = groups[0] if groups else FALLBACK
    return str(match).strip()


def normalise(text: str) -> str:
    """What exact_match compares: the ignore regexes removed in order, lower-cased.

    `(?s).*#### ` is not run as a regex: re.sub tries it from every position and each try
    runs `.*` to the end and backs off, quadratic in a long reply without the mark (a
    200 KB digit run took 12 s holding the GIL, deaf to Ctrl-C). Its first match runs
    from the start to the end of the LAST mark, and nothing after that holds one, so it
    is removing everything up to the last mark; the other three are linear."""
    for pattern in IGNORED:
        if pattern == IGNORED[2]:
            last = text.rfind(MARK)
            text = text if last < 0 else text[last + len(MARK) :]
        else:
            text = re.sub(pattern, "", text)
    return text.lower()


def gold(answer: str) -> str:
    """The dataset answer's number, as exact_match sees the reference."""
    return normalise(answer)


@dataclass(frozen=True, slots=True)
class Scored:
    """One response under both filters."""

    strict: str  # extracted by strict-match (or FALLBACK)
    flexible: str  # extracted by flexible-extract (or FALLBACK)
    strict_correct: bool
    flexible_correct: bool


def score(response: str, answer: str) -> Scored:
    """`response` (the model's reply text) against the dataset's `answer`."""
    reference = gold(answer)
    strict, flexible = extract(STRICT, response), extract(FLEXIBLE, response)
    return Scored(
        strict,
        flexible,
        normalise(strict) == reference,
        normalise(flexible) == reference,
    )


@dataclass(frozen=True, slots=True)
class ExactMatch:
    """The mean of 0/1 scores and lm-eval's standard error of it."""

    value: float
    stderr: float | None  # None below 2 samples (lm-eval's sample stddev needs 2)
    n: int


def exact_match(correct: Sequence[bool]) -> ExactMatch:
    n = len(correct)
    if n == 0:
        return ExactMatch(math.nan, None, 0)
    mean = sum(correct) / n
    if n < 2:
        return ExactMatch(mean, None, n)
    variance = sum((float(c) - mean) ** 2 for c in correct) / (n - 1)
    return ExactMatch(mean, math.sqrt(variance) / math.sqrt(n), n)
