"""Does a long point at high concurrency hold? (a 5- or 10-minute soak)

Runs one `loadgen --sim --conc 256 --duration 300` point as a real CLI process, and
every --interval seconds prints, for the client (the loadgen process, and with
--workers N its worker processes, summed; `procs` says how many were found):

  RSS        resident memory, MB (VmRSS), and its growth since the first sample
  fds        open file descriptors (/proc/PID/fd): should stay flat (one per connection)
  CPU        the client's CPU over the interval, as a share of one core
  us/chunk   that CPU over the chunks of the requests that finished in the interval
             (requests end in waves of --conc, so this swings from one interval to the
             next; the point's own client_cpu_per_chunk_us, printed at the end, is exact)
  req, ok    requests finished so far, and how many of them without error

(the simulator, loadgen's child, is left out: its cost is the server's). At the end it
prints the point's own figures from conc_256.json: requests ok, loop-lag p99, client CPU
per chunk, the simulator's lateness, and the RSS growth per 1,000 kept records (the
records a point keeps in memory until it is summarized are what RSS may grow by).

    .venv/bin/python bench/soak.py                          # the 5-minute soak
    .venv/bin/python bench/soak.py --duration 60 --interval 5
    # 10 minutes, two worker processes, with and without GPU exporters (the simulator's
    # /gpu/metrics), one after the other in the same sitting: TTFT p99 side by side
    .venv/bin/python bench/soak.py --duration 600 --workers 2 --gpu-metrics both

Figures on a shared 2-core machine are noisy (the simulator and the client share it).
A 60 s run here (2 cores shared with other work; isl 1024, osl 256): 1,592 requests all
ok, 180k chunks, RSS 277.2 -> 279.4 MB over the point, fds 272 throughout, client CPU
24.7 us per chunk (7-9% of a core), loop lag p99 0.14 ms; the simulator itself fell
behind (7 warnings, up to 628 ms), which the point records.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import orjson

TICKS = os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ProcessLookupError(pid)  # a zombie has no VmRSS: the process has ended


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def client_pids(parent: int) -> list[int]:
    """loadgen and its worker processes: its children, less the simulator (its cost is
    the server's)."""
    pids = [parent]
    for task in Path(f"/proc/{parent}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"sim" not in argv:
                pids.append(int(child))
    return pids


def summed(measure: Any, pids: list[int]) -> Any:
    total = 0
    for pid in pids:
        try:
            total += measure(pid)
        except (FileNotFoundError, ProcessLookupError):
            if pid == pids[0]:
                raise
    return total


def cpu_seconds(pid: int) -> float:
    # fields after the command name (which may hold spaces): utime is 14th, stime 15th
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Records:
    """requests_conc_N.jsonl read as it grows: requests, ok ones, chunks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: IO[bytes] | None = None
        self.pending = b""
        self.requests = self.ok = self.chunks = 0

    def read(self) -> None:
        if self.file is None:
            if not self.path.exists():
                return
            self.file = open(self.path, "rb")  # noqa: SIM115 - held open while it grows
        data = self.pending + self.file.read()
        *lines, self.pending = data.split(b"\n")
        for line in lines:
            record = orjson.loads(line)
            self.requests += 1
            self.ok += record.get("error") is None
            self.chunks += len(record.get("chunk_ns") or ())


def prompts_per_conc(args: argparse.Namespace) -> int:
    """Enough requests to outlast --duration (twice what the step model says it takes),
    and no more: every planned prompt is built before the point starts."""
    from loadgen.run.embedded_sim import simulator_argv
    from loadgen.sim.estimate import point_seconds
    from loadgen.sim.parser import build_parser, config_from_args

    config = config_from_args(build_parser().parse_args(simulator_argv(0, ())[4:]))
    wave = point_seconds(config, args.conc, args.conc, args.isl, args.osl)
    return max(2, math.ceil(2 * float(args.duration) / wave))


def soak(args: argparse.Namespace, results: Path, *, exporters: bool) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "loadgen",
        "--sim",
        "--conc",
        str(args.conc),
        "--isl",
        str(args.isl),
        "--osl",
        str(args.osl),
        "--encoder",
        "raw",
        "--duration",
        str(args.duration),
        "--prompts-per-conc",
        str(prompts_per_conc(args)),
        "--warmup-per-conc",
        "1",
        "--no-progress",
        "--results",
        str(results),
        *(["--workers", str(args.workers)] if args.workers > 1 else []),
        *(["--gpu-metrics", "sim"] if exporters else []),
    ]
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    records = Records(results / f"requests_conc_{args.conc}.jsonl")
    print(
        f"{'t s':>6} {'req':>7} {'ok':>7} {'procs':>5} {'RSS MB':>8} {'growth':>7} {'fds':>5} "
        f"{'CPU':>5} {'us/chunk':>9}"
    )
    start = time.monotonic()
    first_rss: float | None = None
    last_cpu, last_chunks = cpu_seconds(process.pid), 0
    samples: list[tuple[float, float, int]] = []
    while process.poll() is None:
        time.sleep(args.interval)
        try:
            pids = client_pids(process.pid)
            rss, fds = summed(rss_mb, pids), summed(open_fds, pids)
            cpu = summed(cpu_seconds, pids)
        except (FileNotFoundError, ProcessLookupError):
            break  # it just ended
        records.read()
        if (results / f"conc_{args.conc}.json").exists():
            break  # the point is over: what follows is its summary and the teardown
        if records.requests == 0:  # still warming up: the baseline starts with the point
            last_cpu = cpu
            continue
        first_rss = rss if first_rss is None else first_rss
        chunks = records.chunks - last_chunks
        per_chunk = f"{(cpu - last_cpu) / chunks * 1e6:9.1f}" if chunks else f"{'-':>9}"
        print(
            f"{time.monotonic() - start:6.0f} {records.requests:7,} {records.ok:7,} "
            f"{len(pids):5} {rss:8.1f} {rss - first_rss:+7.1f} {fds:5} "
            f"{(cpu - last_cpu) / args.interval:5.0%} {per_chunk}",
            flush=True,
        )
        samples.append((rss, cpu, fds))
        last_cpu, last_chunks = cpu, records.chunks
    _, err = process.communicate(timeout=120)
    if process.returncode != 0:
        raise SystemExit(f"loadgen exited {process.returncode}: {err.decode()[-2000:]}")
    records.read()
    point = orjson.loads((results / f"conc_{args.conc}.json").read_bytes())
    return {"point": point, "samples": samples, "records": records}


def report(outcome: dict[str, Any]) -> None:
    point, samples = outcome["point"], outcome["samples"]
    if not samples:
        print("no samples (the point ended before the first interval)")
        return
    lost = outcome["records"].requests - point["completed"] - point["failed"]
    rss = [s[0] for s in samples]
    fds = [s[2] for s in samples]
    growth = rss[-1] - rss[0]
    kept = outcome["records"].requests
    print(
        f"\nrequests {point['num_prompts']:,}: ok {point['completed']:,}, failed "
        f"{point['failed']:,}; duration {point['duration']:.1f} s; "
        f"{point['total_chunks']:,} chunks; request lines on disk {outcome['records'].requests:,} "
        f"({'none lost' if lost == 0 else f'{lost:+,} against the point'})"
    )
    print(
        f"TTFT p99 {point['p99_ttft_ms']:.1f} ms, ITL p99 {point['p99_itl_ms']:.1f} ms; "
        f"energy per output token {point.get('joules_per_output_token')} J"
    )
    print(
        f"RSS {rss[0]:.1f} -> {rss[-1]:.1f} MB ({growth:+.1f} MB; "
        f"{growth / max(kept, 1) * 1000:.2f} MB per 1,000 kept records); "
        f"fds {min(fds)}..{max(fds)}"
    )
    print(
        f"client CPU per chunk {point['client_cpu_per_chunk_us']} us; loop lag p99 "
        f"{point['client_loop_lag_p99_ms']} ms, max {point['client_loop_lag_max_ms']} ms; "
        f"simulator behind: {point.get('simulator_behind_warnings')} warnings, max "
        f"{point.get('simulator_behind_max_ms')} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0, help="seconds (default 300)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--conc", type=int, default=256)
    parser.add_argument("--isl", type=int, default=1024)
    parser.add_argument("--osl", type=int, default=256)
    parser.add_argument("--workers", type=int, default=1, help="loadgen --workers")
    parser.add_argument(
        "--gpu-metrics",
        choices=("off", "on", "both"),
        default="off",
        help="sample the simulator's GPU exporter (--gpu-metrics sim); both: a run without, "
        "then one with, and their TTFT p99 side by side",
    )
    args = parser.parse_args()
    runs = {"off": (False,), "on": (True,), "both": (False, True)}[args.gpu_metrics]
    p99: dict[bool, float] = {}
    for exporters in runs:
        print(f"\n== {'with' if exporters else 'without'} GPU exporters")
        with tempfile.TemporaryDirectory(prefix="loadgen-soak-") as tmp:
            outcome = soak(args, Path(tmp) / "results", exporters=exporters)
            report(outcome)
            p99[exporters] = outcome["point"]["p99_ttft_ms"]
    if len(p99) == 2:
        print(
            f"\nTTFT p99 without exporters {p99[False]:.1f} ms, with {p99[True]:.1f} ms "
            f"({p99[True] / p99[False] - 1:+.1%})"
        )


if __name__ == "__main__":
    main()
