"""Completed records of one point as flat numpy arrays, built once, shared by the metrics.

A point at conc 512 x 10 prompts x 1024 output tokens has ~5,000 records and ~1.7 M chunks;
every per-chunk metric (ITL, per-token ITL, acceptance, windowed throughput) is one
vectorised expression over these arrays instead of a Python loop over chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import numpy.typing as npt

from loadgen.records import RequestRecord

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

NS_PER_MS = 1e6


def is_completed(record: RequestRecord) -> bool:
    """A request counts as completed when it ended without error and carried a token.

    An error-free stream with no token-bearing chunk has no TTFT or E2EL; it is counted
    as failed (kind `no_tokens`) rather than inventing a latency for it.
    """
    return record.ok and len(record.chunk_ns) > 0


def _ints(records: Sequence[RequestRecord], get: Callable[[RequestRecord], int]) -> IntArray:
    return np.fromiter((get(r) for r in records), dtype=np.int64, count=len(records))


@dataclass(frozen=True, slots=True)
class PointArrays:
    """Per-chunk arrays (all completed records concatenated) and per-record arrays."""

    chunk_ns: IntArray  # [chunks] arrival times, record after record
    chunk_tokens: IntArray  # [chunks] tokens in each chunk
    first: IntArray  # [records] index of each record's first chunk
    last: IntArray  # [records] index of each record's last chunk
    start_ns: IntArray
    end_ns: IntArray
    queue_ns: IntArray
    connect_ns: IntArray
    input_len: IntArray
    max_tokens: IntArray
    output_tokens: IntArray  # usage.completion_tokens, else the summed chunk counts
    chunk_token_sum: IntArray
    prompt_tokens: IntArray  # -1 where the server did not report it
    completion_tokens: IntArray  # -1 where the server did not report it
    finished_by_length: BoolArray  # finish_reason == "length"

    @classmethod
    def build(cls, records: Sequence[RequestRecord]) -> PointArrays:
        """Arrays for records that must all be completed (see is_completed)."""
        lengths = _ints(records, lambda r: len(r.chunk_ns))
        token_lengths = _ints(records, lambda r: len(r.chunk_tokens))
        if not np.array_equal(lengths, token_lengths):
            bad = records[int(np.flatnonzero(lengths != token_lengths)[0])]
            raise ValueError(f"record {bad.request_id}: chunk_ns and chunk_tokens differ in length")
        if np.any(lengths == 0):
            raise ValueError("PointArrays.build needs completed records (at least one chunk)")
        total = int(lengths.sum())
        chunk_ns = np.fromiter(
            chain.from_iterable(r.chunk_ns for r in records), dtype=np.int64, count=total
        )
        chunk_tokens = np.fromiter(
            chain.from_iterable(r.chunk_tokens for r in records), dtype=np.int64, count=total
        )
        ends = np.cumsum(lengths)
        return cls(
            chunk_ns=chunk_ns,
            chunk_tokens=chunk_tokens,
            first=ends - lengths,
            last=ends - 1,
            start_ns=_ints(records, lambda r: r.start_ns),
            end_ns=_ints(records, lambda r: r.end_ns),
            queue_ns=_ints(records, lambda r: r.queue_ns),
            connect_ns=_ints(records, lambda r: r.connect_ns),
            input_len=_ints(records, lambda r: r.input_len),
            max_tokens=_ints(records, lambda r: r.max_tokens),
            output_tokens=_ints(records, lambda r: r.output_tokens),
            chunk_token_sum=np.add.reduceat(chunk_tokens, ends - lengths)
            if total
            else np.zeros(0, dtype=np.int64),
            prompt_tokens=_ints(
                records, lambda r: -1 if r.prompt_tokens is None else r.prompt_tokens
            ),
            completion_tokens=_ints(
                records, lambda r: -1 if r.completion_tokens is None else r.completion_tokens
            ),
            finished_by_length=np.fromiter(
                (r.finish_reason == "length" for r in records), dtype=np.bool_, count=len(records)
            ),
        )

    @property
    def num_records(self) -> int:
        return int(self.first.size)

    def ttft_ms(self) -> FloatArray:
        return (self.chunk_ns[self.first] - self.start_ns) / NS_PER_MS

    def e2el_ms(self) -> FloatArray:
        return (self.chunk_ns[self.last] - self.start_ns) / NS_PER_MS

    def gap_is_within_record(self) -> BoolArray:
        """Mask over np.diff(chunk_ns): False where a diff spans two records."""
        within = np.ones(max(self.chunk_ns.size - 1, 0), dtype=np.bool_)
        within[self.last[:-1]] = False
        return within

    def itl_per_chunk_ms(self) -> tuple[FloatArray, IntArray]:
        """All chunk gaps of all records (pooled) and the tokens in each gap's later chunk."""
        within = self.gap_is_within_record()
        gaps = np.diff(self.chunk_ns)[within] / NS_PER_MS
        return gaps, self.chunk_tokens[1:][within]

    def max_gap_ms(self) -> FloatArray:
        """Largest chunk gap of each record (0 for a single-chunk record)."""
        if self.num_records == 0:
            return np.zeros(0, dtype=np.float64)
        gaps = np.zeros(self.chunk_ns.size, dtype=np.int64)
        gaps[:-1] = np.diff(self.chunk_ns)
        gaps[self.last] = 0  # the diff that would span into the next record
        return np.maximum.reduceat(gaps, self.first) / NS_PER_MS

    def decode_chunk_mask(self, spec_tokens: int | None) -> BoolArray:
        """Chunks counted for stream acceptance: all but each record's first, minus a final
        chunk that max_tokens may have cut short.

        A final chunk can only be cut short when the request stopped at its token limit
        (finish_reason "length", or the chunk counts reach max_tokens). It is then excluded
        when it carries fewer than K+1 tokens (K = spec_tokens): the server had at most
        that many tokens of budget left, so its size says nothing about acceptance. A
        final chunk with exactly K+1 tokens was not truncated and is kept. With K unknown
        every final chunk of a length-limited request is excluded. The decision depends
        only on the tokens before that chunk, so it does not bias the mean.
        """
        mask = np.ones(self.chunk_ns.size, dtype=np.bool_)
        mask[self.first] = False
        at_limit = self.finished_by_length | (self.chunk_token_sum >= self.max_tokens)
        cut = at_limit & (self.last != self.first)
        if spec_tokens is not None:
            cut &= self.chunk_tokens[self.last] < spec_tokens + 1
        mask[self.last[cut]] = False
        return mask
