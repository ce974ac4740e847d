from __future__ import annotations

from pathlib import Path

from loadgen.records import ErrorKind, RequestRecord, TokenSource
from loadgen.results.jsonl import JsonlSink, read_jsonl


def make(i: int, **kw: object) -> RequestRecord:
    base: dict[str, object] = dict(
        request_id=i,
        conc=4,
        input_len=100,
        max_tokens=8,
        scheduled_ns=1_000,
        start_ns=1_500,
        connect_ns=0,
        chunk_ns=(2_000, 2_600, 3_100),
        chunk_tokens=(1, 3, 4),
        end_ns=3_200,
        token_source=TokenSource.TOKEN_IDS,
        prompt_tokens=100,
        completion_tokens=8,
        finish_reason="length",
        status=200,
    )
    base.update(kw)
    return RequestRecord(**base)  # type: ignore[arg-type]


def test_derived_times() -> None:
    r = make(0)
    assert r.ok and r.queue_ns == 500 and r.ttft_ns == 500 and r.e2el_ns == 1_600
    assert r.output_tokens == 8
    assert make(1, completion_tokens=None).output_tokens == 8


def test_failed_record_has_no_latency() -> None:
    r = make(0, chunk_ns=(), chunk_tokens=(), error=ErrorKind.HTTP, status=500)
    assert not r.ok and r.ttft_ns is None and r.e2el_ns is None


def test_jsonl_round_trip_and_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    records = [make(i) for i in range(3)] + [make(3, error=ErrorKind.DISCONNECT)]
    with JsonlSink(path) as sink:
        for r in records:
            sink.write(r)
    with open(path, "ab") as fh:  # a process killed mid-write leaves a torn line
        fh.write(b'{"request_id": 4, "conc"')
    assert read_jsonl(path) == records
