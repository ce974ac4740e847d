"""Per-request measurement records: what the client produces and every later stage reads.

A record is what one request measured, in raw form: the clock readings (perf_counter_ns)
at each chunk's arrival and the exact token count of each chunk. Everything published is
derived from these by `summary`, so a record never holds a derived number that could
disagree with its raw data.
"""

from __future__ import annotations

import base64
import dataclasses
import sys
from array import array
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson


class ErrorKind(StrEnum):
    """Why a request did not complete; translated from exceptions at the transport only."""

    CONNECT = "connect"  # no connection could be opened (refused, DNS, reset before send)
    HTTP = "http"  # the server answered a non-2xx status before streaming
    SERVER_ERROR = "server_error"  # an `error` object arrived inside the stream
    DISCONNECT = "disconnect"  # the stream ended without `data: [DONE]`
    MALFORMED = "malformed"  # not valid JSON / HTTP, not the expected shape, an impossible value
    TIMEOUT = "timeout"  # --stream-idle-timeout (no byte for that long) or --request-timeout
    CANCELLED = "cancelled"  # the run was stopped (Ctrl-C, DELETE) while it was in flight


class StrayBytes(StrEnum):
    """Bytes on a request's connection that could not be its response (docs/results.md)."""

    AFTER_RESPONSE = "after_response"  # more after its complete response: connection closed
    BEFORE_REQUEST = "before_request"  # kernel-stamped before its write: malformed
    # bytes came on its connection later, while it was idle (or stamped before a later
    # write): its response may have been another request's: malformed (protocol.py)
    LATER = "later"


class TokenSource(StrEnum):
    """Where the per-chunk token counts came from, best first (docs/design.md: tokens per chunk)."""

    TOKEN_IDS = "token_ids"
    USAGE = "usage"
    LOGPROBS = "logprobs"
    TEXT = "text"  # re-tokenized text: approximate, flagged in results


class ArrivalStamps(StrEnum):
    """Whose clock reading a request's chunk stamps are (docs/design.md: arrival stamps)."""

    KERNEL = "kernel"  # the kernel's receive stamp of the read's newest packet
    READ = "read"  # read by the client when its read callback ran (TLS, aiohttp, fallback)


