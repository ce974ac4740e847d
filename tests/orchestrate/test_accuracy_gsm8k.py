"""`--accuracy gsm8k` end to end: the real CLI against a real `loadgen sim` whose answer
oracle (--answers, a test aid) answers exactly 6 of the fixture's 8 questions correctly,
so the accuracy point must report 0.75 strict-match exactly, with its per-question file,
its timing, and the --accuracy-min gate."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.paths import FIXTURES
from tests.support.procs import free_port, one_error_line, point, run_loadgen, start_sim, stop

QUESTIONS = FIXTURES / "gsm8k" / "test.jsonl"
SHOTS = FIXTURES / "gsm8k" / "train.jsonl"
RATE = 0.75  # 6 of the 8 questions


def _args(url: str, results: Path, *extra: str) -> list[str]:
    return [
        "--base-url",
        url,
        "--conc",
        "4",
        "--isl",
        "64",
        "--osl",
        "8",
        "--prompts-per-conc",
        "2",
        "--accuracy",
        "gsm8k",
        "--accuracy-data",
        str(QUESTIONS),
        "--accuracy-shots",
        str(SHOTS),
        "--results",
        str(results),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    sim = start_sim(port, log, "--answers", str(QUESTIONS), "--answer-rate", str(RATE))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(sim)


@pytest.mark.parametrize(
    ("endpoint", "thinking"),
    [("completions", "thinking"), ("completions", "chat"), ("chat", "chat")],
)
def test_reports_the_oracles_rate_exactly(
    oracle: str, tmp_path: Path, endpoint: str, thinking: str
) -> None:
    """Thinking mode: the reasoning is not scored, the answer after `</think>` is."""
    results = tmp_path / "run"
    done = run_loadgen(_args(oracle, results, "--endpoint", endpoint, "--thinking", thinking))
    assert done.returncode == 0, done.stderr
    accuracy = results / "accuracy_gsm8k"
    score = orjson.loads((accuracy / "gsm8k_conc_4.json").read_bytes())
    assert score["strict_match"]["exact_match"] == RATE
    assert score["flexible_extract"]["exact_match"] == RATE
    assert score["n"] == 8 and score["answered"] == 8 and score["complete"] is True
    # lm-eval's standard error: sample stddev / sqrt(n) of six 1s and two 0s
    assert score["strict_match"]["stderr"] == pytest.approx((0.75 * 0.25 * 8 / 7) ** 0.5 / 8**0.5)
    samples = [
        orjson.loads(line)
        for line in (accuracy / "gsm8k_samples_conc_4.jsonl").read_bytes().splitlines()
    ]
    assert [s["id"] for s in samples] == list(range(8))
    assert sum(s["correct"] for s in samples) == 6
    golds = [s["gold"] for s in samples]
    assert golds == ["7", "12", "120", "925", "50", "260", "6", "-7"]  # commas and signs as lm-eval
    for sample in samples:
        assert (sample["extracted_strict"] == sample["gold"]) == sample["correct"]
        assert sample["finish_reason"] == "stop"
    timed = point(accuracy, 4)  # the accuracy point is timed like any point
    assert timed["completed"] == 8 and timed["max_concurrency"] == 4
    assert timed["mean_ttft_ms"] > 0 and timed["mean_itl_ms"] > 0 and timed["output_throughput"] > 0
    assert "strict-match 0.7500" in done.stderr
    assert "no answer" not in done.stderr  # every reply had its answer section
    assert (results / "conc_4.json").is_file()  # the sweep itself ran first
    # no conc >= 16 in the sweep: its highest is the accuracy point's (said in the docs)
    assert sorted(p.name for p in accuracy.glob("conc_*.json")) == ["conc_4.json"]
    # compare (and the report) show the accuracy beside throughput at that concurrency
    shutil.copytree(results, tmp_path / "again")
    compared = run_loadgen(["compare", str(results), str(tmp_path / "again")])
    assert compared.returncode == 0, compared.stderr
    header = next(line for line in compared.stdout.splitlines() if line.startswith("run"))
    assert header.split()[-2:] == ["GSM8K", "strict"], compared.stdout
    block = compared.stdout.split("conc 4\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[-1] for line in block[1:]] == ["0.750", "x1.00"], compared.stdout


def test_accuracy_min_above_the_score_exits_1_with_one_line(oracle: str, tmp_path: Path) -> None:
    done = run_loadgen(_args(oracle, tmp_path / "run", "--accuracy-min", "0.91"))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    gate = [line for line in done.stderr.splitlines() if "--accuracy-min" in line]
    assert gate == [
        "loadgen: GSM8K strict-match exact match below --accuracy-min 0.91: conc 4 0.750 "
        f"(n=8; per-question answers in {tmp_path / 'run' / 'accuracy_gsm8k'})"
    ]
    score = orjson.loads((tmp_path / "run" / "accuracy_gsm8k" / "gsm8k_conc_4.json").read_bytes())
    assert score["passed"] is False and score["accuracy_min"] == 0.91


def test_accuracy_min_at_the_score_passes(oracle: str, tmp_path: Path) -> None:
    done = run_loadgen(_args(oracle, tmp_path / "run", "--accuracy-min", "0.75"))
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def thoughtless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `loadgen sim` without the oracle: it generates as usual, and never writes
    `</think>` (a server that does not think)."""
    port = free_port()
    sim = start_sim(port, tmp_path_factory.mktemp("sim") / "sim.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(sim)


def test_replies_without_an_answer_section_are_said_with_what_to_do(
    thoughtless: str, tmp_path: Path
) -> None:
    """DeepSeek-V4's thinking mode (the default) against a server that does not think:
    every reply is all reasoning, its answer section empty, and the score 0. The run says
    why and what to do; in chat mode the same replies are answers (scored, not said)."""
    thinking = run_loadgen(_args(thoughtless, tmp_path / "thinking", "--accuracy-max-tokens", "16"))
    assert thinking.returncode == 0, thinking.stderr
    assert "gsm8k conc 4: strict-match 0.0000" in thinking.stderr
    (said,) = [line for line in thinking.stderr.splitlines() if "no answer section" in line]
    missing = int(said.split("gsm8k conc 4: ", 1)[1].split(" of 8 replies")[0])
    assert missing > 4, said  # most of them
    assert "</think>" in said and said.endswith("run with --thinking chat")
    chat = run_loadgen(
        _args(thoughtless, tmp_path / "chat", "--accuracy-max-tokens", "16", "--thinking", "chat")
    )
    assert chat.returncode == 0, chat.stderr
    assert "gsm8k conc 4: strict-match" in chat.stderr and "no answer" not in chat.stderr


def test_missing_data_file_is_one_line_exit_2_before_measuring(oracle: str, tmp_path: Path) -> None:
    args = _args(oracle, tmp_path / "run")
    args[args.index(str(QUESTIONS))] = str(tmp_path / "gsm8k_test.jsonl")
    done = run_loadgen(args)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert "--accuracy-data" in line and "openai/gsm8k" in line
    assert not (tmp_path / "run" / "conc_4.json").exists()  # nothing measured for nothing


def test_accuracy_without_data_flag_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run_loadgen(["--sim", "--conc", "2", "--isl", "64", "--osl", "8", "--accuracy", "gsm8k"])
    assert done.returncode == 2
    assert "openai/gsm8k" in one_error_line(done.stderr)


def test_the_exporter_gets_the_accuracy_gauge() -> None:
    from prometheus_client import CollectorRegistry

    from loadgen.results.accuracy import AccuracyResult, ExactMatchFigure
    from loadgen.sinks.prometheus.instruments import LoadgenMetrics
    from loadgen.sinks.prometheus.observer import MetricsObserver

    registry = CollectorRegistry()
    observer = MetricsObserver(LoadgenMetrics(registry), model="m", endpoint="chat", points=1)
    observer.accuracy_scored(
        AccuracyResult(
            task="gsm8k",
            protocol="p",
            conc=64,
            n=8,
            strict_match=ExactMatchFigure(exact_match=0.75, stderr=0.16, n=8),
            flexible_extract=ExactMatchFigure(exact_match=0.875, stderr=0.12, n=8),
            answered=8,
        )
    )
    labels = {"model_name": "m", "endpoint": "chat", "conc": "64", "task": "gsm8k"}
    value = registry.get_sample_value
    assert value("loadgen_accuracy_exact_match", {**labels, "filter": "strict-match"}) == 0.75
    assert value("loadgen_accuracy_exact_match", {**labels, "filter": "flexible-extract"}) == 0.875


def test_sweep_file_lanes_run_their_accuracy_points(oracle: str, tmp_path: Path) -> None:
    """A lane with accuracy gets its points after its sweep; the tree's comparison shows
    the score beside throughput; a lane without it has none."""
    document = tmp_path / "lanes.yaml"
    document.write_text(
        f"""
base-url: {oracle}
conc: 4
thinking: chat
workload:
  isl: 64
  osl: 8
  prompts-per-conc: 2
lanes:
  - name: plain
  - name: checked
    accuracy: gsm8k
    accuracy-data: {QUESTIONS}
    accuracy-shots: {SHOTS}
"""
    )
    tree = tmp_path / "tree"
    done = run_loadgen(["--config", str(document), "--results", str(tree), "--no-progress"])
    assert done.returncode == 0, done.stderr
    assert not (tree / "plain" / "accuracy_gsm8k").exists()
    score = orjson.loads((tree / "checked" / "accuracy_gsm8k" / "gsm8k_conc_4.json").read_bytes())
    assert score["strict_match"]["exact_match"] == RATE
    assert "lane checked: gsm8k conc 4: strict-match 0.7500" in done.stderr
    compared = run_loadgen(["compare", str(tree)])
    block = compared.stdout.split("conc 4\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[-1] for line in block[1:]] == ["-", "0.750"], compared.stdout
    report = (tree / "report.html").read_text()
    assert "<th>GSM8K strict</th>" in report


def test_overwrite_never_leaves_an_earlier_runs_scores(oracle: str, tmp_path: Path) -> None:
    """--overwrite of a run that had accuracy points, now without: no stale score is left
    for compare to show as this run's; a complete run resumed runs nothing again."""
    results = tmp_path / "run"
    first = run_loadgen(_args(oracle, results))
    assert first.returncode == 0, first.stderr
    again = run_loadgen([*_args(oracle, results), "--resume", str(results)])
    assert again.returncode == 0, again.stderr
    assert "nothing to resume" in again.stderr and "strict-match" not in again.stderr
    plain = _args(oracle, results)
    at = plain.index("--accuracy")
    del plain[at : at + 6]  # --accuracy gsm8k --accuracy-data F --accuracy-shots F
    second = run_loadgen([*plain, "--overwrite"])
    assert second.returncode == 0, second.stderr
    assert (results / "conc_4.json").is_file()
    assert not (results / "accuracy_gsm8k").exists()
    compared = run_loadgen(["compare", str(results), str(results)])
    assert "GSM8K" not in compared.stdout
