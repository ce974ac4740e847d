"""The lock that lets an `exclusive` test run with nothing beside it under xdist
(tests/support/parallel.py): real flock(2) locks, taken from threads (each turn opens its
own file, so two turns conflict as two worker processes' would)."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.support.parallel import group_of, turn

WAIT_S = 0.3


def hold(lock_dir: Path, exclusive: bool, entered: threading.Event, leave: threading.Event) -> None:
    with turn(lock_dir, exclusive):
        entered.set()
        leave.wait(30)


def start(
    lock_dir: Path, exclusive: bool
) -> tuple[threading.Thread, threading.Event, threading.Event]:
    entered, leave = threading.Event(), threading.Event()
    thread = threading.Thread(target=hold, args=(lock_dir, exclusive, entered, leave))
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
    assert group_of("tests/run/test_cli.py::test_x[a::b]") == "tests/run/test_cli.py"
    assert group_of("tests/integration/test_aiohttp_upgrade.py::test_y") == (
        "tests/integration/test_aiohttp_upgrade.py"
    )
    for module in ("test_vllm.py", "test_vllm_agentx.py", "test_vllm_prefix_cache.py"):
        assert group_of(f"tests/integration/{module}::test_z") == "vllm"
