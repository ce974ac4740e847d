"""Reasoning and answer apart: each request's phases, derived after the point from its record.

Where the boundary comes from (docs/results.md, "Thinking phases"), best first:
- FIELDS: the server parsed the reasoning (vLLM `--reasoning-parser`: chat deltas carry
  `reasoning_content` / `reasoning`, then `content`). The record keeps the chunk indices
  where the field changed (`phase_marks`, set during the existing parse).
- END_TOKEN: no field changed, but the kept token ids (`--record-outputs` with the ids the
  server streamed) hold the end-of-thinking token (DeepSeek-V4 `</think>`, id 128822):
  tokens up to and including it are reasoning, exactly, and the chunk that holds it is
  placed by the chunks' token counts.
- NONE: neither. A thinking request's phases are then unknown (TTFA null, counted in
  `phase_unseparated_requests`); a non-thinking request's whole output is its answer.

A request that never leaves the reasoning phase (cut by max_tokens or the context) has
no TTFA and is counted in `reasoning_only_requests`. Anomalies are counted by kind and
never turned into a time: reasoning after content, the boundary token inside the answer,
token-bearing deltas with no text in the other field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from loadgen.metrics.arrays import NS_PER_MS, BoolArray, FloatArray, IntArray, PointArrays
from loadgen.records import RequestRecord

THINK_END_ID = 128822  # DeepSeek-V4's `</think>` (its tokenizer's added token)

# A chunk's phase: all reasoning, all answer, or both (the boundary fell inside it)
REASONING, ANSWER, MIXED = 0, 1, 2


class PhaseMethod(StrEnum):
    FIELDS = "fields"  # the server's parsed reasoning field
    END_TOKEN = "end_token"  # the end-of-thinking id in the kept token ids
    END_TOKEN_TEXT = "end_token_text"  # its text in the kept content, by chunk
    NONE = "none"  # neither: not told apart


class Anomaly(StrEnum):
    REASONING_AFTER_CONTENT = "reasoning_after_content"
    BOUNDARY_IN_ANSWER = "boundary_in_answer"
    TEXTLESS_DELTAS = "textless_deltas"


@dataclass(frozen=True, slots=True)
class RequestPhases:
    """One completed request's phases. Times in ms from its send; None where a figure
    does not exist for it (no reasoning, no answer, phases unknown)."""

    method: PhaseMethod
    chunk_phase: tuple[int, ...]  # REASONING / ANSWER / MIXED per chunk; () when unknown
    reasoning_tokens: int | None
    answer_tokens: int | None
    ttfr_ms: float | None  # first reasoning token
    ttfa_ms: float | None  # first answer token
    think_ms: float | None  # first reasoning token -> first answer token
    reasoning_tpot_ms: float | None
    answer_tpot_ms: float | None
    reasoning_only: bool  # never left the reasoning phase
    anomalies: tuple[Anomaly, ...]

    @property
    def separated(self) -> bool:
        return bool(self.chunk_phase)


def _phase_tpot(
    ns: Sequence[int], tokens: int, first: int | None, last: int | None
) -> float | None:
    """TPOT restricted to one phase: (its last chunk - its first chunk) / (its tokens - 1),
    as the whole request's TPOT is (E2EL - TTFT) / (output - 1)."""
    if first is None or last is None or tokens <= 1:
        return None
    return (ns[last] - ns[first]) / NS_PER_MS / (tokens - 1)


def _from_fields(record: RequestRecord) -> tuple[list[int], list[Anomaly]]:
    marks, n = record.phase_marks, len(record.chunk_ns)
    phases: list[int] = []
    current, at = ANSWER, 0
    for mark in (*marks, n):
        phases += [current] * (min(mark, n) - at)
        at, current = min(mark, n), ANSWER if current == REASONING else REASONING
    anomalies = []
    if marks[0] != 0 or len(marks) > 2:
        anomalies.append(Anomaly.REASONING_AFTER_CONTENT)
    return phases, anomalies


def _boundary_chunk(record: RequestRecord, ids: Sequence[int]) -> tuple[int, int, int] | None:
    """(chunk index, reasoning tokens in it, answer tokens in it) of the end-of-thinking
    id's chunk, by the chunks' counts; None when the counts do not cover the ids."""
    if sum(record.chunk_tokens) != len(ids):
        return None
    index, start = _chunk_of(ids.index(THINK_END_ID), record.chunk_tokens)
    reasoning = ids.index(THINK_END_ID) - start + 1  # the boundary token closes the reasoning
    return index, reasoning, record.chunk_tokens[index] - reasoning


