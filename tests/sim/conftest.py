"""Shared pieces for the simulator tests: one tokenizer per session, fast configs, SSE parsing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from tokenizers import Tokenizer

from loadgen.sim import SimConfig, running_simulator
from loadgen.sim.server import RunningSimulator
from loadgen.tokenizer import load_tokenizer
from tests.support.sim_helpers import SimFactory

# Steps of ~1 ms keep the tests quick; the model itself is exercised by test_sim_engine.
FAST = {"step_fixed_ms": 1.0, "decode_token_us": 2.0, "prefill_token_us": 0.1, "spin_us": 0.0}


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


@pytest.fixture
def sim_factory(tokenizer: Tokenizer) -> SimFactory:
    """start(**config_fields) -> async context manager of a running simulator (FAST steps)."""

    def start(**fields: Any) -> AbstractAsyncContextManager[RunningSimulator]:
        return running_simulator(SimConfig(**{**FAST, **fields}), tokenizer=tokenizer)

    return start


@pytest.fixture
async def sim(sim_factory: SimFactory) -> AsyncIterator[RunningSimulator]:
    async with sim_factory() as running:
        yield running
