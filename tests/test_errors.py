"""The run-level exception tree (loadgen/errors.py): every LoadgenError in loadgen keeps
the exit status and the `stop_reason` code it had when the codes were one table in
run/stops.py. Result files and scripts read both, so neither may move."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import loadgen
from loadgen import errors
from loadgen.errors import LoadgenError
from loadgen.run.stops import stop_of


def _import_all() -> None:
    for module in pkgutil.walk_packages(loadgen.__path__, "loadgen."):
        if not module.name.endswith("__main__"):  # runs the CLI when imported
            importlib.import_module(module.name)


def _subclasses(cls: type[LoadgenError]) -> list[type[LoadgenError]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return found


def loadgen_errors() -> list[type[LoadgenError]]:
    """Every LoadgenError class loadgen defines (a test's own subclass is not one)."""
    _import_all()
    return sorted(
        {c for c in _subclasses(LoadgenError) if c.__module__.startswith("loadgen.")},
        key=_name,
    )


def _named(name: str) -> type[LoadgenError]:
    module, _, qualname = name.rpartition(".")
    cls: type[LoadgenError] = getattr(importlib.import_module(module), qualname)
    return cls


# run/stops.py's STOP_REASONS as it was before the codes moved onto the classes: the first
# class the error is an instance of gives its code, "error" when none does.
OLD_STOP_REASONS: tuple[tuple[str, str], ...] = (
    ("loadgen.errors.Interrupted", "interrupted"),
    ("loadgen.run.server_watch.ServerGone", "server_gone"),
    ("loadgen.run.launched_server.ServerFailedToStart", "server_failed_to_start"),
    ("loadgen.scale.pool.WorkerDied", "worker_died"),
    ("loadgen.run.shard_sync.ShardStopped", "shard_stopped"),
    ("loadgen.run.shard_sync.CoordinatorLost", "coordinator_lost"),
    ("loadgen.results.files.ResultsWriteError", "results_write_failed"),
    ("loadgen.client.transport.OutOfDescriptors", "out_of_file_descriptors"),
    ("loadgen.errors.ServerError", "server_error"),
    ("loadgen.errors.SetupError", "setup_error"),
    ("loadgen.errors.UsageError", "bad_input"),
)
# The exit statuses as they were (loadgen.cli exits with `exit_code`): the first class of
# the error's MRO listed here gives it.
OLD_EXIT_CODES = {
    "loadgen.client.server_profiler.ProfilerUnavailable": 2,
    "loadgen.errors.Interrupted": 130,
    "loadgen.errors.UsageError": 2,
    "loadgen.errors.LoadgenError": 1,
}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def old_stop_reason(cls: type[LoadgenError]) -> str:
    return next((r for name, r in OLD_STOP_REASONS if issubclass(cls, _named(name))), "error")


def old_exit_code(cls: type[LoadgenError]) -> int:
    return next(OLD_EXIT_CODES[_name(c)] for c in cls.__mro__ if _name(c) in OLD_EXIT_CODES)


def instance(cls: type[LoadgenError]) -> LoadgenError:
    """An instance without the class's own constructor (ResultsWriteError takes a path
    and an OSError): what stop_of reads is the class and str()."""
    error = cls.__new__(cls)
    error.args = ("the line",)
    return error


@pytest.mark.parametrize("cls", loadgen_errors(), ids=lambda c: c.__qualname__)
def test_every_error_keeps_its_stop_reason_and_exit_code(cls: type[LoadgenError]) -> None:
    stop = stop_of(instance(cls))
    assert stop is not None
    assert (stop.reason, stop.detail) == (old_stop_reason(cls), "the line")
    assert cls.exit_code == old_exit_code(cls)


TREE_LINE = re.compile(
    r"^    (?P<branch>[│├└─ ]*)(?P<name>\w+) +(?P<exit>\d+) +(?P<stop>\w+) +(?P<path>\S+)$"
)


def drawn_tree() -> dict[str, tuple[str | None, int, str]]:
    """errors.py's drawing: class -> (its parent in the drawing, exit status, stop_reason),
    each class named by its module and name."""
    drawn: dict[str, tuple[str | None, int, str]] = {}
    parents: list[str] = []  # the last class drawn at each depth
    for line in (errors.__doc__ or "").splitlines():
        match = TREE_LINE.match(line)
        if match is None:
            continue
        depth = len(match["branch"]) // 4
        module = "loadgen." + match["path"].removesuffix(".py").replace("/", ".")
        name = f"{module}.{match['name']}"
        del parents[depth:]
        drawn[name] = (parents[-1] if parents else None, int(match["exit"]), match["stop"])
        parents.append(name)
    return drawn


def test_every_error_has_an_exit_code_and_a_stop_reason() -> None:
    for cls in loadgen_errors():
        assert isinstance(cls.exit_code, int) and cls.exit_code > 0, cls
        assert isinstance(cls.stop_reason, str) and cls.stop_reason, cls


def test_the_tree_drawn_in_errors_py_is_the_classes() -> None:
    """Each class drawn once, under its base, with its own exit status and stop code; and
    no class left out of the drawing."""
    live = {
        _name(cls): (
            next((_name(b) for b in cls.__bases__ if issubclass(b, LoadgenError)), None),
            cls.exit_code,
            cls.stop_reason,
        )
        for cls in loadgen_errors()
    }
    assert drawn_tree() == live
