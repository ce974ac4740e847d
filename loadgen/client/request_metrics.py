"""vLLM 0.32's per-request `metrics` object, as both event decoders read it.

vLLM sends it once per request, on the final usage chunk of a stream (`choices: []`, only
with `stream_options.include_usage`, which loadgen always sets): timings with
`--enable-per-request-metrics` (entrypoints/generate/base/serving.py
`build_per_request_timing_metrics`; absent values are left out), acceptance with
`--per-request-spec-decode-metrics summary|detailed` (v1/metrics/stats.py
`RequestSpecDecodeMetrics.to_dict`). Decoded once per request, never per chunk: only an
event without choices is looked at.

The server is not trusted here either: the shapes are msgspec Structs that refuse unknown
fields and wrong types, and the counts must agree with the histogram they summarize
(`acceptance_histogram[j]` = steps that accepted j drafts); anything else is malformed.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from loadgen.records import ServerTimings, SpecDecodeStats

Count = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
Millis = Annotated[float, msgspec.Meta(ge=0)]
MAX_SPEC_TOKENS = 64  # no drafter proposes more per step (vLLM's configs stop far below)


class BadRequestMetrics(ValueError):
    """The `metrics` object is not vLLM's shape, or its counts contradict each other."""


class _Struct(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    pass


class WireSpecDecode(_Struct):
    mean_acceptance_length: float
    draft_acceptance_rate: float
    acceptance_histogram: list[Count]
    num_spec_steps: Count
    num_accepted_draft_tokens: Count
    num_draft_tokens: Count
    num_spec_tokens: Annotated[int, msgspec.Meta(ge=1, le=MAX_SPEC_TOKENS)]
    per_step_accepted: list[Count] | None = None
    per_step_drafted: list[Count] | None = None


class WireMetrics(_Struct):
    time_to_first_token_ms: Millis | None = None
    generation_time_ms: Millis | None = None
    queue_time_ms: Millis | None = None
    mean_itl_ms: Millis | None = None
    tokens_per_second: Millis | None = None
    speculative_decoding: WireSpecDecode | None = None


RequestMetrics = tuple[SpecDecodeStats | None, ServerTimings | None]


class WireSpecTokensDetails(msgspec.Struct, gc=False):
    """SGLang's `sglext.spec_tokens_details` (entrypoints/openai/utils.py
    spec_tokens_details_from_meta_info), sent with `"return_spec_tokens_details": true`.
    Only the counts are read; SGLang adds fields freely (cap lengths, rates), so unknown
    ones are allowed. The histogram grows with the largest count seen (index = drafts a
    verify step accepted), so it may be shorter than K + 1."""

    spec_verify_ct: Count = 0
    spec_num_correct_drafts: Count = 0
    spec_num_proposed_drafts: Count = 0
    spec_correct_drafts_histogram: list[Count] = msgspec.field(default_factory=list)


def from_value(value: object) -> RequestMetrics:
    """A decoded JSON `metrics` value -> the record's two parts; BadRequestMetrics."""
    try:
        wire = msgspec.convert(value, WireMetrics)
    except msgspec.ValidationError as exc:
        raise BadRequestMetrics(f"metrics: {exc}") from None
    return from_wire(wire)


def from_wire(wire: WireMetrics) -> RequestMetrics:
    spec = None if wire.speculative_decoding is None else _spec(wire.speculative_decoding)
    timings = ServerTimings(
        queue_time_ms=wire.queue_time_ms,
        time_to_first_token_ms=wire.time_to_first_token_ms,
        generation_time_ms=wire.generation_time_ms,
        mean_itl_ms=wire.mean_itl_ms,
        tokens_per_second=wire.tokens_per_second,
    )
    return spec, None if timings == ServerTimings() else timings


def _spec(wire: WireSpecDecode) -> SpecDecodeStats:
    histogram, k = wire.acceptance_histogram, wire.num_spec_tokens
    where = "metrics.speculative_decoding"
    if len(histogram) != k + 1:
        raise BadRequestMetrics(
            f"{where}.acceptance_histogram has {len(histogram)} bins, "
            f"expected num_spec_tokens + 1 = {k + 1}"
        )
    steps, accepted = sum(histogram), sum(j * n for j, n in enumerate(histogram))
    if (steps, accepted) != (wire.num_spec_steps, wire.num_accepted_draft_tokens):
        raise BadRequestMetrics(
            f"{where}: num_spec_steps {wire.num_spec_steps} and num_accepted_draft_tokens "
            f"{wire.num_accepted_draft_tokens} disagree with its histogram ({steps} steps, "
            f"{accepted} accepted)"
        )
    if accepted > wire.num_draft_tokens or wire.num_draft_tokens > steps * k:
        raise BadRequestMetrics(
            f"{where}: {wire.num_draft_tokens} draft tokens cannot hold "
            f"{accepted} accepted in {steps} steps of K={k}"
        )
    steps_listed = [wire.per_step_accepted, wire.per_step_drafted]
    if any(v is not None for v in steps_listed) and not all(
        v is not None and len(v) == steps for v in steps_listed
    ):
        raise BadRequestMetrics(
            f"{where}: per_step_accepted and per_step_drafted must both list the {steps} steps"
        )
    return SpecDecodeStats(
        mean_acceptance_length=wire.mean_acceptance_length,
        draft_acceptance_rate=wire.draft_acceptance_rate,
        acceptance_histogram=tuple(histogram),
        num_spec_steps=steps,
        num_accepted_draft_tokens=accepted,
        num_draft_tokens=wire.num_draft_tokens,
        num_spec_tokens=k,
        per_step_accepted=None if wire.per_step_accepted is None else tuple(wire.per_step_accepted),
        per_step_drafted=None if wire.per_step_drafted is None else tuple(wire.per_step_drafted),
    )


def from_sglext(value: object) -> SpecDecodeStats | None:
    """SGLang's `sglext` object -> the record's acceptance, in vLLM's terms (AL = 1 +
    accepted / verify steps); None when it carries no verify step or no histogram (an
    SGLang without it: its steps cannot be told apart). BadRequestMetrics when malformed
    or when its counts contradict each other."""
    details = value.get("spec_tokens_details") if isinstance(value, dict) else None
    if details is None:
        return None
    try:
        wire = msgspec.convert(details, WireSpecTokensDetails)
    except msgspec.ValidationError as exc:
        raise BadRequestMetrics(f"sglext.spec_tokens_details: {exc}") from None
    histogram, steps = list(wire.spec_correct_drafts_histogram), wire.spec_verify_ct
    if not histogram or not steps:
        return None
    where = "sglext.spec_tokens_details"
    accepted = sum(j * n for j, n in enumerate(histogram))
    if (sum(histogram), accepted) != (steps, wire.spec_num_correct_drafts):
        raise BadRequestMetrics(
            f"{where}: spec_verify_ct {steps} and spec_num_correct_drafts "
            f"{wire.spec_num_correct_drafts} disagree with its histogram "
            f"({sum(histogram)} steps, {accepted} accepted)"
        )
    proposed = wire.spec_num_proposed_drafts
    k = max(len(histogram) - 1, -(-proposed // steps))  # K: what a step proposed at most
    if not 1 <= k <= MAX_SPEC_TOKENS or accepted > proposed:
        raise BadRequestMetrics(
            f"{where}: {proposed} proposed drafts cannot hold {accepted} accepted "
            f"in {steps} verify steps"
        )
    histogram += [0] * (k + 1 - len(histogram))
    return SpecDecodeStats(
        mean_acceptance_length=1.0 + accepted / steps,
        draft_acceptance_rate=accepted / proposed if proposed else 0.0,
        acceptance_histogram=tuple(histogram),
        num_spec_steps=steps,
        num_accepted_draft_tokens=accepted,
        num_draft_tokens=proposed,
        num_spec_tokens=k,
    )
