"""A server whose per-request `metrics` cannot be the request's, over real sockets (a raw
asyncio server of our own, tests/support/hostile_server.py), through the real client:
- spec-decode stats the output cannot hold (100 verify steps claimed for an 8-token
  answer published AL 3.0) or with another K than the run's: the request is malformed;
- stats that fit the output but not the stream (tuned to AL 2.27 while every chunk is one
  token): the point warns that the stream and per-request AL disagree, and the golden-AL
  check passes on neither (whichever of the two matches the golden value);
- timings longer than the client measured (TTFT outside the server -8 s): counted, left
  out of the timing figures, a warning; never published as negative time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.client.native.client import NativeStreams
from loadgen.client.transport import Transport
from loadgen.config.golden import GoldenAL
from loadgen.config.spec import RunSpec
from loadgen.metrics.trust import point_warnings
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.results.point import point_from_json
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.plan import RequestSpec
from tests.support.hostile_server import (
    Conn,
    Handler,
    HostileServer,
    Request,
    answer_bytes,
    response_id,
    sse,
    token_events,
)

pytestmark = pytest.mark.timeout(120)


def spec_stats(k: int, histogram: list[int]) -> dict[str, Any]:
    """Self-consistent stats (the histogram, its counts): only the output can belie them."""
    steps = sum(histogram)
    accepted = sum(j * n for j, n in enumerate(histogram))
    return {
        "mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / (steps * k) if steps else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": steps * k,
        "num_spec_tokens": k,
    }


def with_metrics(metrics: dict[str, Any], delay_s: float = 0.0, osl: int | None = None) -> Handler:
    """One token per chunk, then the final usage chunk carrying `metrics` (only on
    requests for `osl` tokens, when given: not on the preflight's probe)."""

    async def handle(request: Request, conn: Conn) -> None:
        max_tokens = request.json()["max_tokens"]
        events = token_events(max_tokens)
        if osl is None or max_tokens == osl:
            events[-1]["metrics"] = metrics
        await asyncio.sleep(delay_s)
        await conn.head(chunked=True)
        await conn.chunk(sse(events))
        await conn.end()

    return handle


async def send_one(
    metrics: dict[str, Any], max_tokens: int, spec_tokens: int | None = None
) -> RequestRecord:
    async with HostileServer({"/v1/completions": with_metrics(metrics)}) as server:
        native = NativeStreams(max_connections=1)
        options: dict[str, Any] = {} if spec_tokens is None else {"spec_tokens": spec_tokens}
        transport = Transport(
            native, server.base_url + "/v1/completions", stream_idle_timeout_s=5, **options
        )
        request = RequestSpec(
            index=0,
            input_len=3,
            max_tokens=max_tokens,
            body=orjson.dumps({"max_tokens": max_tokens}),
        )
        try:
            async with asyncio.timeout(30):
                return await transport.send(
                    request, x_request_id="r", conc=1, scheduled_ns=0, on_record=lambda _r: None
                )
        finally:
            await native.close()


async def test_100_verify_steps_for_8_tokens_are_malformed() -> None:
    record = await send_one({"speculative_decoding": spec_stats(3, [0, 0, 100, 0])}, 8)
    assert record.error is ErrorKind.MALFORMED, record
    assert "100 verify steps and 200 accepted drafts emit 300 tokens" in record.error_detail
    assert "more than the 8 the request produced" in record.error_detail


async def test_stats_an_8_token_answer_can_hold_stand() -> None:
    # 1 token from the prefill, 2 steps of (3 + 1), and the last step's cut drafts
    record = await send_one({"speculative_decoding": spec_stats(3, [0, 0, 1, 2])}, 8)
    assert record.ok, record.error_detail
    assert record.server_spec_decode is not None
    assert record.server_spec_decode.num_spec_steps == 3


async def test_another_k_than_the_runs_is_malformed() -> None:
    record = await send_one({"speculative_decoding": spec_stats(3, [0, 1, 1, 0])}, 8, 2)
    assert record.error is ErrorKind.MALFORMED, record
    assert "num_spec_tokens 3, but the run's K (--spec-tokens) is 2" in record.error_detail


# --- whole points -----------------------------------------------------------------------

OSL, CONC, PER_CONC = 32, 2, 2


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


async def point_of(
    handler: Handler, results: Path, tokenizer: Tokenizer, **settings: Any
) -> dict[str, Any]:
    async with HostileServer({"/v1/completions": handler}) as server:
        spec = RunSpec.flat(
            conc=(CONC,),
            isl=48,
            osl=OSL,
            base_url=server.base_url,
            prompts_per_conc=PER_CONC,
            warmup_per_conc=0,
            results_dir=results,
            progress=False,
            **settings,
        )
        async with asyncio.timeout(90):
            await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    point: dict[str, Any] = orjson.loads((results / f"conc_{CONC}.json").read_bytes())
    return point


async def test_per_request_al_tuned_against_the_stream_is_a_warning(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    # 14 steps, 17 accepted: 31 tokens (fits 32), AL 2.21 -- while every chunk is 1 token
    tuned = {"speculative_decoding": spec_stats(2, [3, 5, 6])}
    point = await point_of(with_metrics(tuned, osl=OSL), tmp_path / "r", tokenizer, spec_tokens=2)
    assert point["failed"] == 0
    assert point["stream_acceptance_length"] == 1.0
    assert point["server_request_acceptance_length"] == pytest.approx(1 + 17 / 14)
    warnings = point_warnings(point_from_json(point, "conc file"))
    assert any(
        "the stream's acceptance length 1.00 and the server's per-request 2.21 disagree" in w
        for w in warnings
    ), warnings


def in_pairs(metrics: dict[str, Any], osl: int) -> Handler:
    """Two tokens per chunk (K=2: a step that accepted one draft, every time: stream AL
    2.0), then the final usage chunk carrying `metrics` on requests for `osl` tokens."""

    async def handle(request: Request, conn: Conn) -> None:
        max_tokens = request.json()["max_tokens"]
        events: list[dict[str, Any]] = []
        chunk_id = response_id()
        for n in range(2, max_tokens + 1, 2):
            choice = {
                "index": 0,
                "text": "ww",
                "token_ids": [7, 7],
                "finish_reason": "length" if n == max_tokens else None,
            }
            events.append({"id": chunk_id, "choices": [choice], "usage": {"completion_tokens": n}})
        final: dict[str, Any] = {"id": chunk_id, "choices": [], "usage": {"completion_tokens": n}}
        if max_tokens == osl:
            final["metrics"] = metrics
        await conn.head(chunked=True)
        await conn.chunk(sse([*events, final]))
        await conn.end()

    return handle


GOLDEN_2 = GoldenAL(Path("golden.yaml"), "m", "thinking_on", ((2, 2.0),))


@pytest.mark.parametrize(
    ("stream_al", "histogram", "per_request_al"),
    [
        # the stream (published) matches the golden 2.0; the server's stats say 1.2
        (2.0, [8, 2, 0], 1.2),
        # the server's stats are tuned to the golden 2.0; every chunk is one token
        (1.0, [2, 10, 2], 2.0),
    ],
    ids=["stream-at-golden", "per-request-tuned-to-golden"],
)
async def test_the_golden_al_check_does_not_pass_when_the_two_als_disagree(
    tmp_path: Path,
    tokenizer: Tokenizer,
    stream_al: float,
    histogram: list[int],
    per_request_al: float,
) -> None:
    """Before, the check read the published AL alone: a stream at the golden value
    passed it while the server's per-request stats of the same requests said 1.2 (and
    the warning said neither AL was trusted). Stats that fit the output (steps +
    accepted drafts within the 32 tokens) are not malformed, so only the disagreement
    can stop them."""
    stats = {"speculative_decoding": spec_stats(2, histogram)}
    handler = in_pairs(stats, OSL) if stream_al == 2.0 else with_metrics(stats, osl=OSL)
    point = await point_of(handler, tmp_path / "r", tokenizer, spec_tokens=2, golden_al=GOLDEN_2)
    assert point["failed"] == 0
    assert point["stream_acceptance_length"] == stream_al
    assert point["server_request_acceptance_length"] == pytest.approx(per_request_al)
    assert point["golden_acceptance_length"] == 2.0
    assert point["golden_acceptance_ok"] is False, point["golden_acceptance_note"]
    assert point["golden_acceptance_note"].startswith(
        f"not checked: the stream's acceptance length {stream_al:.2f} and the server's "
        f"per-request {per_request_al:.2f} disagree by more than 5%"
    ), point["golden_acceptance_note"]


async def test_the_golden_al_check_passes_when_the_two_als_agree(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """The stream at 2.0 and stats of 16 steps that each accepted one draft (AL 2.0,
    32 tokens): the same requests, the check passes."""
    stats = {"speculative_decoding": spec_stats(2, [0, 16, 0])}
    point = await point_of(
        in_pairs(stats, OSL), tmp_path / "r", tokenizer, spec_tokens=2, golden_al=GOLDEN_2
    )
    assert point["stream_acceptance_length"] == 2.0
    assert point["server_request_acceptance_length"] == 2.0
    assert point["golden_acceptance_ok"] is True, point["golden_acceptance_note"]
    assert point["golden_acceptance_drift"] == 0.0


async def test_server_timings_longer_than_the_clients_are_left_out(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    timings = {"time_to_first_token_ms": 8000.0, "queue_time_ms": 0.5, "generation_time_ms": 1.0}
    point = await point_of(with_metrics(timings, osl=OSL), tmp_path / "r", tokenizer)
    records = read_jsonl(tmp_path / "r" / f"requests_conc_{CONC}.jsonl")
    assert all(r.ok and r.server_timings is not None for r in records)
    assert point["server_timing_requests"] == CONC * PER_CONC
    assert point["server_timings_exceed_client"] == CONC * PER_CONC
    assert point["mean_ttft_outside_server_ms"] is None  # not -8 s
    assert point["mean_server_request_ttft_ms"] is None
    assert any(
        "claim more time than the client measured" in w
        for w in point_warnings(point_from_json(point, "conc file"))
    )


async def test_server_timings_inside_the_clients_are_published(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    timings = {"time_to_first_token_ms": 0.0, "queue_time_ms": 0.0, "generation_time_ms": 0.0}
    point = await point_of(with_metrics(timings, delay_s=0.01, osl=OSL), tmp_path / "r", tokenizer)
    assert point["server_timings_exceed_client"] == 0
    assert point["mean_ttft_outside_server_ms"] > 0


def vllm_metrics(k: int) -> bytes:
    """A vLLM /metrics page of a server drafting K=k tokens that has served nothing yet:
    its spec-decode counters at 0, one accepted-per-position series per draft position
    (vLLM registers them all when it starts)."""
    labels = 'engine="0",model_name="m"'
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f"vllm:spec_decode_num_drafts_total{{{labels}}} 0.0",
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} 0.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} 0.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{p}"}} 0.0'
            for p in range(k)
        ),
    ]
    return ("\n".join(lines) + "\n").encode()


async def test_another_k_than_the_servers_is_malformed_without_spec_tokens(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """The server's /metrics say K=2; its per-request stats claim K=3 (AL 2.0 over 16
    steps, which 32 tokens can hold). No --spec-tokens: before, nothing had K to check
    them against and every request was ok; now each is malformed, naming both Ks."""
    stats = {"speculative_decoding": spec_stats(3, [0, 16, 0, 0])}
    async with HostileServer(
        {
            "/v1/completions": with_metrics(stats, osl=OSL),
            "/metrics": answer_bytes(vllm_metrics(2), "text/plain; version=0.0.4"),
        }
    ) as server:
        spec = RunSpec.flat(
            conc=(CONC,),
            isl=48,
            osl=OSL,
            base_url=server.base_url,
            prompts_per_conc=PER_CONC,
            warmup_per_conc=0,
            results_dir=tmp_path / "r",
            progress=False,
        )
        async with asyncio.timeout(90):
            await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    records = read_jsonl(tmp_path / "r" / f"requests_conc_{CONC}.jsonl")
    assert len(records) == CONC * PER_CONC
    for record in records:
        assert record.error is ErrorKind.MALFORMED, record
        assert (
            "num_spec_tokens 3, but the server's K (num_speculative_tokens, from its /metrics) is 2"
            in (record.error_detail or "")
        )
    run = orjson.loads((tmp_path / "r" / "run.json").read_bytes())
    assert run["server"]["spec_tokens"] == 2


async def test_the_servers_own_k_stands(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """The same stats from a server whose /metrics say K=3: every request is ok."""
    stats = {"speculative_decoding": spec_stats(3, [0, 16, 0, 0])}
    async with HostileServer(
        {
            "/v1/completions": with_metrics(stats, osl=OSL),
            "/metrics": answer_bytes(vllm_metrics(3), "text/plain; version=0.0.4"),
        }
    ) as server:
        spec = RunSpec.flat(
            conc=(CONC,),
            isl=48,
            osl=OSL,
            base_url=server.base_url,
            prompts_per_conc=PER_CONC,
            warmup_per_conc=0,
            results_dir=tmp_path / "r",
            progress=False,
        )
        async with asyncio.timeout(90):
            await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    records = read_jsonl(tmp_path / "r" / f"requests_conc_{CONC}.jsonl")
    assert [r.ok for r in records] == [True] * CONC * PER_CONC, records[0].error_detail
