"""`loadgen compare A B --verdict` on real runs of the embedded simulator: verdict.json
typed and written, a build whose engine steps cost 1.5x judged worse, runs of different
workloads refused with what differs, too few requests said and not judged."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from loadgen.metrics.verdict import Verdict, VerdictRow
from tests.support.procs import one_error_line, run_loadgen

STEP = "--step-fixed-ms 1 --decode-token-us 40"
SLOW = "--step-fixed-ms 1.5 --decode-token-us 60"
# The sweep-file test is about the file the lanes' verdict lands in, not about power:
# its slower lane's steps cost 3x, so that the step model, not a busy machine's share
# of the cores (a suite run: throughput +50 % slower judged no_difference), sets its pace.
SLOWER = "--step-fixed-ms 3 --decode-token-us 120"


def measure(results: Path, seed: int, sim: str, *extra: str) -> None:
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            f"--seed {seed} {sim}",
            "--seed",
            str(seed),
            "--isl",
            "32",
            "--osl",
            "32",
            "--encoder",
            "raw",
            "--no-progress",
            "--results",
            str(results),
            *extra,
        ]
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("verdict")
    made = {name: root / name for name in ("a", "slow", "longer", "few")}
    measure(made["a"], 1, STEP, "--conc", "8")
    measure(made["slow"], 2, SLOW, "--conc", "8")
    measure(made["longer"], 3, STEP, "--conc", "8", "--isl", "48")
    measure(made["few"], 4, STEP, "--conc", "8", "--prompts-per-conc", "2")
    return made


def test_a_slower_build_is_worse_and_the_file_is_typed(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "verdict.json"
    done = run_loadgen(["compare", str(runs["a"]), str(runs["slow"]), "--verdict", str(out)])
    assert done.returncode == 0, done.stderr
    rows = msgspec.json.decode(out.read_bytes(), type=list[VerdictRow])
    by = {r.metric: r for r in rows}
    assert {"output_throughput", "p50_tpot_ms", "p50_itl_ms", "p99_itl_ms"} <= set(by)
    assert all(r.conc == 8 and r.baseline == "a" and r.run == "slow" for r in rows)
    assert by["p50_tpot_ms"].verdict is Verdict.WORSE
    assert by["output_throughput"].verdict is Verdict.WORSE
    assert by["p50_tpot_ms"].effect is not None and by["p50_tpot_ms"].effect > 0.2
    assert by["p50_tpot_ms"].run_to_run == "assumed"  # one trial a side
    # 80 requests: a p99 per request has 0.8 samples beyond it, said and not judged
    assert by["p99_ttft_ms"].verdict is None and "at least 500" in (by["p99_ttft_ms"].reason or "")
    assert "slow vs a  conc 8" in done.stdout and "worse" in done.stdout
    assert "conc 8, slow: one trial a side" in done.stdout  # what that costs is said


def test_an_assumed_run_noise_is_said_and_a_bad_one_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "verdict.json"
    args = ["compare", str(runs["a"]), str(runs["slow"]), "--verdict", str(out)]
    done = run_loadgen([*args, "--verdict-run-noise", "output_throughput=0.03,p50_tpot_ms=0.5"])
    assert done.returncode == 0, done.stderr
    by = {r.metric: r for r in msgspec.json.decode(out.read_bytes(), type=list[VerdictRow])}
    assert by["output_throughput"].run_noise == 0.03 and by["p50_tpot_ms"].run_noise == 0.5
    assert by["p50_tpot_ms"].run_to_run == "assumed"
    # a +50 % step cost is inside runs assumed to differ by 50 %: no verdict of worse
    assert by["p50_tpot_ms"].verdict is Verdict.NO_DIFFERENCE
    assert "output_throughput 3.0%" in done.stdout and "--verdict-run-noise" in done.stdout
    # 0: nothing assumed, the runs' own intervals, each such metric named
    bare = run_loadgen([*args, "--verdict-run-noise", "0"])
    assert bare.returncode == 0, bare.stderr
    rows = msgspec.json.decode(out.read_bytes(), type=list[VerdictRow])
    assert all(r.run_to_run == "not_measured" for r in rows if r.verdict is not None)
    assert "the intervals of output_throughput, p50_ttft_ms" in bare.stdout
    for bad, said in (("2", "a fraction in [0, 1)"), ("tpot=0.1", "METRIC one of")):
        refused = run_loadgen([*args, "--verdict-run-noise", bad])
        assert refused.returncode == 2 and said in refused.stderr


def test_different_workloads_are_refused_naming_what_differs(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "verdict.json"
    done = run_loadgen(["compare", str(runs["a"]), str(runs["longer"]), "--verdict", str(out)])
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert "--verdict refused" in line and "isl 32 (a) vs 48 (longer)" in line
    assert not out.exists()


def test_too_few_requests_get_no_verdict(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "verdict.json"
    done = run_loadgen(["compare", str(runs["a"]), str(runs["few"]), "--verdict", str(out)])
    assert done.returncode == 0, done.stderr
    rows = msgspec.json.decode(out.read_bytes(), type=list[VerdictRow])
    assert rows and all(r.verdict is None and r.effect is None for r in rows)
    assert all("too few requests" in (r.reason or "") for r in rows)
    assert "no verdict: too few requests" in done.stdout


def test_a_sweep_file_with_verdict_writes_it_in_its_tree(tmp_path: Path) -> None:
    sweep = tmp_path / "ab.yaml"
    tree = tmp_path / "tree"
    sweep.write_text(
        f"""
results: {tree}
conc: 8
verdict: true
workload: {{isl: 32, osl: 32, encoder: raw}}
lanes:
  - name: base
    target: {{sim: true, sim-args: "{STEP}"}}
  - name: slower
    target: {{sim: true, sim-args: "{SLOWER}"}}
"""
    )
    done = run_loadgen(["--config", str(sweep), "--no-progress"])
    assert done.returncode == 0, done.stderr
    rows = msgspec.json.decode((tree / "verdict.json").read_bytes(), type=list[VerdictRow])
    by = {r.metric: r for r in rows}
    assert all(r.baseline == "base" and r.run == "slower" and r.conc == 8 for r in rows)
    assert by["p50_tpot_ms"].verdict is Verdict.WORSE
    assert "slower vs base  conc 8" in done.stdout


def test_one_run_with_verdict_is_refused(tmp_path: Path) -> None:
    done = run_loadgen(["--sim", "--conc", "1", "--isl", "8", "--osl", "4", "--verdict"])
    assert done.returncode == 2
    assert "--verdict judges a sweep file's lanes" in one_error_line(done.stderr)
