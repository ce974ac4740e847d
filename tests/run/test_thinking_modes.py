"""DeepSeek-V4's three modes as lanes (examples/dsv4-thinking-modes.yaml) through the real
CLI against the embedded simulator, which thinks: the sweep runs, compare shows TTFT and
TTFA side by side, and the golden gate holds each lane to the curve of its thinking
setting and names it. And Think Max's preflight: one line, or an error with
--strict-preflight."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.support.paths import ROOT
from tests.support.procs import one_error_line, run_loadgen

GOLDEN = """\
deepseek-v4-pro:
  thinking_on:
    2: 2.27
  thinking_off:
    2: 2.06
"""
FAST = ["--conc", "2", "--prompts-per-conc", "2", "--isl", "256", "--osl", "160"]


def test_the_three_mode_sweep_runs_and_each_lane_names_its_golden_curve(tmp_path: Path) -> None:
    golden = tmp_path / "dsv4_mtp.yaml"
    golden.write_text(GOLDEN)
    results = tmp_path / "modes"
    done = run_loadgen(
        [
            "--config",
            str(ROOT / "examples" / "dsv4-thinking-modes.yaml"),
            *FAST,
            "--golden-al",
            str(golden),
            "--spec-tokens",
            "2",
            "--no-progress",
            "--results",
            str(results),
        ],
        timeout=400,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    curves = {}
    for lane in ("non-think", "think-high", "think-max"):
        point = orjson.loads((results / lane / "conc_2.json").read_bytes())
        curves[lane] = point["golden_acceptance_curve"]
        assert point["mean_ttft_ms"] is not None
    assert curves == {
        "non-think": "deepseek-v4-pro/thinking_off in dsv4_mtp.yaml",
        "think-high": "deepseek-v4-pro/thinking_on in dsv4_mtp.yaml",
        "think-max": "deepseek-v4-pro/thinking_on in dsv4_mtp.yaml",
    }
    assert "golden AL: held to the curve deepseek-v4-pro/thinking_on in dsv4_mtp.yaml" in output
    # compare: TTFT and TTFA side by side, the non-thinking lane's TTFA its TTFT
    compared = run_loadgen(["compare", str(results)], timeout=120)
    assert compared.returncode == 0, compared.stderr
    header = next(line for line in compared.stdout.splitlines() if line.startswith("run "))
    assert header.index("TTFT p99 ms") < header.index("TTFA p50 ms")
    non_think = orjson.loads((results / "non-think" / "conc_2.json").read_bytes())
    assert non_think["median_ttfa_ms"] == non_think["median_ttft_ms"]
    assert non_think["total_reasoning_tokens"] == 0


def _think_max(tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            "--step-fixed-ms 1 --reasoning-parser deepseek_v4 --reasoning-lengths max=32",
            "--endpoint",
            "chat",
            "--reasoning-effort",
            "max",
            *FAST,
            "--no-progress",
            "--results",
            str(tmp_path / "max"),
            *extra,
        ],
        timeout=200,
    )
    return done.returncode, done.stdout + done.stderr, done.stderr


def test_think_max_on_a_short_context_says_so_before_the_first_point(tmp_path: Path) -> None:
    code, output, stderr = _think_max(tmp_path)  # the simulator's max_model_len: 131072
    assert code == 0, output
    lines = stderr.splitlines()
    warnings = [i for i, line in enumerate(lines) if "Think Max" in line]
    assert len(warnings) == 1 and "131,072" in lines[warnings[0]], output
    # with the preflight's lines, right after the engine's, before any point ran
    assert lines[warnings[0] - 1].startswith("loadgen: engine "), stderr


def test_strict_preflight_makes_it_the_error(tmp_path: Path) -> None:
    code, output, _ = _think_max(tmp_path, "--strict-preflight")
    assert code != 0
    assert "393,216" in one_error_line(output)
    assert not (tmp_path / "max" / "conc_2.json").exists()
