"""--golden-al: the simulator forced to a synthetic AL (as InferenceX forces vLLM) is held to
a golden file of InferenceX's shape, through the real CLI.

The file's shape is InferenceX's golden_al_distribution/dsv4_mtp.yaml (SemiAnalysisAI/
InferenceX at 843c6254ff69b567f772f6a5fd97675af3d04431): model -> thinking_on/off -> K
(an integer key) -> AL. The values below are that file's for deepseek-v4-pro.

Sampling bound: with rates [1.0, 0.27] each decode chunk carries 2 or 3 tokens, sd 0.44;
a point here has >= 800 decode chunks, so the measured AL's standard error is <= 0.016,
0.7% of 2.27: the 3% tolerance is over 4 standard errors, and a server forced to 2.0
(11.9% off) fails by far.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support.procs import one_error_line, run_loadgen

GOLDEN = """\
deepseek-v4-pro:
  thinking_on:
    1: 1.79
    2: 2.27
    3: 2.49
  thinking_off:
    2: 2.06
"""


def forced(al: float) -> str:
    config = orjson.dumps(
        {
            "method": "mtp",
            "num_speculative_tokens": 2,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": al,
        }
    ).decode()
    return (
        f"--step-fixed-ms 2 --spin-us 0 --speculative-config '{config}' "
        "--per-request-spec-decode-metrics summary"
    )


def run(tmp_path: Path, al: float, *extra: str) -> tuple[int, str, Path]:
    golden = tmp_path / "dsv4_mtp.yaml"
    golden.write_text(GOLDEN)
    results = tmp_path / f"r{al}"
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            forced(al),
            "--conc",
            "2,8",
            "--isl",
            "64",
            "--osl",
            "256",
            "--prompts-per-conc",
            "4",
            "--warmup-per-conc",
            "0",
            "--no-progress",
            "--golden-al",
            str(golden),
            "--golden-al-model",
            "deepseek-v4-pro",
            "--results",
            str(results),
            *extra,
        ],
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr, results


def point(results: Path, conc: int) -> dict[str, object]:
    data: dict[str, object] = orjson.loads((results / f"conc_{conc}.json").read_bytes())
    return data


def test_a_server_forced_to_the_golden_al_passes(tmp_path: Path) -> None:
    code, output, results = run(tmp_path, 2.27)
    assert code == 0, output
    for conc in (2, 8):
        p = point(results, conc)
        assert p["golden_acceptance_length"] == 2.27 and p["golden_acceptance_ok"] is True
        assert abs(p["golden_acceptance_drift"]) <= 0.03  # type: ignore[arg-type]
        stream, server = p["stream_acceptance_length"], p["server_acceptance_length"]
        assert abs(stream - server) < 0.05, (stream, server)  # type: ignore[operator]
        # the per-request histograms are the counters' draws, request by request: the
        # pooled per-request AL is the counters' exactly (no warmup, no other traffic)
        assert p["server_request_acceptance_length"] == pytest.approx(server, rel=1e-12)
    assert "2.27 ok" in output  # the table's golden column


def test_a_server_forced_off_the_curve_fails_with_exit_1_and_the_drift(tmp_path: Path) -> None:
    code, output, results = run(tmp_path, 2.0)
    assert code == 1, output
    for conc in (2, 8):
        p = point(results, conc)
        assert p["golden_acceptance_ok"] is False
        assert -0.15 < p["golden_acceptance_drift"] < -0.08  # type: ignore[operator]
        assert f"conc {conc}: acceptance outside --golden-al" in output
    assert "2.27 FAIL" in output


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--golden-al-model", "kimi-k2"], "no model 'kimi-k2' in it"),
        (["--thinking", "chat", "--spec-tokens", "3"], "thinking_off has no entry for K=3"),
        (["--golden-al-tolerance", "3"], "--golden-al-tolerance 3.0: give a fraction"),
    ],
)
def test_a_missing_entry_is_one_line_before_anything_runs(
    tmp_path: Path, extra: list[str], expected: str
) -> None:
    code, output, results = run(tmp_path, 2.27, *extra)
    assert code == 2 and expected in one_error_line(output), output
    assert not results.exists()  # refused before the run: nothing was measured
