"""Bad input is one line and exit 2, never a traceback (real CLI processes; a real
simulator is up, so nothing is refused merely because no server answers)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loadgen.config.spec import MAX_CONVERSATION_BYTES, MAX_SEED
from tests.support.procs import SMALL, free_port, one_error_line, run_loadgen, start_sim, stop


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    sim = start_sim(port, tmp_path_factory.mktemp("sim") / "sim.log")
    yield f"http://127.0.0.1:{port}"
    stop(sim)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory this process cannot write: a read-only tmpfs for root (who ignores
    permission bits), mode 0555 for anyone else."""
    where = tmp_path / "ro"
    where.mkdir()
    if os.geteuid() != 0:
        where.chmod(0o555)
        yield where
        where.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"root, and cannot mount a read-only tmpfs: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def _refused(url: str, tmp_path: Path, *args: str, timeout: float = 120) -> str:
    """Run the CLI, assert exit 2 with one line, return the line (one that runs past
    `timeout`, a hang guard, fails)."""
    has_results = "--results" in args or "--resume" in args
    results = [] if has_results else ["--results", str(tmp_path / "r")]
    done = run_loadgen(
        ["--base-url", url, "--conc", "2", *SMALL, "--prompts-per-conc", "1", *results, *args],
        timeout=timeout,
    )
    assert done.returncode == 2, done.stderr
    return one_error_line(done.stderr)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--duration", "inf"], "--duration inf: must be a finite number"),
        (["--duration", "nan"], "--duration nan: must be a finite number"),
        (["--request-rate", "5", "--burstiness", "inf"], "--burstiness inf: must be a finite"),
        (["--temperature", "inf"], "--temperature inf: must be a finite number"),
        (["--seed", "9" * 24], f"must be in 0..{MAX_SEED}"),
        (["--seed", "-1"], f"must be in 0..{MAX_SEED}"),
        (["--slo", "ttft=" + "9" * 400], "--slo: each limit must be a finite duration"),
        (["--server-pid", "2147483647"], "no such process"),
    ],
)
def test_non_finite_and_out_of_range_values(
    sim_url: str, tmp_path: Path, args: list[str], says: str
) -> None:
    assert says in _refused(sim_url, tmp_path, *args)


def test_results_naming_a_file(sim_url: str, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    line = _refused(sim_url, tmp_path, "--results", str(tmp_path / "afile"))
    assert "is a file; give a directory" in line
    line = _refused(sim_url, tmp_path, "--results", str(tmp_path / "afile" / "sub"))
    assert "which is a file" in line


def test_results_in_a_read_only_directory(
    sim_url: str, tmp_path: Path, read_only_dir: Path
) -> None:
    assert "not writable" in _refused(sim_url, tmp_path, "--results", str(read_only_dir))
    line = _refused(sim_url, tmp_path, "--results", str(read_only_dir / "a" / "b"))
    assert "not writable" in line and f"({read_only_dir} is where it would be created)" in line


def test_resume_mistakes(sim_url: str, tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    assert "no run.json there" in _refused(sim_url, tmp_path, "--resume", str(nowhere))
    assert not nowhere.exists()  # refused without creating anything
    assert "exclude each other" in _refused(
        sim_url, tmp_path, "--resume", str(nowhere), "--overwrite"
    )


def test_a_giant_conversation_is_refused_before_it_is_tokenized(
    sim_url: str, tmp_path: Path
) -> None:
    dataset = tmp_path / "big.jsonl"
    content = "word " * (MAX_CONVERSATION_BYTES // 5 + 1000)
    dataset.write_bytes(
        orjson.dumps([{"role": "user", "content": "hi"}])
        + b"\n"
        + orjson.dumps([{"role": "user", "content": content}])
        + b"\n"
    )
    # a hang guard: tokenizing it would take minutes; the line says it was refused unread
    line = _refused(sim_url, tmp_path, "--dataset", str(dataset), timeout=60)
    assert f"--dataset {dataset}:2: the conversation is over 4 MiB" in line


def test_an_oversized_dataset_file_is_refused_by_its_size(sim_url: str, tmp_path: Path) -> None:
    dataset = tmp_path / "huge.jsonl"
    with open(dataset, "wb") as fh:
        fh.truncate((1 << 30) + 1)  # sparse: no disk used
    assert "over the 1 GiB limit" in _refused(sim_url, tmp_path, "--dataset", str(dataset))


def test_help_states_the_dataset_limits() -> None:
    done = run_loadgen(["--help"], timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "at most 1 GiB, each line at most 4 MiB" in text