def request_phases(record: RequestRecord, thinking: bool) -> RequestPhases:
    """The phases of one completed record (at least one chunk)."""
    ns, counts = record.chunk_ns, record.chunk_tokens
    anomalies: list[Anomaly] = []
    ids = record.output.ids() if record.output is not None else None
    split: tuple[int, int] | None = None  # (reasoning, answer) tokens of a MIXED chunk
    if record.phase_marks:
        method = PhaseMethod.FIELDS
        phases, anomalies = _from_fields(record)
        if ids is not None and sum(counts) == len(ids):
            split = _refine(ids, counts, phases)
            answer_ids = _answer_ids(ids, counts, phases, split)
            if THINK_END_ID in answer_ids:
                anomalies.append(Anomaly.BOUNDARY_IN_ANSWER)
    elif ids is not None and THINK_END_ID in ids and (found := _boundary_chunk(record, ids)):
        method = PhaseMethod.END_TOKEN
        index, in_reasoning, in_answer = found
        phases = [REASONING] * index + [ANSWER] * (len(ns) - index)
        if in_answer:
            phases[index], split = MIXED, (in_reasoning, in_answer)
        else:
            phases[index] = REASONING
        if THINK_END_ID in ids[ids.index(THINK_END_ID) + 1 :]:
            anomalies.append(Anomaly.BOUNDARY_IN_ANSWER)
    elif (text_end := _text_boundary(record)) is not None:
        method = PhaseMethod.END_TOKEN_TEXT
        index, answer_after = text_end
        # the chunk with answer text after `</think>` is the answer's first: its tokens
        # cannot be split without ids, so all of them count as answer (docs: limits)
        first_answer = index if answer_after else index + 1
        phases = [REASONING] * first_answer + [ANSWER] * (len(ns) - first_answer)
    else:
        method = PhaseMethod.NONE
        phases = [] if thinking else [ANSWER] * len(ns)
    if record.textless_phase_chunks:
        anomalies.append(Anomaly.TEXTLESS_DELTAS)
    if not phases:
        return RequestPhases(
            method, (), None, None, None, None, None, None, None, False, tuple(anomalies)
        )
    return _figures(record, method, phases, split, anomalies)


def _text_boundary(record: RequestRecord) -> tuple[int, bool] | None:
    """(chunk index, answer text after it there) of `</think>` in the kept content text,
    when the kept output places it (--record-outputs) within the record's chunks."""
    output = record.output
    if output is None or output.think_end_chunk is None:
        return None
    if not 0 <= output.think_end_chunk < len(record.chunk_ns):
        return None
    return output.think_end_chunk, output.answer_in_think_end_chunk


def _chunk_of(position: int, counts: Sequence[int]) -> tuple[int, int]:
    """(the chunk holding token `position`, its first token's index); the counts cover it."""
    start = 0
    for index, count in enumerate(counts):
        if position < start + count:
            return index, start
        start += count
    raise ValueError(f"token {position} is past the chunks' {start} tokens")


def _refine(ids: Sequence[int], counts: Sequence[int], phases: list[int]) -> tuple[int, int] | None:
    """With the kept ids, the `fields` method's boundary made exact: the chunk holding the
    first `</think>` -- the last reasoning chunk or the first answer chunk, or the fields
    and the ids disagree and the fields stand -- is MIXED (in place) when answer tokens
    follow it there: a step across the boundary, or answer tokens without text yet.
    Returns (its reasoning tokens, its answer tokens), else None."""
    if THINK_END_ID not in ids:
        return None
    position = ids.index(THINK_END_ID)
    first_answer = phases.index(ANSWER) if ANSWER in phases else len(phases)
    index, start = _chunk_of(position, counts)
    if index not in (first_answer - 1, first_answer):
        return None
    reasoning = position - start + 1
    if reasoning >= counts[index]:
        return None
    phases[index] = MIXED
    return reasoning, counts[index] - reasoning


def _answer_ids(
    ids: Sequence[int],
    counts: Sequence[int],
    phases: Sequence[int],
    split: tuple[int, int] | None = None,
) -> list[int]:
    """The ids of the answer: its chunks', and a MIXED chunk's after its split."""
    out: list[int] = []
    at = 0
    for count, phase in zip(counts, phases, strict=True):
        if phase == ANSWER:
            out.extend(ids[at : at + count])
        elif phase == MIXED and split is not None:
            out.extend(ids[at + split[0] : at + count])
        at += count
    return out


def _figures(
    record: RequestRecord,
    method: PhaseMethod,
    phases: list[int],
    split: tuple[int, int] | None,
    anomalies: list[Anomaly],
) -> RequestPhases:
    ns, counts, start = record.chunk_ns, record.chunk_tokens, record.start_ns
    reasoning = sum(c for c, p in zip(counts, phases, strict=True) if p == REASONING)
    answer = sum(c for c, p in zip(counts, phases, strict=True) if p == ANSWER)
    if split is not None:
        reasoning, answer = reasoning + split[0], answer + split[1]
    has_reasoning = [i for i, p in enumerate(phases) if p != ANSWER]
    has_answer = [i for i, p in enumerate(phases) if p != REASONING]
    first_r = has_reasoning[0] if has_reasoning else None
    last_r = has_reasoning[-1] if has_reasoning else None
    first_a = has_answer[0] if has_answer else None
    ttfr = None if first_r is None else (ns[first_r] - start) / NS_PER_MS
    ttfa = None if first_a is None else (ns[first_a] - start) / NS_PER_MS
    in_order = Anomaly.REASONING_AFTER_CONTENT not in anomalies
    think = ttfa - ttfr if ttfa is not None and ttfr is not None and in_order else None
    return RequestPhases(
        method=method,
        chunk_phase=tuple(phases),
        reasoning_tokens=reasoning,
        answer_tokens=answer,
        ttfr_ms=ttfr,
        ttfa_ms=ttfa,
        think_ms=think,
        reasoning_tpot_ms=_phase_tpot(ns, reasoning, first_r, last_r),
        answer_tpot_ms=_phase_tpot(ns, answer, first_a, has_answer[-1] if has_answer else None),
        reasoning_only=first_a is None and first_r is not None,
        anomalies=tuple(anomalies),
    )


