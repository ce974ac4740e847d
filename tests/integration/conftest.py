"""Fixtures for the `vllm`-marked integration tests (a real vLLM CPU-build server) and
the `dynamo`-marked ones (a real Dynamo frontend with mocker workers: below).

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

from tests.support.dynamo_cluster import DynamoCluster, dynamo_env, skip_dynamo, start
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


@pytest.fixture()
def vllm_thinking(vllm_pool: ServerPool) -> VllmServer:
    return vllm_pool.get("thinking")


# The `dynamo`-marked tests: a real Dynamo 1.4.2 frontend and mocker workers
# (scripts/dynamo_env.py, tests/support/dynamo_cluster.py). The venv is built once into the
# user's cache (~75 s with a warm pip cache, ~2 min 15 s cold); a machine where it cannot
# be built, or where no network namespace can be made, skips them with the reason.
# Set LOADGEN_SKIP_DYNAMO=<why> to skip them on purpose.
@pytest.fixture(scope="session")
def dynamo_python() -> str:
    if reason := os.environ.get("LOADGEN_SKIP_DYNAMO"):
        skip_dynamo(f"LOADGEN_SKIP_DYNAMO is set ({reason})")
    try:
        info = dynamo_env.prepare(dynamo_env.cache_root())
    except dynamo_env.PrepareError as error:
        skip_dynamo(f"the Dynamo environment cannot be built here: {error}")
    return str(info["python"])


@pytest.fixture(scope="session")
def dynamo_agg(
    dynamo_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DynamoCluster]:
    """The aggregated layout: a frontend in front of one mocker worker."""
    try:
        cluster = start(dynamo_python, tmp_path_factory.mktemp("dynamo-agg"))
    except dynamo_env.PrepareError as error:
        skip_dynamo(str(error))
    try:
        yield cluster
    finally:
        cluster.stop()


# The other layouts (scripts/dynamo_env.py layout_roles), each started once per module
# that asks for it. The P/D workers simulate the KV transfer: 100 kB a token over 10 GB/s
# (a 512-token prompt's KV in ~5 ms).
PD_KV = ("--kv-transfer-bandwidth", "10", "--kv-bytes-per-token", "100000")
LAYOUTS = {"1p1d": PD_KV, "2p1d": PD_KV, "dp2": ()}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def dynamo_layout(
    request: pytest.FixtureRequest, dynamo_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DynamoCluster]:
    layout: str = request.param
    try:
        cluster = start(
            dynamo_python,
            tmp_path_factory.mktemp(f"dynamo-{layout}"),
            layout=layout,
            mocker_args=LAYOUTS[layout],
        )
    except dynamo_env.PrepareError as error:
        skip_dynamo(str(error))
    try:
        yield cluster
    finally:
        cluster.stop()
