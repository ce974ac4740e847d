"""An accuracy point's score (`gsm8k_conc_<N>.json`) and its per-sample lines
(`gsm8k_samples_conc_<N>.jsonl`): frozen Structs, read back against these types."""

from __future__ import annotations

import msgspec


class ExactMatchFigure(msgspec.Struct, frozen=True, kw_only=True):
    """One filter's exact match: the mean of 0/1 scores, lm-eval's standard error, n."""

    exact_match: float
    stderr: float | None  # null below 2 samples
    n: int


class AccuracyResult(msgspec.Struct, frozen=True, kw_only=True):
    """The accuracy point at one concurrency; its timing is conc_<N>.json beside it."""

    task: str  # "gsm8k"
    protocol: str  # e.g. "5-shot chat, InferenceX utils/evals/gsm8k.yaml"
    conc: int
    n: int  # questions asked
    strict_match: ExactMatchFigure
    flexible_extract: ExactMatchFigure
    answered: int  # requests that ended without an error
    accuracy_min: float | None = None  # --accuracy-min, when given
    passed: bool | None = None  # strict_match >= accuracy_min; null without a gate
    complete: bool = True  # false: the point stopped early (its unanswered questions count wrong)


class AccuracySample(msgspec.Struct, frozen=True, kw_only=True):
    """One question: its id (0-based line in --accuracy-data), what each filter
    extracted from the reply, the gold number, and whether each matched."""

    id: int
    extracted_strict: str
    extracted_flexible: str
    gold: str
    correct: bool  # strict-match (the gated figure)
    correct_flexible: bool
    finish_reason: str | None = None