PHASE_DISTRIBUTIONS = ("ttfr", "ttfa", "think", "reasoning_tpot", "answer_tpot")


def _floats(values: Iterable[float | None]) -> FloatArray:
    return np.array([v for v in values if v is not None], dtype=np.float64)


def phase_samples(phases: Sequence[RequestPhases]) -> dict[str, FloatArray]:
    """Per-request samples (ms) of each phase distribution, over the requests that have one."""
    return {
        "ttfr": _floats(p.ttfr_ms for p in phases),
        "ttfa": _floats(p.ttfa_ms for p in phases),
        "think": _floats(p.think_ms for p in phases),
        "reasoning_tpot": _floats(p.reasoning_tpot_ms for p in phases),
        "answer_tpot": _floats(p.answer_tpot_ms for p in phases),
    }


def chunk_phases(arrays: PointArrays, phases: Sequence[RequestPhases]) -> IntArray:
    """Per chunk of `arrays` (same records, same order): its phase, -1 where unknown."""
    out = np.full(arrays.chunk_ns.size, -1, dtype=np.int64)
    for first, last, request in zip(arrays.first, arrays.last, phases, strict=True):
        if request.separated:
            out[first : last + 1] = request.chunk_phase
    return out


def _phase_itl(arrays: PointArrays, chunk: IntArray, phase: int) -> FloatArray:
    """Chunk gaps within one phase: both chunks wholly in it, the same request."""
    within = arrays.gap_is_within_record()
    same = (chunk[1:] == phase) & (chunk[:-1] == phase)
    gaps: FloatArray = np.diff(arrays.chunk_ns)[within & same] / NS_PER_MS
    return gaps


def _phase_al(decode: BoolArray, chunk: IntArray, tokens: IntArray, phase: int) -> float | None:
    picked = tokens[decode & (chunk == phase)]
    return float(picked.mean()) if picked.size else None


def phase_fields(
    ordered: Sequence[RequestRecord],
    completed: Sequence[RequestRecord],
    arrays: PointArrays,
    decode: BoolArray | None,
    thinking: bool,
) -> tuple[dict[str, Any], dict[str, FloatArray]]:
    """The point's phase fields (no distributions) and the per-request samples for them.
    `completed` are the records `arrays` was built from, in its order; `ordered` all of
    the point's, for the per-request list. `decode`: the chunks stream acceptance counts
    (None: no valid stream AL, so none per phase either)."""
    phases = [request_phases(r, thinking) for r in completed]
    chunk = chunk_phases(arrays, phases)
    separated = [p for p in phases if p.separated]
    reasoning = sum(p.reasoning_tokens or 0 for p in separated)
    answer = sum(p.answer_tokens or 0 for p in separated)
    methods = Counter(p.method.value for p in phases)
    anomalies = Counter(a.value for p in phases for a in p.anomalies)
    r_itl, a_itl = _phase_itl(arrays, chunk, REASONING), _phase_itl(arrays, chunk, ANSWER)
    fields: dict[str, Any] = {
        "phase_methods": dict(sorted(methods.items())) if phases else None,
        "phase_separated_requests": len(separated),
        "phase_unseparated_requests": len(phases) - len(separated),
        "reasoning_only_requests": sum(p.reasoning_only for p in phases),
        "phase_anomalies": dict(sorted(anomalies.items())) if anomalies else None,
        "total_reasoning_tokens": reasoning if separated else None,
        "total_answer_tokens": answer if separated else None,
        "reasoning_share": reasoning / (reasoning + answer) if reasoning + answer else None,
        "mean_reasoning_itl_ms": float(r_itl.mean()) if r_itl.size else None,
        "mean_answer_itl_ms": float(a_itl.mean()) if a_itl.size else None,
        "reasoning_acceptance_length": None
        if decode is None
        else _phase_al(decode, chunk, arrays.chunk_tokens, REASONING),
        "answer_acceptance_length": None
        if decode is None
        else _phase_al(decode, chunk, arrays.chunk_tokens, ANSWER),
    }
    ttfa = {r.request_id: p.ttfa_ms for r, p in zip(completed, phases, strict=True)}
    fields["ttfas"] = [
        None if (ms := ttfa.get(r.request_id)) is None else ms / 1e3 for r in ordered
    ]
    return fields, phase_samples(phases)
