"""A server whose /metrics lie (issue 47, item 6): the point file a real sweep leaves.

A real vLLM cannot be made to count impossibly, so the server here is the hostile one
(tests/support/hostile_server.py): a raw asyncio server on a real socket that streams
ordinary completions and serves crafted Prometheus text on /metrics, one body before the
point's requests and another after them. loadgen scrapes it as it scrapes vLLM (the
preflight, then around the point); the figures the counters cannot support must be null
with their reason, the point complete, and its client figures untouched. The rules
themselves, on parsed snapshots, are in tests/metrics/test_counter_bounds.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.tokenizer import load_tokenizer
from tests.support.hostile_server import (
    Conn,
    Handler,
    HostileServer,
    Request,
    answer_bytes,
    completion,
)

pytestmark = pytest.mark.timeout(120)

CONC, PER_CONC, OSL = 2, 2, 6
LABELS = 'engine="0",model_name="m"'


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def series(
    drafts: str = "0",
    draft_tokens: str = "0",
    accepted: str = "0",
    ttft: tuple[str, str] = ("0", "0"),
    frontend_ttft: tuple[str, str] | None = None,
    extra: str = "",
) -> str:
    """vLLM's spec-decode counters and TTFT histogram (and a Dynamo frontend's), as text."""
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        f"vllm:spec_decode_num_drafts_total{{{LABELS}}} {drafts}\n"
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        f"vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} {draft_tokens}\n"
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} {accepted}\n"
        f"{extra}"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{{LABELS},le="+Inf"}} {ttft[1]}\n'
        f"vllm:time_to_first_token_seconds_sum{{{LABELS}}} {ttft[0]}\n"
        f"vllm:time_to_first_token_seconds_count{{{LABELS}}} {ttft[1]}\n"
    )
    if frontend_ttft is not None:
        text += (
            "# TYPE dynamo_frontend_time_to_first_token_seconds histogram\n"
            f'dynamo_frontend_time_to_first_token_seconds_bucket{{le="+Inf"}} {frontend_ttft[1]}\n'
            f"dynamo_frontend_time_to_first_token_seconds_sum {frontend_ttft[0]}\n"
            f"dynamo_frontend_time_to_first_token_seconds_count {frontend_ttft[1]}\n"
        )
    return text


class LyingServer:
    """Routes whose /metrics body is `before` until the point's requests were served
    (those asking for OSL tokens: the preflight's probe asks for fewer), then `after`."""

    def __init__(self, before: str, after: str) -> None:
        self.before, self.after = before.encode(), after.encode()
        self.served = 0
        self.stream = completion()

    async def completions(self, request: Request, conn: Conn) -> None:
        await self.stream(request, conn)
        self.served += request.json()["max_tokens"] == OSL

    async def metrics(self, request: Request, conn: Conn) -> None:
        body = self.after if self.served == CONC * PER_CONC else self.before
        await answer_bytes(body, "text/plain; version=0.0.4")(request, conn)

    def routes(self) -> dict[str, Handler]:
        return {"/v1/completions": self.completions, "/metrics": self.metrics}


async def measured(
    lying: LyingServer, tmp: Path, tokenizer: Tokenizer, **settings: Any
) -> dict[str, Any]:
    async with HostileServer(lying.routes()) as server:
        spec = RunSpec.flat(
            conc=(CONC,),
            isl=48,
            osl=OSL,
            base_url=server.base_url,
            prompts_per_conc=PER_CONC,
            warmup_per_conc=0,
            results_dir=tmp,
            progress=False,
            **settings,
        )
        async with asyncio.timeout(90):
            await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    assert lying.served == CONC * PER_CONC
    result: dict[str, Any] = orjson.loads((tmp / f"conc_{CONC}.json").read_bytes())
    assert result["complete"] and result["completed"] == CONC * PER_CONC
    return result


ZERO = series()


async def test_accepted_above_draft_tokens_is_null_with_its_reason(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """The issue's row: accepted > draft tokens published AL 6.8 and rate 2.9 at K = 2."""
    lying = LyingServer(ZERO, series(drafts="100", draft_tokens="200", accepted="580"))
    result = await measured(lying, tmp_path, tokenizer)
    assert result["server_acceptance_length"] is None
    assert result["server_acceptance_rate"] is None
    assert result["server_spec_decode_accepted_tokens"] is None
    reason = result["server_acceptance_invalid_reason"]
    assert "accepted tokens 580 above draft tokens 200" in reason
    assert result["acceptance_length_source"] != "server_counters"


async def test_an_extra_labelled_series_is_null_with_its_reason(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """The issue's row: another model's accepted series summed in gave AL 4,527 at K = 2
    (given with --spec-tokens): both the AL and the accepted-vs-drafted rules say so."""
    other = 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="other"} 452600\n'
    lying = LyingServer(ZERO, series(drafts="100", draft_tokens="200", accepted="0", extra=other))
    result = await measured(lying, tmp_path, tokenizer, spec_tokens=2)
    assert result["server_acceptance_length"] is None
    reason = result["server_acceptance_invalid_reason"]
    assert "acceptance length 4527.00 above K+1 = 3" in reason
    assert "accepted tokens 452600 above draft tokens 200" in reason
    # the stream's own figures (one token per chunk here) are unaffected
    assert result["stream_acceptance_length"] == pytest.approx(1.0)


async def test_a_server_and_frontend_ttft_beside_a_10ms_client_are_null(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """The issue's row: a server (and a Dynamo frontend) TTFT of 6-15 s beside a client
    whose every TTFT is milliseconds on loopback."""
    after = series(ttft=("60.0", "4"), frontend_ttft=("24.0", "4"))
    result = await measured(
        LyingServer(series(frontend_ttft=("0", "0")), after), tmp_path, tokenizer
    )
    # the premise of the rule: the 15 s the server claims is above every client TTFT
    assert result["p99.9_ttft_ms"] < 15_000
    assert result["server_mean_ttft_ms"] is None and result["frontend_mean_ttft_ms"] is None
    assert (
        "server_mean_ttft_ms 15000.0 ms above the client's largest TTFT"
        in (result["server_latency_invalid_reason"])
    )
    assert (
        "frontend_mean_ttft_ms 6000.0 ms above the client's largest TTFT"
        in (result["frontend_latency_invalid_reason"])
    )
    assert result["server_requests"] == 4  # the count is not a mean: it stands


@pytest.mark.parametrize("bad", ["NaN", "+Inf"])
async def test_nan_and_inf_counters_are_missing_samples_not_a_lost_point(
    tmp_path: Path, tokenizer: Tokenizer, bad: str
) -> None:
    """A NaN counter raised `cannot convert float NaN to integer` and lost the point.
    Every series kind here carries it after the point: counters, a histogram, a labelled
    per-position series; the point is complete and those figures are null."""
    per_position = (
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="0"}} {bad}\n'
    )
    after = series(
        drafts=bad, draft_tokens="200", accepted=bad, ttft=(bad, bad), extra=per_position
    )
    result = await measured(LyingServer(ZERO, after), tmp_path, tokenizer)
    for key in (
        "server_acceptance_length",
        "server_spec_decode_drafts",
        "server_mean_ttft_ms",
        "server_requests",
    ):
        assert result[key] is None, key
    assert result["mean_ttft_ms"] is not None
