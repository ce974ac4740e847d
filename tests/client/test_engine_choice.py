"""--engine given by hand is checked against what the server shows (client/engine_detect.py)."""

from __future__ import annotations

import aiohttp
import pytest

from loadgen.client.engine_detect import (
    EngineChoice,
    EngineMismatch,
    choose_engine,
    detect_engine,
)
from loadgen.metrics.engines import DYNAMO, SGLANG, VLLM
from loadgen.metrics.server import ServerSnapshot, merge_snapshots, parse_metrics
from tests.support.paths import FIXTURES

CAPTURES = FIXTURES / "dynamo_1.4.2"


def test_an_engine_given_by_hand_may_be_behind_a_dynamo_frontend() -> None:
    """--engine vllm against a frontend that shows only its own series names the workers'
    engine, not a mismatch; against a server that plainly is SGLang it is one."""
    frontend = EngineChoice(DYNAMO, "http://f/metrics serves dynamo_frontend_* series", True)
    chosen = choose_engine("vllm", frontend)
    assert chosen.dialect is VLLM and "behind a Dynamo frontend" in chosen.reason
    assert choose_engine("auto", frontend).dialect is DYNAMO
    with pytest.raises(EngineMismatch, match="the server is sglang"):
        choose_engine("vllm", EngineChoice(SGLANG, "serves sglang:* series", True))


def _captured(*names: str) -> ServerSnapshot:
    """The real Dynamo 1.4.2 captures' series, summed as the preflight sums its URLs'."""
    snapshots = [parse_metrics((CAPTURES / name).read_text()) for name in names]
    merged = merge_snapshots(snapshots)
    assert merged is not None
    return merged


async def test_fresh_dynamo_workers_beside_the_frontend_read_as_vllm_assumed() -> None:
    """The real 1P1D captures: the frontend with the prefill worker, whose system port
    serves Dynamo's runtime series and no engine's (as a fresh mocker's decode worker
    before its first request), is read as vLLM, said to be assumed, not as a Dynamo
    "engine" whose worker figures would all be null; the frontend alone stays Dynamo."""
    async with aiohttp.ClientSession() as session:  # never asked: the series decide
        fresh = await detect_engine(
            session,
            "http://127.0.0.1:9",
            _captured("pd_1p1d_frontend_metrics.txt", "pd_1p1d_prefill_metrics.txt"),
            "the URLs",
        )
        alone = await detect_engine(
            session, "http://127.0.0.1:9", _captured("frontend_metrics.txt"), "the URL"
        )
    assert fresh.dialect is VLLM and fresh.shown is False
    assert "no engine's yet" in fresh.reason and "assumed" in fresh.reason
    assert alone.dialect is DYNAMO and alone.shown
