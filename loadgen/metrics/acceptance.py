"""Speculative-decoding (MTP) acceptance, measured two independent ways (docs/design.md).

From the stream: with stream interval 1 each decode step emits one chunk per request
carrying 1 + accepted tokens, so the chunk token counts are the acceptance samples.
From the server: deltas of vLLM's `vllm:spec_decode_*` counters over the point.
Both are reported side by side with their difference; disagreement points at chunk
coalescing (stream interval > 1, a proxy) or at other traffic on the server.

The stream figures are only published when each decode chunk can be one engine step
(stream_validity); else they are None with the reason. One step emits at most K+1
tokens, so a single larger chunk proves steps were merged, and merges whose sum stays
within K+1 are invisible: the oversized count is a lower bound on the merges, so even
one oversized chunk voids the stream figures rather than a share threshold.
acceptance_length is the best valid source's AL (best_acceptance_length).

The stream's AL and the server's per-request AL describe the same requests' steps; when
they disagree beyond AL_DISAGREE one of them is not these requests' (al_disagreement):
the point's checks warn (metrics/trust.py) and the golden-AL check cannot pass on either
(metrics/golden.py), both from this one rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.metrics.arrays import IntArray, PointArrays, is_completed
from loadgen.metrics.server import (
    SPEC_ACCEPTED,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    ServerSnapshot,
    counter_delta,
    whole_draft_length,
)
from loadgen.records import RequestRecord

STREAM_KEYS = (
    "stream_acceptance_length",
    "stream_acceptance_rate",
    "stream_acceptance_per_position",
    "stream_acceptance_decode_chunks",
    "stream_acceptance_oversized_chunks",
    "stream_acceptance_invalid_reason",
)
BEST_KEYS = ("acceptance_length", "acceptance_length_source")
# They differ by the last step's cut drafts and chunks that merged steps, a few hundredths.
AL_DISAGREE = 0.05  # of the per-request AL
SERVER_KEYS = (
    "server_acceptance_length",
    "server_acceptance_rate",
    "server_acceptance_per_position",
    "server_spec_tokens",
    "server_spec_decode_drafts",
    "server_spec_decode_draft_tokens",
    "server_spec_decode_accepted_tokens",
    "server_acceptance_invalid_reason",
)


def accepted_at_position(decode_tokens: IntArray, positions: int) -> list[int]:
    """Per draft position i < `positions`: decode chunks with more than i tokens beyond
    the first (the chunk's own sampled token), i.e. a draft accepted at position i."""
    beyond_first = np.clip(decode_tokens - 1, 0, positions)
    counts = np.bincount(beyond_first, minlength=positions + 1)
    at_least = np.cumsum(counts[::-1])[::-1]  # at_least[k]: chunks with >= k beyond first
    return [int(at_least[i + 1]) for i in range(positions)]


def stream_acceptance(records: Sequence[RequestRecord], spec_tokens: int | None) -> dict[str, Any]:
    """Acceptance from chunk token counts of the completed records (docs/design.md definitions)."""
    completed = [r for r in records if is_completed(r)]
    return stream_acceptance_from_arrays(PointArrays.build(completed), spec_tokens)


def stream_validity(
    decode_chunks: int, oversized_chunks: int, spec_tokens: int, stream_interval: int | None = None
) -> str | None:
    """Why the stream's chunks cannot be read as one engine step each; None when they can.

    Invalid when any decode chunk carries more than K+1 tokens (no step emits more), or
    when the server is known to send every `stream_interval` > 1 steps (its chunks then
    merge steps even when they stay within K+1). None for the interval means unknown:
    neither vLLM's /metrics nor /version reports it.
    """
    if oversized_chunks > 0:
        return (
            f"{oversized_chunks} of {decode_chunks} decode chunks carried more than "
            f"K+1={spec_tokens + 1} tokens: the server merged engine steps "
            "(stream interval > 1 or a lagging frontend)"
        )
    if stream_interval is not None and stream_interval > 1:
        return f"the server streams every {stream_interval} engine steps: each chunk merges steps"
    return None


def stream_acceptance_from_arrays(
    arrays: PointArrays, spec_tokens: int | None, stream_interval: int | None = None
) -> dict[str, Any]:
    """Keys STREAM_KEYS; all None without speculative decoding (spec_tokens None or 0).

    - stream_acceptance_length: mean tokens per decode chunk (AL).
    - stream_acceptance_rate: (AL - 1) / K.
    - stream_acceptance_per_position[i], i < K: share of decode chunks with more than i
      tokens beyond the first.
    - stream_acceptance_decode_chunks: how many chunks were averaged.
    - stream_acceptance_oversized_chunks: decode chunks with more than K+1 tokens, which
      one step cannot emit: the stream coalesced steps.
    - stream_acceptance_invalid_reason: why the three figures above are None although
      chunks were counted (stream_validity); None when they are valid or not measured.
    """
    result: dict[str, Any] = dict.fromkeys(STREAM_KEYS)
    if not spec_tokens:
        return result
    decode = arrays.chunk_tokens[arrays.decode_chunk_mask(spec_tokens)]
    result["stream_acceptance_decode_chunks"] = int(decode.size)
    if decode.size == 0:
        return result
    oversized = int(np.count_nonzero(decode > spec_tokens + 1))
    result["stream_acceptance_oversized_chunks"] = oversized
    reason = stream_validity(int(decode.size), oversized, spec_tokens, stream_interval)
    if reason is not None:
        result["stream_acceptance_invalid_reason"] = reason
        return result
    length = float(decode.mean())
    result["stream_acceptance_length"] = length
    result["stream_acceptance_rate"] = (length - 1.0) / spec_tokens
    result["stream_acceptance_per_position"] = [
        count / decode.size for count in accepted_at_position(decode, spec_tokens)
    ]
    return result


def itl_merged_steps(stream: Mapping[str, Any]) -> bool | None:
    """Whether per-chunk ITL pools gaps of chunks that merged engine steps (each such gap
    spans several steps); None when the stream could not be checked (no K, no chunks)."""
    if stream.get("stream_acceptance_invalid_reason") is not None:
        return True
    return False if stream.get("stream_acceptance_decode_chunks") else None


def server_acceptance(
    before: ServerSnapshot, after: ServerSnapshot, spec_tokens: int | None = None
) -> dict[str, Any]:
    """Keys SERVER_KEYS from counter deltas; all None when the server drafted nothing.

    AL = 1 + accepted/drafts; rate = accepted/draft_tokens; per-position i =
    accepted_per_pos[i]/drafts; server_spec_tokens (K) = draft_tokens/drafts.
    Counters no server can have counted (impossible_counters; `spec_tokens` is the K
    known apart from these counters, if any) void every figure, with the reason in
    server_acceptance_invalid_reason; a draft-tokens-per-draft ratio that is not a whole
    number voids only server_spec_tokens (K is not that ratio), with its reason there.
    """
    result: dict[str, Any] = dict.fromkeys(SERVER_KEYS)
    drafts = counter_delta(before, after, SPEC_DRAFTS)
    draft_tokens = counter_delta(before, after, SPEC_DRAFT_TOKENS)
    accepted = counter_delta(before, after, SPEC_ACCEPTED)
    if not drafts or draft_tokens is None or accepted is None:
        return result
    start = before.accepted_per_position
    per_position = {
        position: value - start.get(position, 0.0)
        for position, value in after.accepted_per_position.items()
    }
    impossible = impossible_counters(drafts, draft_tokens, accepted, per_position, spec_tokens)
    if impossible:
        result["server_acceptance_invalid_reason"] = (
            f"the server's spec-decode counters over the point cannot be true "
            f"({'; '.join(impossible)}): no server acceptance figure is published"
        )
        return result
    k = whole_draft_length(drafts, draft_tokens)
    result.update(
        server_acceptance_length=1.0 + accepted / drafts,
        server_acceptance_rate=accepted / draft_tokens if draft_tokens else None,
        server_acceptance_per_position=[per_position[p] / drafts for p in sorted(per_position)]
        if per_position
        else None,
        server_spec_tokens=k,
        server_spec_decode_drafts=int(drafts),
        server_spec_decode_draft_tokens=int(draft_tokens),
        server_spec_decode_accepted_tokens=int(accepted),
    )
    if k is None:
        result["server_acceptance_invalid_reason"] = (
            f"server_spec_tokens is null: {draft_tokens:.0f} draft tokens over "
            f"{drafts:.0f} drafts is {draft_tokens / drafts:.3f} per draft, not a whole "
            "K (the server trimmed some drafts, or its counters are not one server's)"
        )
    return result


def impossible_counters(
    drafts: float,
    draft_tokens: float,
    accepted: float,
    per_position: Mapping[int, float],
    spec_tokens: int | None,
) -> list[str]:
    """What in these counter deltas no server can have counted (empty: nothing):
    counts that are not whole numbers, more tokens accepted than drafted, an AL above
    K+1 or more draft tokens per draft than K (when K is known apart from these
    counters), and a draft position accepted more often than there were drafts, below
    zero, or at or past K."""
    found = []
    counts = {"drafts": drafts, "draft tokens": draft_tokens, "accepted tokens": accepted}
    fractional = [
        f"{name} {value:g}" for name, value in counts.items() if not float(value).is_integer()
    ]
    if fractional:
        found.append(f"{', '.join(fractional)}: not whole numbers")
    if accepted > draft_tokens:
        found.append(f"accepted tokens {accepted:.0f} above draft tokens {draft_tokens:.0f}")
    if spec_tokens:
        length = 1.0 + accepted / drafts
        if length > spec_tokens + 1:
            found.append(f"acceptance length {length:.2f} above K+1 = {spec_tokens + 1}")
        if draft_tokens > spec_tokens * drafts:
            found.append(
                f"{draft_tokens / drafts:.2f} draft tokens per draft, above K = {spec_tokens}"
            )
    for position, value in sorted(per_position.items()):
        if value < 0 or value > drafts or not float(value).is_integer():
            found.append(f"{value:g} accepted at draft position {position} of {drafts:.0f} drafts")
        elif spec_tokens and position >= spec_tokens and value > 0:
            found.append(
                f"{value:.0f} accepted at draft position {position}, past K = {spec_tokens}"
            )
    return found


def acceptance_difference(stream: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """stream - server for length, rate and each common position; None when either is unknown."""

    def minus(key: str) -> float | None:
        a, b = stream.get(f"stream_{key}"), server.get(f"server_{key}")
        return None if a is None or b is None else float(a) - float(b)

    a_pos = stream.get("stream_acceptance_per_position")
    b_pos = server.get("server_acceptance_per_position")
    per_position = (
        None
        if a_pos is None or b_pos is None
        else [x - y for x, y in zip(a_pos, b_pos, strict=False)]
    )
    return {
        "acceptance_length_diff": minus("acceptance_length"),
        "acceptance_rate_diff": minus("acceptance_rate"),
        "acceptance_per_position_diff": per_position,
    }


def best_acceptance_length(
    stream: Mapping[str, Any],
    server: Mapping[str, Any],
    per_request: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Keys BEST_KEYS: the AL to publish and where it came from, in order of preference.

    The stream first (it is per request and exact when valid; stream_acceptance_length
    is None when invalid), then the server's per-request stats (vLLM 0.32's
    metrics.speculative_decoding of this point's requests only: metrics/request_stats.py),
    then its spec-decode counters (whole server over the point, so other traffic counts
    too); None when none measured it. The one rule for every output: the table, compare,
    the report and sweep.csv read these keys.
    """
    candidates = (
        ("stream", stream.get("stream_acceptance_length")),
        ("server_per_request", (per_request or {}).get("server_request_acceptance_length")),
        ("server_counters", server.get("server_acceptance_length")),
    )
    for source, value in candidates:
        if value is not None:
            return {"acceptance_length": float(value), "acceptance_length_source": source}
    return dict.fromkeys(BEST_KEYS)


def al_disagreement(stream: float | None, per_request: float | None) -> str | None:
    """Why the stream's AL and the server's per-request AL of the same requests cannot
    both be theirs (they differ by more than AL_DISAGREE of the per-request AL); None
    when they agree or either was not measured."""
    if stream is None or per_request is None or per_request <= 0:
        return None
    if abs(stream - per_request) <= AL_DISAGREE * per_request:
        return None
    return (
        f"the stream's acceptance length {stream:.2f} and the server's per-request "
        f"{per_request:.2f} disagree by more than {AL_DISAGREE:.0%}"
    )
