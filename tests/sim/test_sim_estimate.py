"""What a --sim sweep costs: the step model's estimate against the simulator itself.

The headline figures are measurements on this machine recorded in issue 26 (`--sim
--conc 4..512 --isl 8192 --osl 1024`: conc 4 took 26 s, conc 128 310 s, about 45 min in
all, output levelling off near 5.1k tok/s); the small sweep is measured here, by a real
`python -m loadgen --sim`, and compared with the estimate it printed.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from loadgen.run.embedded_sim import simulator_argv
from loadgen.sim.estimate import point_seconds, running_batch
from loadgen.sim.parser import build_parser, config_from_args
from tests.support.procs import run_loadgen

EMBEDDED = config_from_args(build_parser().parse_args(simulator_argv(0, ())[4:]))


def test_the_headline_sweep_estimate_matches_what_was_measured() -> None:
    each = {
        conc: point_seconds(EMBEDDED, conc, 12 * conc, 8192, 1024)
        for conc in (4, 8, 16, 32, 64, 128, 256, 512)
    }
    assert each[4] == pytest.approx(26, rel=0.1)
    assert each[128] == pytest.approx(310, rel=0.1)
    assert sum(each.values()) / 60 == pytest.approx(45, rel=0.1)
    batch = running_batch(EMBEDDED, 512, 8192, 1024)
    assert batch == 113  # the KV cache holds 113 of them: the plateau
    assert batch * 12 * 1024 / (
        point_seconds(EMBEDDED, 512, batch * 12, 8192, 1024)
    ) == pytest.approx(5100, rel=0.05)


@pytest.mark.exclusive
def test_a_sim_run_prints_its_estimate_and_takes_about_that(tmp_path: Path) -> None:
    """Subject: each point's wall time against the step model's estimate (within
    0.7x-1.6x); both are printed, run alone, as another test's load would slow the run."""
    sim = "--step-fixed-ms 4"
    done = run_loadgen(
        [
            "--sim",
            "--conc",
            "1,4",
            "--isl",
            "48",
            "--osl",
            "200",
            "--encoder",
            "raw",
            "--prompts-per-conc",
            "4",
            "--warmup-per-conc",
            "0",
            "--no-progress",
            "--results",
            str(tmp_path),
            "--sim-args",
            sim,
        ]
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "step model puts" in line]
    assert len(said) == 1 and re.search(r"\(conc 1 ~\d+ s, 4 ~\d+ s\)", said[0]), said
    config = config_from_args(build_parser().parse_args(simulator_argv(0, sim.split())[4:]))
    for conc in (1, 4):
        measured = orjson.loads((tmp_path / f"conc_{conc}.json").read_bytes())["duration"]
        estimate = point_seconds(config, conc, 4 * conc, 48, 200)
        print(f"sim estimate: conc {conc} took {measured:.2f} s, estimated {estimate:.2f} s")
        assert 0.7 * estimate < measured < 1.6 * estimate, (conc, measured, estimate)
