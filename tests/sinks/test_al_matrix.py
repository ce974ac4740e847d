"""examples/al-matrix.yaml (lanes = K x thinking mode, one simulator per K) runs end to end
on the SPEED-Bench-shaped fixture, and its tree's al_matrix.yaml is InferenceX's golden-file
shape: our own --golden-al reader reads it back, with the lanes' measured ALs.

Sampling bound: each K's simulator is forced to InferenceX's deepseek-v4-pro thinking_on
value (vLLM's synthetic schedule). A lane here has 2 points x 4 requests x 63 decode tokens,
>= 200 verify steps; a step's accepted drafts have sd <= 0.5, so the lane's AL has a standard
error <= 0.035: 0.15 is over 4 of them. The draws are seeded, so the run is reproducible.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from loadgen.config.golden import read_golden
from tests.support.procs import run_loadgen

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "al-matrix.yaml"
FIXTURE = ROOT / "tests" / "fixtures" / "speed_bench"
FORCED = {1: 1.79, 2: 2.27, 3: 2.49}
LANES = [f"k{k}-thinking-{mode}" for k in FORCED for mode in ("on", "off")]


def test_the_example_matrix_round_trips_through_the_golden_reader(tmp_path: Path) -> None:
    tree = tmp_path / "al-matrix"
    done = run_loadgen(
        [
            "--config",
            str(EXAMPLE),
            "--results",
            str(tree),
            "--dataset-path",
            str(FIXTURE),
            "--conc",
            "2,4",
            "--speed-bench-output-len",
            "64",
            "--num-prompts",
            "4",
            "--no-progress",
        ],
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    matrix = tree / "al_matrix.yaml"
    assert f"acceptance lengths per lane: {matrix}" in done.stderr
    measured = {
        lane: [
            orjson.loads((tree / lane / f"conc_{c}.json").read_bytes())["acceptance_length"]
            for c in (2, 4)
        ]
        for lane in LANES
    }
    for mode, word in (("thinking_on", "on"), ("thinking_off", "off")):
        golden = read_golden(matrix, "deepseek-v4-pro", mode, 0.03)
        curve = dict(golden.curve)
        assert set(curve) == set(FORCED)
        for k, forced in FORCED.items():
            values = measured[f"k{k}-thinking-{word}"]
            assert curve[k] == round(sum(values) / len(values), 2)
            assert abs(curve[k] - forced) < 0.15, (k, curve[k], forced)
    text = matrix.read_text()
    assert text.startswith("# Acceptance length (AL) per model")
    assert "k2-thinking-on conc 4:" in text  # each point behind a value, with its source

    shown = run_loadgen(["compare", str(tree)])
    assert shown.returncode == 0, shown.stderr
    for lane, values in measured.items():  # a table row per lane and point (conc 2, 4)
        shown_als = re.findall(rf"^{lane}\s+\d.*$", shown.stdout, flags=re.MULTILINE)
        assert len(shown_als) == 2, shown.stdout
        for row, value in zip(shown_als, values, strict=True):
            # the last column is AL (with its ratio to the baseline lane)
            assert re.search(rf" {value:.2f}( x\d+\.\d+)?$", row), (row, value)
