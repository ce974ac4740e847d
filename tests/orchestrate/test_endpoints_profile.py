"""`--profile mlperf-endpoints` end to end against the embedded simulator, whose answer
oracle (--answers, a test aid) answers 6 of the fixture's 8 GSM8K questions right: seven
points in their regions, each mandatory point's accuracy run straight after it, and a
summary that says it is a rehearsal and names every rule it checked, the unmet ones
included."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from loadgen.config.endpoints_profile import plan
from loadgen.metrics.endpoints_rules import EndpointsSummary, Outcome
from tests.support.paths import FIXTURES
from tests.support.procs import run_loadgen

QUESTIONS = FIXTURES / "gsm8k" / "test.jsonl"
SHOTS = FIXTURES / "gsm8k" / "train.jsonl"
RULES = {
    "point count",
    "Ultra Low Concurrency point",
    "concurrency in range",
    "Low Concurrency point",
    "Medium Concurrency point",
    "High Concurrency point",
    "fixed concurrency",
    "streaming",
    "minimum steady-state duration",
    "whole passes over the dataset",
    "accuracy at every mandatory point, right after it",
    "accuracy target",
    "speculative outputs equal the target's, token for token",
    "Offline point",
    "headline figures",
}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    results = tmp_path_factory.mktemp("endpoints") / "run"
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            f"--answers {QUESTIONS} --answer-rate 0.75 --step-fixed-ms 1",
            "--profile",
            "mlperf-endpoints",
            "--conc",
            "1,34",
            "--isl",
            "32",
            "--osl",
            "8",
            "--prompts-per-conc",
            "2",
            "--accuracy-data",
            str(QUESTIONS),
            "--accuracy-shots",
            str(SHOTS),
            "--accuracy-min",
            "0.8",
            "--no-progress",
            "--results",
            str(results),
        ],
        timeout=400,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return results, done.stdout, done.returncode


def test_every_point_and_its_accuracy_run_in_order(rehearsal: tuple[Path, str, int]) -> None:
    results, _, _ = rehearsal
    chosen = plan([1, 34])
    assert len(chosen.points) == 7
    for index, point in enumerate(chosen.points):
        directory = results / f"conc_{point.conc:05d}"
        measured = directory / f"conc_{point.conc}.json"
        assert measured.is_file()
        score = directory / "accuracy_gsm8k" / f"gsm8k_conc_{point.conc}.json"
        assert score.is_file() == point.mandatory
        if point.mandatory and index + 1 < len(chosen.points):
            following = chosen.points[index + 1].conc
            next_point = results / f"conc_{following:05d}" / f"conc_{following}.json"
            # right after: scored after its own point, before the next point ended
            assert measured.stat().st_mtime <= score.stat().st_mtime
            assert score.stat().st_mtime <= next_point.stat().st_mtime


def test_the_summary_names_every_rule_and_what_is_not_met(
    rehearsal: tuple[Path, str, int],
) -> None:
    results, stdout, code = rehearsal
    summary = msgspec.json.decode(
        (results / "mlperf_endpoints.json").read_bytes(), type=EndpointsSummary
    )
    assert "not the official client" in summary.statement
    assert "not the official client" in stdout
    assert {r.rule for r in summary.rules} == RULES
    outcome = {r.rule: r.outcome for r in summary.rules}
    # a seconds-long rehearsal is far from 600 / 1,200 s; no Offline point is run
    assert outcome["minimum steady-state duration"] is Outcome.NOT_MET
    assert outcome["Offline point"] is Outcome.NOT_MET
    # 0.75 strict match against --accuracy-min 0.8 (the accuracy gate also exits 1)
    assert outcome["accuracy target"] is Outcome.NOT_MET and code == 1
    assert outcome["accuracy at every mandatory point, right after it"] is Outcome.MET
    assert outcome["point count"] is Outcome.MET
    # the simulator decodes with MTP: shown only against a plain run, which this is not
    assert outcome["speculative outputs equal the target's, token for token"] is (
        Outcome.NOT_CHECKED
    )
    for line in ("minimum steady-state duration", "Offline point", "accuracy target"):
        assert line in stdout.split("Not met:")[1]
    heads = {p.conc: p for p in summary.points}
    for point in plan([1, 34]).points:
        head = heads[point.conc]
        assert head.tpot_p90_ms is not None and head.ttft_p90_ms is not None
        assert head.tps_per_user == pytest.approx(1000.0 / head.tpot_p90_ms)
        assert (head.gsm8k_strict == 0.75) == point.mandatory
