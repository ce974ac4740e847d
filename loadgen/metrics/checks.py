"""Health checks of a point's records: errors by kind and token-count consistency.

A wrong tokenizer, a server ignoring `ignore_eos`, or a transport that miscounts chunk
tokens all skew every figure silently; these counts make them visible in the result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any, TypeVar

import numpy as np

from loadgen.metrics.arrays import IntArray, PointArrays, is_completed
from loadgen.records import ArrivalStamps, ErrorKind, RequestRecord, StrayBytes, TokenSource

NO_TOKENS = "no_tokens"  # ended without error but carried no token-bearing chunk
ERROR_TEXT_LIMIT = 200  # keep the per-request `errors` list bounded
SourceT = TypeVar("SourceT", bound=StrEnum)


def failure_kind(record: RequestRecord) -> str | None:
    if record.error is not None:
        return record.error.value
    return None if is_completed(record) else NO_TOKENS


def error_fields(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """errors_by_kind (every failure kind, zeros included, for a stable schema), error_rate
    and `cancelled`. A request the run stopped (Ctrl-C, DELETE) says nothing of the
    server: it is no failure, in neither the rate nor its denominator (the --max-error-rate
    gate and InferenceX's failed-requests gate read these)."""
    counts = Counter(kind for r in records if (kind := failure_kind(r)) is not None)
    by_kind = {
        kind.value: counts.get(kind.value, 0)
        for kind in ErrorKind
        if kind is not ErrorKind.CANCELLED
    }
    by_kind[NO_TOKENS] = counts.get(NO_TOKENS, 0)
    failed = sum(by_kind.values())
    cancelled = counts.get(ErrorKind.CANCELLED.value, 0)
    ran = len(records) - cancelled
    return {
        "errors_by_kind": by_kind,
        "error_rate": failed / ran if ran else None,
        "cancelled": cancelled,
    }


def error_text(record: RequestRecord) -> str:
    """vLLM's per-request `errors` entry: empty for a completed request."""
    kind = failure_kind(record)
    if kind is None:
        return ""
    text = f"{kind}: {record.error_detail}" if record.error_detail else kind
    return text[:ERROR_TEXT_LIMIT]


def _mismatch(actual: IntArray, expected: IntArray) -> tuple[int, int]:
    diff = np.abs(actual - expected)
    return int(np.count_nonzero(diff)), int(diff.max()) if diff.size else 0


def token_count_checks(arrays: PointArrays) -> dict[str, int]:
    """Over completed requests:
    - prompt_tokens_*: server usage.prompt_tokens vs loadgen's intended input length;
    - completion_tokens_vs_max_tokens_*: output tokens vs max_tokens (with ignore_eos a
      request should produce exactly max_tokens);
    - chunk_tokens_vs_usage_*: summed chunk token counts vs usage.completion_tokens.
    *_unreported counts requests whose server usage lacked the figure (not compared).
    """
    prompt_known = arrays.prompt_tokens >= 0
    usage_known = arrays.completion_tokens >= 0
    prompt = _mismatch(arrays.prompt_tokens[prompt_known], arrays.input_len[prompt_known])
    limit = _mismatch(arrays.output_tokens, arrays.max_tokens)
    chunks = _mismatch(arrays.chunk_token_sum[usage_known], arrays.completion_tokens[usage_known])
    return {
        "prompt_tokens_mismatches": prompt[0],
        "prompt_tokens_max_abs_diff": prompt[1],
        "prompt_tokens_unreported": int(np.count_nonzero(~prompt_known)),
        "completion_tokens_vs_max_tokens_mismatches": limit[0],
        "completion_tokens_vs_max_tokens_max_abs_diff": limit[1],
        "chunk_tokens_vs_usage_mismatches": chunks[0],
        "chunk_tokens_vs_usage_max_abs_diff": chunks[1],
        "completion_tokens_unreported": int(np.count_nonzero(~usage_known)),
    }


def _sources(
    values: Iterable[SourceT],
    kinds: type[SourceT],
) -> tuple[str | None, dict[str, int]]:
    """The kinds seen, comma-joined in the enum's order (best first), and requests per kind."""
    counts = Counter(values)
    used = [kind for kind in kinds if counts.get(kind)]
    return (
        ",".join(kind.value for kind in used) or None,
        {kind.value: counts[kind] for kind in used},
    )


def token_source_fields(completed: Sequence[RequestRecord]) -> dict[str, Any]:
    """Where the chunk token counts came from; `approximate` when any were re-tokenized text."""
    joined, counts = _sources((r.token_source for r in completed), TokenSource)
    return {
        "token_count_source": joined,
        "token_count_sources": counts,
        "approximate": TokenSource.TEXT.value in counts,
    }


def arrival_stamp_fields(completed: Sequence[RequestRecord]) -> dict[str, Any]:
    """Whose clock the chunk stamps are: the kernel's receive stamps, or read by the client
    (late by however long its loop took to come round to the socket)."""
    joined, counts = _sources((r.arrival_stamps for r in completed), ArrivalStamps)
    return {"arrival_stamps": joined, "arrival_stamp_sources": counts}


def stray_bytes_fields(records: Sequence[RequestRecord]) -> dict[str, int]:
    """Requests whose connection carried bytes no request asked for: after their complete
    response (the connection was closed; the request stands), or stamped before their
    write (the request is malformed). Nonzero: the server sends answers unasked."""
    counts = Counter(r.stray_bytes for r in records if r.stray_bytes is not None)
    return {f"stray_bytes_{kind.value}": counts.get(kind, 0) for kind in StrayBytes}
