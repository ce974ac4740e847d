"""Thinking phases from records (metrics/phases.py): hand-built records with known
boundaries, each figure against a plain computation of its definition."""

from __future__ import annotations

import base64
from array import array

from loadgen.metrics.phases import THINK_END_ID, Anomaly, PhaseMethod, request_phases
from loadgen.metrics.summary import PointContext
from loadgen.metrics.summary import summarize as summarize_struct
from loadgen.records import OutputBasis, RequestOutput
from loadgen.results.point import flat_fields
from tests.support.fake_records import MS, make_record

OFFSETS = tuple(i * 10 * MS for i in range(1, 7))  # chunks at 10, 20, ... 60 ms
TOKENS = (1, 2, 2, 1, 2, 2)


def _output(ids: list[int]) -> RequestOutput:
    raw = array("I", ids)
    return RequestOutput(
        basis=OutputBasis.TOKEN_IDS,
        digest="",
        text="",
        token_ids=base64.b64encode(raw.tobytes()).decode(),
        finish_reason="stop",
        prompt_digest="",
    )


def test_parsed_fields_split_at_the_mark() -> None:
    # reasoning in chunks 0..2 (5 tokens), content from chunk 3 (5 tokens)
    record = make_record(offsets_ns=OFFSETS, tokens=TOKENS, phase_marks=(0, 3))
    phases = request_phases(record, thinking=True)
    assert phases.method is PhaseMethod.FIELDS
    assert (phases.reasoning_tokens, phases.answer_tokens) == (5, 5)
    assert phases.ttfr_ms == 10.0
    assert phases.ttfa_ms == 40.0
    assert phases.think_ms == 30.0
    assert phases.reasoning_tpot_ms == (30 - 10) / (5 - 1)
    assert phases.answer_tpot_ms == (60 - 40) / (5 - 1)
    assert not phases.reasoning_only and phases.anomalies == ()


def test_never_leaving_reasoning_has_no_ttfa() -> None:
    record = make_record(offsets_ns=OFFSETS, tokens=TOKENS, phase_marks=(0,))
    phases = request_phases(record, thinking=True)
    assert phases.reasoning_only
    assert phases.ttfa_ms is None and phases.think_ms is None
    assert (phases.reasoning_tokens, phases.answer_tokens) == (10, 0)


def test_reasoning_after_content_is_said_and_gets_no_think_time() -> None:
    record = make_record(offsets_ns=OFFSETS, tokens=TOKENS, phase_marks=(2, 4))
    phases = request_phases(record, thinking=True)
    assert phases.anomalies == (Anomaly.REASONING_AFTER_CONTENT,)
    assert phases.ttfa_ms == 10.0  # the first answer token did arrive first
    assert phases.think_ms is None
    assert (phases.reasoning_tokens, phases.answer_tokens) == (3, 7)


def test_end_token_in_the_ids_splits_inside_its_chunk() -> None:
    # 10 ids; the boundary is the 4th token, inside chunk 2 (tokens 3..4)
    ids = [5, 6, 7, THINK_END_ID, 8, 9, 10, 11, 12, 13]
    record = make_record(offsets_ns=OFFSETS, tokens=TOKENS, output=_output(ids))
    phases = request_phases(record, thinking=True)
    assert phases.method is PhaseMethod.END_TOKEN
    assert (phases.reasoning_tokens, phases.answer_tokens) == (4, 6)
    assert phases.ttfa_ms == 30.0  # chunk 2 carried the first answer token


def test_a_second_boundary_token_is_an_anomaly() -> None:
    ids = [5, THINK_END_ID, 7, 8, 8, 9, THINK_END_ID, 11, 12, 13]
    record = make_record(offsets_ns=OFFSETS, tokens=TOKENS, output=_output(ids))
    assert Anomaly.BOUNDARY_IN_ANSWER in request_phases(record, thinking=True).anomalies


def test_unseparated_thinking_output_has_no_ttfa_but_a_plain_answer_does() -> None:
    record = make_record(offsets_ns=OFFSETS, tokens=TOKENS)
    thinking = request_phases(record, thinking=True)
    assert thinking.method is PhaseMethod.NONE and thinking.ttfa_ms is None
    assert thinking.reasoning_tokens is None
    plain = request_phases(record, thinking=False)
    assert plain.ttfa_ms == 10.0 and plain.reasoning_tokens == 0


def test_point_fields_sum_the_requests() -> None:
    records = [
        make_record(0, offsets_ns=OFFSETS, tokens=TOKENS, phase_marks=(0, 3)),
        make_record(1, offsets_ns=OFFSETS, tokens=TOKENS, phase_marks=(0, 5)),
        make_record(2, offsets_ns=OFFSETS, tokens=TOKENS, phase_marks=(0,)),
        make_record(3, offsets_ns=OFFSETS, tokens=TOKENS),
    ]
    ctx = PointContext(conc=4, input_len=100, output_len=10, thinking=True, spec_tokens=1)
    fields = flat_fields(summarize_struct(records, ctx))
    assert fields["total_reasoning_tokens"] == 5 + 8 + 10
    assert fields["total_answer_tokens"] == 5 + 2 + 0
    assert fields["reasoning_share"] == 23 / 30
    assert fields["reasoning_only_requests"] == 1
    assert fields["phase_unseparated_requests"] == 1
    assert fields["phase_methods"] == {"fields": 3, "none": 1}
    assert fields["mean_ttfa_ms"] == (40 + 60) / 2
    assert fields["ttfas"] == [0.04, 0.06, None, None]
    assert fields["mean_ttft_ms"] == 10.0  # TTFT keeps its meaning: the first token of any kind
    # AL per phase: decode chunks (all but each request's first; the last of these
    # finish-"length" records is cut unless it carries K+1 = 2 tokens, which it does)
    reasoning_chunks = [*(2, 2), *(2, 2, 1, 2), *(2, 2, 1, 2, 2)]  # requests 0, 1, 2
    # the first answer chunk is a step like any other, though its phase's first
    answer_chunks = [*(1, 2, 2), *(2,)]
    assert fields["reasoning_acceptance_length"] == sum(reasoning_chunks) / len(reasoning_chunks)
    assert fields["answer_acceptance_length"] == sum(answer_chunks) / len(answer_chunks)
