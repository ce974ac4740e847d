"""Work bounded before it is built, through the real CLI (issue 36, item 1): every option
that sizes a run's work has a limit, checked before anything starts, and a value past it
is one line naming the option and the limit, exit 2, never a MemoryError,
OverflowError or RecursionError.

Each process runs under an address-space limit: before the limits, the first cases grew
until the machine ran out (a MemoryError here, within seconds)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.config.limits import (
    MAX_POINT_SECONDS,
    MAX_REQUESTS_PER_POINT,
    MAX_TURNS,
    MIN_SERIES_SECONDS,
    MIN_SLICE_SECONDS,
)
from loadgen.config.load import point_memory_bytes
from loadgen.config.spec import RunSpec
from tests.support.inferencex import replay_cmd
from tests.support.procs import one_error_line, run_loadgen

ADDRESS_SPACE = 3 << 30
QUICK = ["--conc", "1", "--isl", "64", "--osl", "8", "--encoder", "raw", "--no-progress"]
NOWHERE = ["--base-url", "http://127.0.0.1:9", "--model", "m"]  # never reached


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def refused(args: list[str], tmp_path: Path) -> str:
    """The one error line of a command that must be refused before it starts."""
    done = run_loadgen(
        [*args, "--results", str(tmp_path / "results")], timeout=120, preexec_fn=_limit_memory
    )
    assert done.returncode == 2, done.stderr[-2000:]
    for name in ("MemoryError", "OverflowError", "RecursionError"):
        assert name not in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "results").exists()  # refused before any file was written
    return one_error_line(done.stderr)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (  # the sidecar's 90-byte request, on the command line (against the simulator)
            ["--sim", *QUICK, "--prompts-per-conc", "100000000"],
            ["--prompts-per-conc 100000000", f"{MAX_REQUESTS_PER_POINT:,} requests per point"],
        ),
        (
            ["--sim", *QUICK, "--num-prompts", "1000000000000000"],
            ["--num-prompts 1000000000000000", f"{MAX_REQUESTS_PER_POINT:,}"],
        ),
        (
            ["--sim", *QUICK, "--rate-stages", "1000000@1000000s"],
            ["--rate-stages", f"at most {MAX_POINT_SECONDS:g} seconds (7 days)"],
        ),
        (
            ["--sim", *QUICK, "--rate-stages", "1e200@1e200s"],
            ["--rate-stages", "0.001..1e+06 requests/s"],
        ),
        (
            ["--sim", *QUICK, "--request-rate", "1e-300"],
            ["--request-rate 1e-300", "0.001..1e+06 requests/s"],
        ),
        (  # sessions of a billion turns
            ["--sim", *QUICK, "--turns", "1000000000"],
            ["--turns 1000000000", f"at most {MAX_TURNS:,} turns"],
        ),
        (
            [*QUICK, *NOWHERE, "--request-rate", "1", "--burstiness", "1e-300"],
            ["--burstiness 1e-300", "0.001..1000"],
        ),
        (
            [*QUICK, *NOWHERE, "--request-timeout", "1e300"],
            ["--request-timeout 1e+300", "at most"],
        ),
        (
            [*QUICK, *NOWHERE, "--slice-duration", "0.0001"],
            ["--slice-duration 0.0001", f"at least {MIN_SLICE_SECONDS:g} seconds"],
        ),
        (  # the count is fine, the memory is not: the estimate names both
            [*QUICK[:6], *NOWHERE, "--conc", "4096", "--isl", "131072", "--osl", "8192"],
            ["conc 4096", "GiB in memory", "half this machine's memory"],
        ),
    ],
)
def test_past_a_limit_is_one_line_exit_2(args: list[str], words: list[str], tmp_path: Path) -> None:
    line = refused(args, tmp_path)
    assert all(word in line for word in words), line


def test_a_deeply_nested_golden_file_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"  # 40 KB: under the size bound, 20,000 levels deep
    deep.write_text("m:\n  thinking_on: " + "[" * 20_000 + "]" * 20_000 + "\n")
    line = refused([*QUICK, *NOWHERE, "--golden-al", str(deep)], tmp_path)
    assert f"--golden-al {deep}: nested more than 8 levels deep" in line


def test_profile_slices_faster_than_the_scrape_bound_are_refused(tmp_path: Path) -> None:
    """`loadgen profile --slice-duration` is the server series' scrape interval."""
    args = replay_cmd(9, tmp_path, 4, "--unsafe-override", "--slice-duration", "0.0001")
    done = run_loadgen(args, timeout=120, preexec_fn=_limit_memory)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if "error:" in line]
    assert f"--slice-duration 0.0001: must be at least {MIN_SERIES_SECONDS:g} seconds" in line
    assert not (tmp_path / "aiperf_artifacts").exists()


