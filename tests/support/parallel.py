"""How the suite shares two cores: which tests run together on one pytest-xdist worker,
in what order the work is handed out, and which tests run with nothing else beside them.

scripts/test runs pytest with `-n auto --dist loadgroup --no-loadscope-reorder`:
xdist hands out whole groups (`xdist_group`), in collection order, to whichever worker
is free.

- A test module is a group of its own unless a test is already in a named group: a
  module's fixtures (a sweep run once for the module, a simulator, a trained tokenizer)
  are then built once, on one worker, and the tests in it keep their order.
- Named groups cross modules: `vllm` (one pool, one server at a time:
  tests/integration/conftest.py).
- The long groups go first (LONG_FIRST), so the longest chain starts at once and the
  short modules fill in beside it.
- A test marked `exclusive` (a CPU-timing assertion that another worker's load would
  break) runs with no other test beside it: every test holds a shared lock on one file
  for its setup, call and teardown, an exclusive one takes it alone. A second file, taken
  briefly before either, is the turnstile that keeps a waiting exclusive test from being
  starved by a stream of shared ones.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

# Groups (or module paths relative to tests/) that take minutes: handed out first, in this
# order. The rest keep their collection order.
LONG_FIRST: Sequence[str] = (
    "vllm",
    "container/test_container_image.py",
    "integration/test_aiohttp_upgrade.py",
)


def group_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return None
    name = marker.args[0] if marker.args else marker.kwargs.get("name")
    return str(name) if name is not None else None


def module_group(item: pytest.Item, tests_root: Path) -> str:
    return item.path.relative_to(tests_root).as_posix()


def assign_groups(items: list[pytest.Item], tests_root: Path) -> None:
    """Every test in a group (its module's unless named), the long groups first."""
    for item in items:
        if group_of(item) is None:
            item.add_marker(pytest.mark.xdist_group(module_group(item, tests_root)))
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item) or "", len(rank)))


@contextmanager
def _flock(path: Path, operation: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def turn(lock_dir: Path, exclusive: bool) -> Iterator[None]:
    """Hold the run's shared lock (or, exclusive, the whole machine's test slot) for a test."""
    with _flock(lock_dir / "turnstile", fcntl.LOCK_EX):
        fd = os.open(lock_dir / "tests", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
    try:
        yield
    finally:
        os.close(fd)
