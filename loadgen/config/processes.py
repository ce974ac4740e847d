"""The processes part: the client's processes on this machine, its shard of a
multi-machine run, and the server process it watches (`spec.processes`): its flags, its
struct and its checks."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.config.fields import Field, default_of, flag
from loadgen.config.parsers import (
    MAX_WORKERS,
    SpecError,
    parse_cpu_list,
    parse_shard,
    parse_workers,
    seconds_parser,
)
from loadgen.config.shard_env import Placement, placement

TOKEN_VAR = "LOADGEN_COORDINATOR_TOKEN"


parse_coordinator_wait = seconds_parser("--coordinator-wait", "300")


DEFAULT_COORDINATOR_PORT = 29517


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """The client's processes on this machine, its shard of a multi-machine run, and the
    server process it watches."""

    workers: int | None = 1  # client processes on this machine; None = auto (resolved at run)
    cpu_affinity: tuple[int, ...] = ()  # worker i runs on cpu_affinity[i % len]
    shard_index: int = 0  # this run sends shard `shard_index` of `shard_count` of each point
    shard_count: int = 1
    shard_sync: Path | None = None  # a directory all shards share: start points together
    shard_source: str = "flag"  # where the index came from: flag, or --shard auto's scheduler
    # --coordinator: shard 0 listens at (host, port), the others connect (scale/coordinator/)
    coordinator_host: str | None = None
    coordinator_port: int = DEFAULT_COORDINATOR_PORT
    coordinator_token: str | None = None  # the shards' shared secret (never written down)
    coordinator_wait_s: float = 300.0  # how long shards wait for the coordinator and each other
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
        default="0/1",
        metavar="I/N|auto",
        help="run shard I (from 0) of N of every point, for `loadgen merge` (or the "
        "coordinator) to combine with the other shards' results; auto reads I and N "
        "from Kubernetes (Indexed Job, JobSet), Slurm or Open MPI "
        "(docs/workers-and-shards.md) (default: 0/1, the whole point)",
    ),
    flag(
        "--coordinator",
        default=None,
        metavar="HOST:PORT|auto",
        help="shards meet over the network instead of a shared directory: shard 0 "
        "listens at HOST:PORT, the others connect; points start together, a shard that "
        "stops stops them all, and shard 0 writes the merged result set in "
        "<results>/merged; auto: shard 0's stable name from Kubernetes or Slurm "
        f"(port {DEFAULT_COORDINATOR_PORT}, or auto:PORT)",
    ),
    flag(
        "--coordinator-token",
        default=None,
        metavar="SECRET",
        help=f"the shards' shared secret (or --coordinator-token-file, or ${TOKEN_VAR}): "
        "the coordinator answers nothing without it",
    ),
    flag(
        "--coordinator-token-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="a file holding the shards' shared secret (e.g. a mounted Kubernetes Secret)",
    ),
    flag(
        "--coordinator-wait",
        type=parse_coordinator_wait,
        default=default_of(ProcessSpec, "coordinator_wait_s"),
        metavar="SECONDS",
        help="how long a shard waits for the coordinator to listen and for every shard to join",
        fills="coordinator_wait_s",
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


def _check_coordinator(processes: ProcessSpec) -> None:
    _check(
        0 < processes.coordinator_port < 65536,
        f"--coordinator: port {processes.coordinator_port} is not in 1..65535",
    )
    _check(
        math.isfinite(processes.coordinator_wait_s) and processes.coordinator_wait_s > 0,
        f"--coordinator-wait {processes.coordinator_wait_s}: must be a finite number of "
        "seconds > 0",
    )
    if processes.coordinator_host is None:
        return
    _check(
        processes.shard_count > 1,
        "--coordinator lines up the shards of a --shard I/N run: use it with --shard",
    )
    _check(
        processes.shard_sync is None,
        "--coordinator and --shard-sync exclude each other: the coordinator starts the "
        "points together itself",
    )
    _check(
        bool(processes.coordinator_token),
        "--coordinator needs the shards' shared secret: --coordinator-token, "
        f"--coordinator-token-file or ${TOKEN_VAR}",
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
    _check_coordinator(processes)
    _check_affinity(processes)


def _shard(text: str, env: Mapping[str, str]) -> tuple[Placement | None, dict[str, Any]]:
    if text.strip() != "auto":
        index, count = parse_shard(text)
        return None, {"shard_index": index, "shard_count": count, "shard_source": "flag"}
    found = placement(env)
    return found, {
        "shard_index": found.index,
        "shard_count": found.count,
        "shard_source": found.source,
    }


def _coordinator(text: str, found: Placement | None) -> dict[str, Any]:
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = text.strip(), str(DEFAULT_COORDINATOR_PORT)
    try:
        port = int(port_text)
    except ValueError:
        raise SpecError(f"--coordinator {text!r}: expected HOST:PORT or auto[:PORT]") from None
    if host == "auto":
        if found is None or found.coordinator_host is None:
            raise SpecError(
                "--coordinator auto: needs --shard auto under Kubernetes (with "
                "$LOADGEN_SUBDOMAIN, or a JobSet) or Slurm, which name shard 0's host; "
                "give --coordinator HOST:PORT"
            )
        host = found.coordinator_host
    if not host:
        raise SpecError(f"--coordinator {text!r}: no host; expected HOST:PORT or auto[:PORT]")
    return {"coordinator_host": host.strip("[]"), "coordinator_port": port}


def _token(values: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    if values.coordinator_token_file is not None:
        try:
            text = Path(values.coordinator_token_file).read_text().strip()
        except OSError as exc:
            raise SpecError(
                f"--coordinator-token-file {values.coordinator_token_file}: cannot read it "
                f"({exc.strerror or exc})"
            ) from None
        return text or None
    token = values.coordinator_token or env.get(TOKEN_VAR)
    return token.strip() or None if token else None


def derive(values: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    """The shard (--shard I/N or auto, from the scheduler's variables), the coordinator's
    address (auto: shard 0's host as the scheduler names it) and the shared secret."""
    found, settings = _shard(values.shard, env)
    if values.coordinator is not None:
        settings.update(_coordinator(values.coordinator, found))
        settings["coordinator_token"] = _token(values, env)
    return settings