def test_the_limits_leave_real_runs_alone(tmp_path: Path) -> None:
    """InferenceX's largest points and a long soak are well inside: the estimate of a
    conc-4096 x 10 point of isl 8192 / osl 1024 is under 7.5 GiB, a conc-512 one under 1;
    a 100,000-request soak passes on any machine of 6 GB or more."""
    flat = {"isl": 8192, "osl": 1024, "base_url": "http://x", "results_dir": tmp_path}
    big = RunSpec.flat(conc=(4, 512), **flat).load
    assert point_memory_bytes(big, 4096, 8192, 1024) < 7.5 * 2**30
    assert point_memory_bytes(big, 512, 8192, 1024) < 1 << 30
    # a 100,000-request soak and a day's stage (4 KB prompts, ~2.8 and ~0.1 GiB)
    flat.update(isl=1024, osl=256)
    soak = RunSpec.flat(conc=(256,), num_prompts=100_000, request_rate=500.0, **flat)
    assert soak.load.measured_requests(256) == 100_000
    staged = RunSpec.flat(conc=(64,), rate_stages=((0.05, 86_400.0),), **flat)
    assert staged.load.point_duration_s == 86_400.0


# Builds one point in a fresh process and prints its RSS growth and the estimate's.
MEASURE = """
import sys
from pathlib import Path
import numpy as np
from loadgen.config.limits import RECORD_BYTES_PER_TOKEN
from loadgen.config.load import point_memory_bytes
from loadgen.config.spec import RunSpec
from loadgen.run.probe import body_options
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.plan import Workload

isl, encoder, per_conc = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
spec = RunSpec.flat(conc=(8,), isl=isl, osl=8, encoder=encoder, prompts_per_conc=per_conc,
                    base_url="http://x", results_dir=Path(sys.argv[4]))
workload = Workload(spec, load_tokenizer(), body_options(spec))
workload.requests(2, np.random.default_rng(0))  # the synthesis's own tables loaded

def rss():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096

before = rss()
plan = workload.point(8)
requests = len(plan.measured) + len(plan.warmup)
records = requests * RECORD_BYTES_PER_TOKEN * 8
print(requests, rss() - before, point_memory_bytes(spec.load, 8, isl, 8) - records)
"""


@pytest.mark.parametrize(
    ("isl", "encoder", "per_conc"), [(1024, "dsv4", 400), (8192, "dsv4", 60), (8192, "raw", 60)]
)
def test_the_estimate_holds_a_built_point(
    isl: int, encoder: str, per_conc: int, tmp_path: Path
) -> None:
    """The estimate's share for the requests is above the memory a real point's requests
    take (RSS grown while one is built; records are not in it)."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(isl), encoder, str(per_conc), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    requests, grown, estimate = (int(v) for v in done.stdout.split())
    assert requests == 8 * (per_conc + 2)
    assert grown > requests * isl  # the bodies were built: a few bytes a token at least
    assert grown < estimate, (grown / requests, estimate / requests)


def test_kept_outputs_are_in_the_memory_estimate(tmp_path: Path) -> None:
    """--record-outputs keeps every output until the point is written: a point that fits
    without it is refused with it, when the outputs take it past this machine's share."""
    from loadgen.config import limits
    from loadgen.config.build_spec import memory_budget

    osl = 1_000_000  # the outputs dominate the estimate
    with_outputs = limits.point_memory_bytes(1, 8, osl, record_outputs=True)
    requests = memory_budget() // with_outputs + 1  # just past the share with outputs
    assert limits.point_memory_bytes(requests, 8, osl) <= memory_budget()  # fits without
    args = [
        *NOWHERE,
        "--conc",
        "1",
        "--isl",
        "8",
        "--osl",
        str(osl),
        "--encoder",
        "raw",
        "--no-progress",
        "--prompts-per-conc",
        str(requests),
        "--warmup-per-conc",
        "0",
    ]
    line = refused([*args, "--record-outputs"], tmp_path)
    assert f"its {requests:,} requests of isl 8 / osl {osl} with their outputs kept" in line
    assert "drop --record-outputs" in line
    plain = run_loadgen(
        [*args, "--results", str(tmp_path / "plain")], timeout=120, preexec_fn=_limit_memory
    )
    assert "would hold" not in plain.stderr, plain.stderr[-2000:]