@dataclass(frozen=True, slots=True)
class SpecDecodeStats:
    """vLLM's per-request `metrics.speculative_decoding` (vLLM 0.32
    `--per-request-spec-decode-metrics summary|detailed`), checked at the client boundary.

    acceptance_histogram[j] = verify steps that accepted exactly j draft tokens (the bonus
    token not counted), j = 0..num_spec_tokens; the counts agree with it (checked)."""

    mean_acceptance_length: float  # the server's 1 + accepted / steps
    draft_acceptance_rate: float  # accepted / drafted
    acceptance_histogram: tuple[int, ...]
    num_spec_steps: int
    num_accepted_draft_tokens: int
    num_draft_tokens: int
    num_spec_tokens: int  # K
    # `detailed` only: accepted and drafted tokens of each verify step, in order
    per_step_accepted: tuple[int, ...] | None = None
    per_step_drafted: tuple[int, ...] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpecDecodeStats:
        values = dict(data)
        for name in ("acceptance_histogram", "per_step_accepted", "per_step_drafted"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class ServerTimings:
    """vLLM's per-request timings (`--enable-per-request-metrics`), in the server's clock;
    each None when the server did not send it."""

    queue_time_ms: float | None = None  # queued -> scheduled
    time_to_first_token_ms: float | None = None  # scheduled -> first token (not queue)
    generation_time_ms: float | None = None  # first -> last token
    mean_itl_ms: float | None = None
    tokens_per_second: float | None = None


class OutputBasis(StrEnum):
    """What a request's kept output (`RequestOutput`) identifies it by."""

    TOKEN_IDS = "token_ids"  # the ids the server streamed (vLLM `return_token_ids`): exact
    TEXT = "text"  # the streamed text, where some chunk carried no ids


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What one request generated, kept with `--record-outputs` (docs/results.md,
    `output`): the one field both the lossless check across lanes and an accuracy scorer
    read. `token_ids` is the ids' little-endian uint32 bytes, base64 (4 bytes a token in
    memory, 5.3 in the JSONL: 5.4 KB per 1k tokens); `digest` identifies the output by
    `basis` (ids when every chunk had them, else the text)."""

    basis: OutputBasis
    digest: str  # blake2b-128 hex of the ids' bytes (TOKEN_IDS) or the text's UTF-8 (TEXT)
    text: str  # content, then (chat) the reasoning the server streamed apart
    token_ids: str | None  # base64 of uint32 LE ids; None when basis is TEXT
    finish_reason: str | None
    prompt_digest: str  # blake2b-128 hex of the request body: pairs it across lanes
    reasoning: str = ""  # chat's delta.reasoning(_content), when the server streamed it apart
    # the token-bearing chunk whose content text held `</think>` (a server that streams the
    # reasoning as content: metrics/phases.py), and whether answer text followed it there
    think_end_chunk: int | None = None
    answer_in_think_end_chunk: bool = False

    def ids(self) -> tuple[int, ...] | None:
        """The token ids kept (None: the basis is the text)."""
        if self.token_ids is None:
            return None
        ids = array("I", base64.b64decode(self.token_ids))
        if sys.byteorder == "big":  # stored little-endian
            ids.byteswap()
        return tuple(ids)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestOutput:
        values = dict(data)
        values["basis"] = OutputBasis(values["basis"])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One measured request. All `*_ns` values are time.perf_counter_ns() readings."""

    request_id: int  # index within its point, in send order
    conc: int  # the concurrency point it belongs to
    input_len: int  # intended prompt tokens (loadgen's own count)
    max_tokens: int  # requested output tokens (osl)
    scheduled_ns: int  # when it was due: slot free (closed loop) or arrival time (open loop)
    start_ns: int  # immediately before its bytes were handed to the connection
    connect_ns: int  # time spent opening a new connection before start (0 when reused)
    chunk_ns: tuple[int, ...]  # arrival of each token-bearing event
    chunk_tokens: tuple[int, ...]  # tokens in each of those events (exact unless TEXT)
    end_ns: int  # stream end: [DONE], error, or cancellation
    token_source: TokenSource
    prompt_tokens: int | None = None  # server usage.prompt_tokens
    completion_tokens: int | None = None  # server usage.completion_tokens
    finish_reason: str | None = None
    status: int | None = None  # HTTP status, None when no response arrived
    error: ErrorKind | None = None
    error_detail: str = ""
    sent_unix: float = 0.0  # wall clock at start, a label only
    # perf_counter_ns and time_ns read together when this record's point started in its
    # process: maps this record's *_ns onto the wall clock (`loadgen merge` across machines)
    clock_mono_ns: int = 0
    clock_unix_ns: int = 0
    # the synthetic prompt length asked for (None: a dataset prompt); differs from
    # input_len only where the tokenizer cannot give that length exactly
    target_len: int | None = None
    # Sessions (multi-turn, agentic replay); None for independent requests.
    session_id: str | None = None  # the session (or subagent) the request belongs to
    turn_index: int | None = None  # its place in that session, from 0
    tree_id: str | None = None  # the session tree (root and its subagents)
    cached_tokens: int | None = None  # server usage.prompt_tokens_details.cached_tokens
    theoretical_cached_tokens: int | None = None  # from the trace's hash_ids (replay only)
    # KERNEL only when every read of the response carried a usable kernel stamp
    arrival_stamps: ArrivalStamps = ArrivalStamps.READ
    # bytes no request asked for were seen on this request's connection (native client)
    stray_bytes: StrayBytes | None = None
    # The server's own per-request figures from its final usage chunk (vLLM 0.32
    # `metrics`), None when it sent none
    server_spec_decode: SpecDecodeStats | None = None
    server_timings: ServerTimings | None = None
    output: RequestOutput | None = None  # --record-outputs: what came back
    # Chat's phases (metrics/phases.py): the indices into chunk_ns at which the field the
    # text came in changed (content <-> delta.reasoning(_content)), content first; () when
    # every token-bearing delta was content. A delta with tokens but no text keeps the
    # phase it came in (vLLM's parser swallows `</think>` so: its chunk has ids, no text),
    # counted in textless_phase_chunks when it came in the other field.
    phase_marks: tuple[int, ...] = ()
    textless_phase_chunks: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def queue_ns(self) -> int:
        """Time between being due and being sent (slot wait / open-loop lateness)."""
        return self.start_ns - self.scheduled_ns

    @property
    def ttft_ns(self) -> int | None:
        return self.chunk_ns[0] - self.start_ns if self.chunk_ns else None

    @property
    def e2el_ns(self) -> int | None:
        return self.chunk_ns[-1] - self.start_ns if self.chunk_ns else None

    @property
    def output_tokens(self) -> int:
        """Server-reported completion tokens, else the summed chunk counts."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return sum(self.chunk_tokens)

    def to_json(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        values = dict(data)
        values["chunk_ns"] = tuple(values["chunk_ns"])
        values["chunk_tokens"] = tuple(values["chunk_tokens"])
        if "phase_marks" in values:
            values["phase_marks"] = tuple(values["phase_marks"])
        values["token_source"] = TokenSource(values["token_source"])
        values["arrival_stamps"] = ArrivalStamps(values.get("arrival_stamps", "read"))
        if values.get("stray_bytes") is not None:
            values["stray_bytes"] = StrayBytes(values["stray_bytes"])
        if values.get("error") is not None:
            values["error"] = ErrorKind(values["error"])
        if values.get("server_spec_decode") is not None:
            values["server_spec_decode"] = SpecDecodeStats.from_dict(values["server_spec_decode"])
        if values.get("server_timings") is not None:
            values["server_timings"] = ServerTimings(**values["server_timings"])
        if values.get("output") is not None:
            values["output"] = RequestOutput.from_dict(values["output"])
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})
