"""`--trials --resume` pools the complete trials it finds without measuring them again:
a trial file put there from another run (or another trial's requests beside its point)
was pooled silently. Now it is refused: exit 2, one line naming the file, every file left
where it is. Real CLI processes, a real `loadgen sim`, a real SIGINT mid-trial."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.procs import lines_in, loadgen, run_loadgen, simulator, wait_until

ARGS = [
    *("--conc", "2", "--isl", "64", "--osl", "100", "--prompts-per-conc", "20"),
    *("--encoder", "raw", "--no-progress", "--warmup-per-conc", "0", "--trials", "3"),
]


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with simulator(tmp_path_factory.mktemp("sim") / "sim.log") as url:
        yield url


@pytest.fixture(scope="module")
def other_run(sim_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another run with the very same settings, measured to its end."""
    results = tmp_path_factory.mktemp("other") / "r"
    done = run_loadgen(["--base-url", sim_url, *ARGS, "--results", str(results)])
    assert done.returncode == 0, done.stderr
    return results


def stopped_in_trial_2(sim_url: str, results: Path) -> None:
    process = loadgen(["--base-url", sim_url, *ARGS, "--results", str(results)])
    try:
        second = results / "requests_conc_2_trial_2.jsonl"
        wait_until(lambda: lines_in(second) >= 2, 120, "trial 2's first records")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr


@pytest.mark.parametrize("swapped", ["both", "requests"])
def test_a_trial_from_elsewhere_is_not_pooled(
    sim_url: str, other_run: Path, tmp_path: Path, swapped: str
) -> None:
    results = tmp_path / "r"
    stopped_in_trial_2(sim_url, results)
    names = ["requests_conc_2_trial_1.jsonl"]
    if swapped == "both":
        names.append("conc_2_trial_1.json")
    for name in names:
        shutil.copyfile(other_run / name, results / name)
    resumed = run_loadgen(["--base-url", sim_url, *ARGS, "--resume", str(results)])
    assert resumed.returncode == 2, resumed.stderr
    assert "Traceback" not in resumed.stderr
    expected = {
        "both": "is not an attempt of the run being resumed",
        "requests": "its requests do not match requests_conc_2_trial_1.jsonl",
    }[swapped]
    assert expected in resumed.stderr, resumed.stderr
    assert "conc_2_trial_1.json" in resumed.stderr
    assert not (results / "conc_2.json").exists()  # nothing pooled
    for name in names:  # the files stay as they are
        assert (results / name).read_bytes() == (other_run / name).read_bytes()
