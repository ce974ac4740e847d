"""Whether a point is a valid submission under a scenario's rules (pure: records and the
point's figures in, the verdict and its reasons out).

`loadgen profile --scenario inferencex-agentx-mvp` (config/aiperf_profile.py) checks every
point against the rules InferenceX's AIPerf scenario applies; each broken rule is one
reason, and a point with none is valid:
- `unsafe_override`: the run was allowed to break a locked rule (shorter than 900 s);
- `context_overflow`: more than 1% of the requests did not fit the server's context: a
  request whose prompt plus max_tokens exceeds `--max-context-length`, or one the server
  refused naming the context length;
- `cancelled`: the point was stopped, or a request of it was cancelled;
- `error_rate`: the failed share is above `--failed-request-threshold`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.config.spec import RunSpec
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.point import Submission

MAX_OVERFLOW_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class SubmissionRules:
    scenario: str
    unsafe_override: bool
    max_error_rate: float
    max_context_length: int | None

    @classmethod
    def of(cls, spec: RunSpec) -> SubmissionRules | None:
        """A scenario run's rules (`loadgen profile --scenario`); None for any other run."""
        if spec.scoring.scenario is None:
            return None
        return cls(
            spec.scoring.scenario,
            spec.scoring.unsafe_override,
            spec.deadlines.max_error_rate,
            spec.workload.max_context_length,
        )


def overflows(record: RequestRecord, max_context_length: int | None) -> bool:
    if max_context_length is not None and record.input_len + record.max_tokens > max_context_length:
        return True
    return record.error is not None and "context" in record.error_detail.lower()


def submission(
    records: Sequence[RequestRecord],
    rules: SubmissionRules,
    *,
    complete: bool,
    error_rate: float | None,
) -> Submission:
    overflow = sum(overflows(r, rules.max_context_length) for r in records)
    reasons = []
    if rules.unsafe_override:
        reasons.append("unsafe_override")
    if records and overflow / len(records) > MAX_OVERFLOW_SHARE:
        reasons.append("context_overflow")
    if not complete or any(r.error is ErrorKind.CANCELLED for r in records):
        reasons.append("cancelled")
    if error_rate is not None and error_rate > rules.max_error_rate:
        reasons.append("error_rate")
    return Submission(
        submission_valid=not reasons, submission_reasons=reasons, context_overflow_requests=overflow
    )
