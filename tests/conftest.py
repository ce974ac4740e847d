"""Shared test fixtures: paths to the reference data in tests/fixtures (see its README),
loadgen's default tokenizer; and how the run shares the machine's cores
(tests/support/parallel.py)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from loadgen.tokenizer import load_tokenizer
from tests.support import parallel, vllm_servers
from tests.support.paths import FIXTURES

_LOCK_DIR = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("vllm") for item in items):
        from tests.support.vllm_servers import group_by_config

        group_by_config(items)
    parallel.long_first(items)


# tryfirst: xdist's own implementation is registered after this file, so runs first else.
@pytest.hookimpl(optionalhook=True, tryfirst=True)  # xdist hooks: absent with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadgroup: the groups of tests/support/parallel.py."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return parallel.GroupScheduling(config, log)


@pytest.hookimpl(optionalhook=True)  # an xdist hook, on the controller: absent with -p no:xdist
def pytest_configure_node(node: Any) -> None:
    """Every worker of this run gets the same directory for the `exclusive` lock, and
    knows whether it is a waiting lane."""
    config: pytest.Config = node.config
    if _LOCK_DIR not in config.stash:
        config.stash[_LOCK_DIR] = Path(tempfile.mkdtemp(prefix="loadgen-tests-"))
    node.workerinput["loadgen_lock_dir"] = str(config.stash[_LOCK_DIR])
    node.workerinput["loadgen_waiting_lane"] = parallel.is_waiting_lane(node.gateway.id)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _LOCK_DIR in config.stash:
        shutil.rmtree(config.stash[_LOCK_DIR], ignore_errors=True)


def _call_only(item: pytest.Item) -> bool:
    """`exclusive(setup=False)`: only the call runs alone; its setup (e.g. a server
    starting, CPU-bound for half a minute) and teardown share the machine."""
    marker = item.get_closest_marker("exclusive")
    return marker is not None and marker.kwargs.get("setup") is False


def _turn(item: pytest.Item, exclusive: bool) -> Any:
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:  # one process: nothing runs beside anything
        return contextlib.nullcontext()
    lane = bool(workerinput.get("loadgen_waiting_lane"))
    return parallel.turn(Path(workerinput["loadgen_lock_dir"]), exclusive, lane=lane)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Under xdist, a test marked `exclusive` runs with no other test beside it: its
    setup, call and teardown, or (setup=False) its call alone, each phase in its turn."""
    if _call_only(item):
        return (yield)
    with _turn(item, item.get_closest_marker("exclusive") is not None):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    if not _call_only(item):
        return (yield)
    with _turn(item, exclusive=False):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    if not _call_only(item):
        return (yield)
    with _turn(item, exclusive=True):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    if not _call_only(item):
        return (yield)
    with _turn(item, exclusive=False):
        return (yield)


@pytest.fixture(scope="session")
def vllm_fixtures() -> Path:
    path = FIXTURES / "vllm_0.32_cpu"
    assert path.is_dir(), f"reference captures missing at {path}"
    return path


@pytest.fixture(scope="session")
def dsv4_fixtures() -> Path:
    path = FIXTURES / "deepseek_v4"
    assert path.is_dir(), f"encoder golden files missing at {path}"
    return path


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """loadgen's default (DeepSeek-V4) tokenizer, once per module (a module or a folder's
    conftest may define its own of the same name)."""
    return load_tokenizer()


@pytest.fixture(scope="session")
def built_tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tokenizers trained here (tests/support/built_tokenizers.py), once per session: name ->
    tokenizer.json (in a directory of its own, as a model directory has it)."""
    from tests.support.built_tokenizers import build_all

    return build_all(tmp_path_factory.mktemp("tokenizers"))


# The vLLM integration tests' skip reasons and server start-up times (their fixtures fill
# them): an xdist worker hands its lines to the controller, which prints them.
def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["vllm_skip_reasons"] = list(vllm_servers.SKIP_REASONS)
        output["vllm_timings"] = dict(vllm_servers.TIMINGS)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent with -p no:xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    output = getattr(node, "workeroutput", {})
    vllm_servers.SKIP_REASONS.extend(output.get("vllm_skip_reasons", ()))
    vllm_servers.TIMINGS.update(output.get("vllm_timings", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for reason in dict.fromkeys(vllm_servers.SKIP_REASONS):
        terminalreporter.write_line(f"vLLM integration tests were SKIPPED: {reason}", red=True)
    if vllm_servers.TIMINGS:
        terminalreporter.write_line(
            "vLLM integration: "
            + ", ".join(
                f"{name} {value}" if isinstance(value, int) else f"{name} {value:.1f} s"
                for name, value in vllm_servers.TIMINGS.items()
            )
        )
