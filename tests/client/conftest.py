"""Client tests: the native client's wire tests run on uvloop, the loop runs use."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

UVLOOP_MODULES = {"test_native.py"}


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], object]] | None:
    if item.path.name in UVLOOP_MODULES:
        return {"uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
