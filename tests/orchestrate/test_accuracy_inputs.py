"""--accuracy-data and --accuracy-shots are bounded as --dataset is, through the real CLI:
a device or FIFO refused without opening it, a file over 1 GiB or a line over 4 MiB
refused, and the accuracy point (every question a request) held to the per-point memory
limit before a line is parsed. Each refusal is one line, exit 2, before any measurement
(nothing listens at the base URL: the files are read before the server is asked)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from loadgen.config.dataset_format import MAX_CONVERSATION_BYTES, MAX_DATASET_BYTES
from tests.support.paths import FIXTURES
from tests.support.procs import one_error_line, run_loadgen

QUESTIONS = FIXTURES / "gsm8k" / "test.jsonl"
SHOTS = FIXTURES / "gsm8k" / "train.jsonl"
NOWHERE = "http://127.0.0.1:9"


def refused(tmp_path: Path, data: Path, shots: Path = SHOTS) -> str:
    """The one error line of an accuracy run over these files (a FIFO read by the code
    before the fix would block: the timeout ends the test, failed)."""
    done = run_loadgen(
        [
            "--base-url",
            NOWHERE,
            "--conc",
            "1",
            "--isl",
            "64",
            "--osl",
            "8",
            "--prompts-per-conc",
            "1",
            "--results",
            str(tmp_path / "run"),
            "--no-progress",
            "--accuracy",
            "gsm8k",
            "--accuracy-data",
            str(data),
            "--accuracy-shots",
            str(shots),
        ],
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "run" / "conc_1.json").exists()
    return one_error_line(done.stderr)


def test_a_link_to_a_device_is_refused_unread(tmp_path: Path) -> None:
    # the code before the fix read /dev/zero whole: 4 GB in 13 s, then the OOM killer
    link = tmp_path / "gsm8k_test.jsonl"
    link.symlink_to("/dev/zero")
    line = refused(tmp_path, link)
    assert f"--accuracy-data {link}: not a regular file" in line and "openai/gsm8k" in line


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)
    line = refused(tmp_path, QUESTIONS, fifo)
    assert f"--accuracy-shots {fifo}: not a regular file" in line


def test_a_file_over_the_dataset_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    huge = tmp_path / "test.jsonl"
    with open(huge, "wb") as fh:
        fh.truncate(MAX_DATASET_BYTES + 1)  # sparse: no disk used
    assert f"--accuracy-data {huge}: over the 1 GiB limit" in refused(tmp_path, huge)


def test_a_line_over_the_conversation_limit_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "test.jsonl"
    question = "How many? " * (MAX_CONVERSATION_BYTES // 10 + 10)
    data.write_bytes(
        QUESTIONS.read_bytes() + orjson.dumps({"question": question, "answer": "#### 1"}) + b"\n"
    )
    lines = len(QUESTIONS.read_bytes().splitlines()) + 1
    assert f"--accuracy-data {data}:{lines}: the conversation is over 4 MiB" in refused(
        tmp_path, data
    )


def test_a_million_questions_are_refused_by_the_point_memory_limit(tmp_path: Path) -> None:
    """The issue's file: 10^6 short questions (89 MB) built a 4 GB accuracy point. Each
    question is a request of its 5-shot prompt and an answer of up to 2048 tokens:
    ~106 GiB by the estimate, over half of any machine under ~200 GiB."""
    from loadgen.config.build_spec import memory_budget

    if memory_budget() > 100 * 2**30:
        pytest.skip("this machine could hold a 10^6-question point")
    data = tmp_path / "test.jsonl"
    with open(data, "wb") as fh:
        for i in range(1_000_000):
            fh.write(
                orjson.dumps({"question": f"What is {i} plus 1?", "answer": f"#### {i + 1}"})
                + b"\n"
            )
    line = refused(tmp_path, data)
    assert f"--accuracy-data {data}: its 1,000,000 questions" in line
    assert "over the limit of one point (half this machine's memory" in line
    assert "ask fewer questions" in line


def test_the_real_sized_split_fits(tmp_path: Path) -> None:
    """GSM8K's test split (1,319 questions, 5-shot prompts from the train split's lines)
    is far inside the limit on any machine that runs loadgen: the bound refuses only what
    no real run asks."""
    from loadgen.config.spec import RunSpec
    from loadgen.workload.gsm8k import point_memory_bytes, read_task_file

    data = tmp_path / "test.jsonl"
    lines = [line for line in QUESTIONS.read_bytes().splitlines() if not line.startswith(b"#")]
    data.write_bytes(b"\n".join(lines[i % len(lines)] for i in range(1319)) + b"\n")
    asked, pool = read_task_file(data, "--accuracy-data"), read_task_file(SHOTS, "--accuracy-shots")
    spec = RunSpec.flat(
        conc=(64,), isl=64, osl=8, base_url=NOWHERE,
        accuracy="gsm8k", accuracy_data=data, accuracy_shots=SHOTS,
    )  # fmt: skip
    estimate, _ = point_memory_bytes(asked, pool, spec)
    assert estimate < 1 << 30
