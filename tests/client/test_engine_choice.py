"""--engine given by hand is checked against what the server shows (client/engine_detect.py)."""

from __future__ import annotations

import pytest

from loadgen.client.engine_detect import EngineChoice, EngineMismatch, choose_engine
from loadgen.metrics.engines import DYNAMO, SGLANG, VLLM


def test_an_engine_given_by_hand_may_be_behind_a_dynamo_frontend() -> None:
    """--engine vllm against a frontend that shows only its own series names the workers'
    engine, not a mismatch; against a server that plainly is SGLang it is one."""
    frontend = EngineChoice(DYNAMO, "http://f/metrics serves dynamo_frontend_* series", True)
    chosen = choose_engine("vllm", frontend)
    assert chosen.dialect is VLLM and "behind a Dynamo frontend" in chosen.reason
    assert choose_engine("auto", frontend).dialect is DYNAMO
    with pytest.raises(EngineMismatch, match="the server is sglang"):
        choose_engine("vllm", EngineChoice(SGLANG, "serves sglang:* series", True))
