"""The processes part: the client's processes on this machine, its shard of a
multi-machine run, and the server process it watches (`spec.processes`): its flags, its
struct and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.config.fields import Field, default_of, flag
from loadgen.config.parsers import (
    MAX_WORKERS,
    SpecError,
    parse_cpu_list,
    parse_shard,
    parse_workers,
)


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """The client's processes on this machine, its shard of a multi-machine run, and the
    server process it watches."""

    workers: int | None = 1  # client processes on this machine; None = auto (resolved at run)
    cpu_affinity: tuple[int, ...] = ()  # worker i runs on cpu_affinity[i % len]
    shard_index: int = 0  # this run sends shard `shard_index` of `shard_count` of each point
    shard_count: int = 1
    shard_sync: Path | None = None  # a directory all shards share: start points together
    server_pid: int | None = None  # stop the sweep when this process dies or stays stopped


FIELDS: tuple[Field, ...] = (
    flag(
        "--workers",
        type=parse_workers,
        default=default_of(ProcessSpec, "workers"),
        metavar="N|auto",
        help="client processes on this machine, each with its own event loop, "
        "connections and share of every point's concurrency; auto picks from the "
        "cores and the largest --conc and says what it chose (1 = this process)",
        fills="workers",
        keep_none=True,  # None is auto
    ),
    flag(
        "--cpu-affinity",
        type=parse_cpu_list,
        default=default_of(ProcessSpec, "cpu_affinity"),
        metavar="CPUS",
        help="pin worker i to the i-th CPU of this list (taskset syntax, e.g. 2-7) "
        "(default: not pinned)",
        fills="cpu_affinity",
        to=tuple,
    ),
    flag(
        "--shard",
        type=parse_shard,
        default=(0, 1),
        metavar="I/N",
        help="run shard I (from 0) of N of every point, for `loadgen merge` to "
        "combine with the other shards' results (default: 0/1, the whole point)",
        fills=("shard_index", "shard_count"),
    ),
    flag(
        "--shard-sync",
        type=Path,
        default=None,
        metavar="DIR",
        help="a directory every shard can write (e.g. on the shared results "
        "volume), empty for each run: shards start each point's measured phase "
        "together, so their points overlap (default: shards run independently)",
        fills="shard_sync",
    ),
    flag(
        "--server-pid",
        type=int,
        default=None,
        metavar="PID",
        help="the server's process id, when it runs on this machine: the sweep "
        "stops (the point in progress kept, marked complete: false) as soon as "
        "it exits or stays stopped (SIGSTOP) for 2 s (default: none; without "
        "it a server that refuses or drops every connection for 1 s is "
        "taken as gone)",
        fills="server_pid",
        section="target",
    ),
)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_counts(processes: ProcessSpec) -> None:
    _check(
        processes.workers is None or 1 <= processes.workers <= MAX_WORKERS,
        f"--workers: must be in 1..{MAX_WORKERS} (or auto)",
    )
    _check(
        0 <= processes.shard_index < processes.shard_count,
        f"--shard {processes.shard_index}/{processes.shard_count}: need 0 <= I < N",
    )
    _check(
        processes.shard_sync is None or processes.shard_count > 1,
        "--shard-sync lines up the shards of a --shard I/N run: use it with --shard",
    )


def _check_affinity(processes: ProcessSpec) -> None:
    _check(
        not processes.cpu_affinity or processes.workers != 1,
        "--cpu-affinity pins worker processes: use it with --workers 2 or more (or "
        "auto), or start a single process under taskset",
    )


def check(processes: ProcessSpec) -> None:
    """The processes' own checks, in the order the first error is reported."""
    _check_counts(processes)
    _check_affinity(processes)
