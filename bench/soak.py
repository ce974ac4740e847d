"""Does a long point at high concurrency hold? (issue 26, "Done when": a 5-minute soak)

Runs one `loadgen --sim --conc 256 --duration 300` point as a real CLI process, and
every --interval seconds prints, for the loadgen process (the client):

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


def soak(args: argparse.Namespace, results: Path) -> dict[str, Any]:
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
    ]
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    records = Records(results / f"requests_conc_{args.conc}.jsonl")
    print(
        f"{'t s':>6} {'req':>7} {'ok':>7} {'RSS MB':>8} {'growth':>7} {'fds':>5} "
        f"{'CPU':>5} {'us/chunk':>9}"
    )
    start = time.monotonic()
    first_rss: float | None = None
    last_cpu, last_chunks = cpu_seconds(process.pid), 0
    samples: list[tuple[float, float, int]] = []
    while process.poll() is None:
        time.sleep(args.interval)
        try:
            rss, fds, cpu = rss_mb(process.pid), open_fds(process.pid), cpu_seconds(process.pid)
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
            f"{rss:8.1f} {rss - first_rss:+7.1f} {fds:5} "
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
    rss = [s[0] for s in samples]
    fds = [s[2] for s in samples]
    growth = rss[-1] - rss[0]
    kept = outcome["records"].requests
    print(
        f"\nrequests {point['num_prompts']:,}: ok {point['completed']:,}, failed "
        f"{point['failed']:,}; duration {point['duration']:.1f} s; "
        f"{point['total_chunks']:,} chunks"
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loadgen-soak-") as tmp:
        report(soak(args, Path(tmp) / "results"))


if __name__ == "__main__":
    main()
