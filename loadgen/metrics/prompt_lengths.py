"""Whether a point's prompts have the lengths asked for (docs/results.md, "Prompt lengths").

Computed from the records (each carries its input_len, the prompt's true token count, and
target_len, the length asked for), so a point measured by several worker processes or
shards, and `loadgen merge`, give the same figures as one process.
"""

from __future__ import annotations

from collections.abc import Iterable

from loadgen.records import RequestRecord
from loadgen.results.point import PromptLengths


def prompt_lengths(
    records: Iterable[RequestRecord], synthesis: str, note: str | None
) -> PromptLengths:
    """prompt_synthesis(_note) and, for synthetic prompts, how many missed their length."""
    missed = [
        abs(r.input_len - r.target_len)
        for r in records
        if r.target_len is not None and r.input_len != r.target_len
    ]
    synthetic = synthesis != "dataset"
    return PromptLengths(
        prompt_synthesis=synthesis,
        prompt_synthesis_note=note,
        input_len_approximate=bool(missed) if synthetic else None,
        input_len_mismatches=len(missed) if synthetic else None,
        input_len_max_abs_diff=max(missed, default=0) if synthetic else None,
    )
