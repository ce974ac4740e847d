"""Hand-built RequestRecords with known times, for the pure metric tests (no server)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from loadgen.records import ErrorKind, RequestRecord, TokenSource

MS = 1_000_000  # ns


def make_record(
    request_id: int = 0,
    *,
    start_ns: int = 1_000 * MS,
    offsets_ns: Sequence[int] = (10 * MS, 20 * MS),
    tokens: Sequence[int] = (1, 1),
    max_tokens: int | None = None,
    input_len: int = 100,
    **overrides: Any,
) -> RequestRecord:
    """A completed request: chunk i arrives at start + offsets_ns[i] carrying tokens[i].

    Defaults: usage matches (prompt_tokens = input_len, completion_tokens = sum(tokens)),
    max_tokens = sum(tokens), finish "length", sent 1 ms after it was due, connection
    reused, stream ends 0.1 ms after the last chunk.
    """
    chunk_ns = tuple(start_ns + offset for offset in offsets_ns)
    fields: dict[str, Any] = {
        "request_id": request_id,
        "conc": 4,
        "input_len": input_len,
        "max_tokens": sum(tokens) if max_tokens is None else max_tokens,
        "scheduled_ns": start_ns - MS,
        "start_ns": start_ns,
        "connect_ns": 0,
        "chunk_ns": chunk_ns,
        "chunk_tokens": tuple(tokens),
        "end_ns": (chunk_ns[-1] if chunk_ns else start_ns) + MS // 10,
        "token_source": TokenSource.TOKEN_IDS,
        "prompt_tokens": input_len,
        "completion_tokens": sum(tokens),
        "finish_reason": "length",
        "status": 200,
    }
    fields.update(overrides)
    return RequestRecord(**fields)


def failed_record(request_id: int, kind: ErrorKind, **overrides: Any) -> RequestRecord:
    """A request that failed before any token (no chunks, no usage)."""
    fields: dict[str, Any] = {
        "offsets_ns": (),
        "tokens": (),
        "error": kind,
        "error_detail": f"{kind.value} happened",
        "prompt_tokens": None,
        "completion_tokens": None,
        "finish_reason": None,
        "status": None,
        "max_tokens": 8,
    }
    fields.update(overrides)
    return make_record(request_id, **fields)


@st.composite
def completed_records(
    draw: st.DrawFn, max_records: int = 6, max_chunks: int = 12
) -> list[RequestRecord]:
    """Random completed records: arbitrary positive gaps, 1..4 tokens per chunk."""
    records = []
    for request_id in range(draw(st.integers(1, max_records))):
        n = draw(st.integers(1, max_chunks))
        gaps = draw(st.lists(st.integers(1, 50 * MS), min_size=n, max_size=n))
        tokens = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
        offsets = [sum(gaps[: i + 1]) for i in range(n)]
        start = draw(st.integers(0, 100 * MS))
        extra = draw(st.integers(0, 3))  # max_tokens above the output: stopped early
        records.append(
            make_record(
                request_id,
                start_ns=start,
                offsets_ns=offsets,
                tokens=tokens,
                max_tokens=sum(tokens) + extra,
                finish_reason="length" if extra == 0 else "stop",
            )
        )
    return records


def full_point(
    records: Sequence[RequestRecord],
    ctx: Any,
    *,
    server_before: Any = None,
    server_after: Any = None,
    **identity: Any,
) -> Any:
    """A whole PointResult from records, built by the one assembler the runner uses, with
    a fake run's identity (fields given here replace its defaults)."""
    import msgspec

    from loadgen.results.point import PointIdentity, PointStatus, SimulatorHealth
    from loadgen.run.assemble import PointCounts, PointParts, assemble_point

    base = PointIdentity(
        target="fake",
        run_id="run-test",
        model_id="served",
        endpoint_type="openai",
        endpoint="completions",
        base_url="http://fake",
        backend="vllm",
        http_client="native",
        input_len=ctx.input_len,
        output_len=ctx.output_len,
        range_ratio=1.0,
        request_rate="inf",
        burstiness=1.0,
        loadgen_version="test",
        tokenizer_check=None,
        shard=None,
        shards_merged=1,
    )
    parts = PointParts(
        identity=msgspec.structs.replace(base, **identity),
        status=PointStatus(
            complete=True, stop_reason=None, stop_detail=None, incomplete_reason=None
        ),
        counts=PointCounts(len(records), 0, 0),
        processes=[],
        clock_uncertainty_ms=0.0,
        synthesis=("words", None),
        server_metrics_by_url=None,
        simulator=SimulatorHealth(),
    )
    return assemble_point(
        records, ctx, ctx.conc, parts, server_before=server_before, server_after=server_after
    )


def point_file(fields: dict[str, Any]) -> dict[str, Any]:
    """A whole point file (every field the model requires, from a real one-request
    summary) with `fields` in place of the fields a test cares about."""
    from loadgen.metrics.summary import PointContext

    conc = int(fields.get("max_concurrency", 1))
    base = full_point(
        [make_record(0, start_ns=MS, offsets_ns=[MS, 2 * MS], tokens=(1, 1))],
        PointContext(conc=conc, input_len=100, output_len=2),
    ).to_json()
    return {**base, **fields}
