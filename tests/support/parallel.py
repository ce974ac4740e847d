"""How the suite shares two cores: which tests run together on one pytest-xdist worker,
in what order the work is handed out, and which tests run with nothing else beside them.

Why not stock xdist: measured in one session on this machine, stock `-n 2 --dist
loadfile` ran the suite in 1,125 s of pytest and failed one test (the vLLM thinking
test: two vLLM pools, one per worker, alive at once, and the CPU frontend lumped its
answer into one write); this scheduler with a worker per core and a waiting lane, 1,052
s with none. The gain is the `vllm` group (one server at a time, each configuration
started once) and the waiting lane, not a cleverer order.

scripts/test runs pytest with `-n N --dist loadgroup`; with that, tests/conftest.py
hands xdist the scheduler below. xdist's own loadgroup reads `xdist_group` marks by
renaming node ids, which pytest 9.2 no longer lets it do (every test would be a group of
one), so the groups are decided here, from the node id alone (the controller never sees
the tests' marks):

- A test module is a group: its fixtures (a sweep run once for the module, a simulator,
  a trained tokenizer) are built once, on one worker, and its tests keep their order.
- Named groups span modules: `vllm` is every tests/integration/test_vllm*.py module
  (one pool, one server at a time; tests/support/vllm_servers.py sorts those tests by
  server configuration so that each starts once).
- Groups are handed out in collection order (no reordering by size), and collection
  puts the long ones first (LONG_FIRST), so the longest chain starts at once and the
  short modules fill in beside it.
- A test marked `exclusive` (a CPU-timing assertion that another worker's load would
  break) runs with no other test beside it: every test holds a shared lock on one file
  for its setup, call and teardown, an exclusive one takes it alone. A second file, taken
  briefly before either, is the turnstile that keeps a waiting exclusive test from being
  starved by a stream of shared ones.
- Workers beyond the machine's cores (scripts/test starts one more) are waiting lanes:
  they take only the WAITING groups, whose tests mostly wait (a library's backoff, a real
  Prometheus scraping) rather than compute, so the cores the other workers measure on
  stay theirs (or any group, once no core's worker is left, as in a run of few groups).
  A lane test starts only when no exclusive test runs, but holds no lock while it runs:
  an exclusive test need not wait out a long lane test.
"""

from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# name -> what each of its modules' paths starts with
NAMED_GROUPS: dict[str, str] = {"vllm": "tests/integration/test_vllm"}
# Groups for the waiting lanes: CPU (the test process's and its children's) under half
# their wall time in a 2-core suite run, no `exclusive` test among them, and no assertion
# on a time the client measures (a lane test runs beside two busy workers: the sweeps
# whose latencies are compared, e.g. find-max against every concurrency, stay off it).
# tests/test_suite_parallel.py checks the files and the marks.
WAITING: frozenset[str] = frozenset(
    f"tests/{module}.py"
    for module in (
        "client/test_faults",  # error kinds of the simulator's fault modes
        "metrics/test_session_metrics",  # a real Prometheus scraping; equalities
        "run/test_serve_cmd_ctrl_c",  # a launched server's 45 s stop waited out; ~25% CPU
        "run/test_trials_resume_checks",  # a real SIGINT mid-trial; files kept or refused
        "sinks/test_dashboard",  # a real Prometheus scraping; every panel has data
    )
)
# Groups that take minutes, handed out first in this order; the rest keep their
# collection order.
LONG_FIRST: Sequence[str] = (
    "vllm",
    # ~20 s once its venv is cached; building it takes ~75 s (warm pip cache) to ~2.2 min
    "tests/integration/test_dynamo.py",
    "tests/container/test_container_image.py",
    "tests/integration/test_aiohttp_upgrade.py",
)


def group_of(nodeid: str) -> str:
    """The group of a test, from its node id: a named group, or else its module's path."""
    module = nodeid.split("::", 1)[0]
    return next(
        (name for name, prefix in NAMED_GROUPS.items() if module.startswith(prefix)), module
    )


def long_first(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


@functools.cache
def cores() -> int:
    return len(os.sched_getaffinity(0))


def is_waiting_lane(worker_id: str) -> bool:
    """Worker gwN is a waiting lane when N is beyond the machine's cores."""
    return int(worker_id.removeprefix("gw")) >= cores()


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
    """xdist's scope scheduling (a whole scope to one worker), with group_of as the scope,
    the collection's order kept, and the WAITING groups kept for the waiting lanes
    (a core's worker takes them only when nothing else is left)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        config.option.loadscopereorder = False
        super().__init__(config, log)

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)

    def _next_scope(self, node: Any) -> str | None:
        cores_alive = any(
            not is_waiting_lane(other.gateway.id) and not other.shutting_down
            for other in self.nodes
        )
        if is_waiting_lane(node.gateway.id) and cores_alive:
            return next((scope for scope in self.workqueue if scope in WAITING), None)
        return next((scope for scope in self.workqueue if scope not in WAITING), None) or next(
            iter(self.workqueue), None
        )

    def _assign_work_unit(self, node: Any) -> None:
        scope = self._next_scope(node)
        if scope is None:
            return
        self.workqueue.move_to_end(scope, last=False)  # the base class takes the first
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if not is_waiting_lane(node.gateway.id):
            super()._reschedule(node)
        elif node.shutting_down:
            return
        elif self._next_scope(node) is None:
            node.shutdown()  # after the tests it holds: no waiting group is left
        elif self._pending_of(self.assigned_work.get(node, {})) <= 2:
            self._assign_work_unit(node)


@contextmanager
def _flock(path: Path, operation: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def turn(lock_dir: Path, exclusive: bool, *, lane: bool = False) -> Iterator[None]:
    """Hold the run's shared lock (or, exclusive, the whole machine's test slot) for a test;
    on a waiting lane, wait until no exclusive test runs and hold nothing."""
    if lane:
        with (
            _flock(lock_dir / "turnstile", fcntl.LOCK_EX),
            _flock(lock_dir / "tests", fcntl.LOCK_SH),
        ):
            pass
        yield
        return
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
