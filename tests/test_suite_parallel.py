"""The lock that lets an `exclusive` test run with nothing beside it under xdist
(tests/support/parallel.py): real flock(2) locks, taken from threads (each turn opens its
own file, so two turns conflict as two worker processes' would)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

from tests.support.parallel import WAITING, GroupScheduling, cores, group_of, turn
from tests.support.paths import ROOT

WAIT_S = 0.3


def hold(
    lock_dir: Path,
    exclusive: bool,
    entered: threading.Event,
    leave: threading.Event,
    lane: bool = False,
) -> None:
    with turn(lock_dir, exclusive, lane=lane):
        entered.set()
        leave.wait(30)


def start(
    lock_dir: Path, exclusive: bool, lane: bool = False
) -> tuple[threading.Thread, threading.Event, threading.Event]:
    entered, leave = threading.Event(), threading.Event()
    thread = threading.Thread(target=hold, args=(lock_dir, exclusive, entered, leave, lane))
    thread.start()
    return thread, entered, leave


def test_shared_turns_run_side_by_side(tmp_path: Path) -> None:
    a, a_in, a_out = start(tmp_path, exclusive=False)
    b, b_in, b_out = start(tmp_path, exclusive=False)
    assert a_in.wait(10) and b_in.wait(10)
    for thread, out in ((a, a_out), (b, b_out)):
        out.set()
        thread.join()


def test_an_exclusive_turn_waits_for_the_shared_one_and_then_holds_off_the_next(
    tmp_path: Path,
) -> None:
    shared, shared_in, shared_out = start(tmp_path, exclusive=False)
    assert shared_in.wait(10)
    alone, alone_in, alone_out = start(tmp_path, exclusive=True)
    assert not alone_in.wait(WAIT_S)  # a test is still running beside it
    # A shared turn asked for now queues behind the waiting exclusive one (the turnstile).
    late, late_in, late_out = start(tmp_path, exclusive=False)
    assert not late_in.wait(WAIT_S)
    shared_out.set()
    shared.join()
    assert alone_in.wait(10)
    assert not late_in.wait(WAIT_S)  # nothing beside the exclusive test
    alone_out.set()
    alone.join()
    assert late_in.wait(10)
    late_out.set()
    late.join()


def test_a_module_is_a_group_and_the_vllm_modules_are_one() -> None:
    assert group_of("tests/config/test_cli.py::test_x[a::b]") == "tests/config/test_cli.py"
    assert group_of("tests/integration/test_aiohttp_upgrade.py::test_y") == (
        "tests/integration/test_aiohttp_upgrade.py"
    )
    for module in ("test_vllm.py", "test_vllm_agentx.py", "test_vllm_prefix_cache.py"):
        assert group_of(f"tests/integration/{module}::test_z") == "vllm"


def test_a_lane_test_waits_out_an_exclusive_one_but_never_holds_one_off(tmp_path: Path) -> None:
    alone, alone_in, alone_out = start(tmp_path, exclusive=True)
    assert alone_in.wait(10)
    lane, lane_in, lane_out = start(tmp_path, exclusive=False, lane=True)
    assert not lane_in.wait(WAIT_S)  # it does not start beside an exclusive test
    alone_out.set()
    alone.join()
    assert lane_in.wait(10)
    # while the lane test runs, an exclusive test starts at once: the lane holds nothing
    again, again_in, again_out = start(tmp_path, exclusive=True)
    assert again_in.wait(10)
    for thread, out in ((again, again_out), (lane, lane_out)):
        out.set()
        thread.join()


class Worker:
    """What the scheduler reads of xdist's WorkerController (hashed by identity, as it is)."""

    def __init__(self, index: int, shutting_down: bool = False) -> None:
        self.gateway = SimpleNamespace(id=f"gw{index}")
        self.shutting_down = shutting_down


LANE, CORE = Worker(cores()), Worker(0)


def scheduler(*scopes: str, workers: tuple[Worker, ...] = (CORE, LANE)) -> GroupScheduling:
    """The scheduler's choice alone, over a work queue of these scopes."""
    scheduling: GroupScheduling = GroupScheduling.__new__(GroupScheduling)
    scheduling.workqueue = OrderedDict((scope, {}) for scope in scopes)
    scheduling.assigned_work = {worker: {} for worker in workers}
    return scheduling


def test_a_lane_takes_only_waiting_groups_and_a_core_takes_them_last() -> None:
    waiting = sorted(WAITING)[0]
    choose = scheduler("tests/a.py", waiting, "tests/b.py")
    assert choose._next_scope(LANE) == waiting
    assert choose._next_scope(CORE) == "tests/a.py"
    assert scheduler(waiting)._next_scope(CORE) == waiting  # nothing else is left
    assert scheduler("tests/a.py")._next_scope(LANE) is None


def test_a_lane_left_alone_takes_any_group() -> None:
    """xdist shuts down the workers a short run has no group for; when those are the
    cores', the lane runs what is left rather than leave it unrun."""
    alone = scheduler("tests/a.py", workers=(Worker(0, shutting_down=True), LANE))
    assert alone._next_scope(LANE) == "tests/a.py"


def test_the_waiting_groups_are_modules_without_an_exclusive_test() -> None:
    for group in WAITING:
        path = ROOT / group
        assert path.is_file(), group
        assert "mark.exclusive" not in path.read_text(), f"{group} has an exclusive test"
