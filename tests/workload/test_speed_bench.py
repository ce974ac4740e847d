"""--dataset-name speed_bench: SPEED-Bench's directory layout and flags as vLLM 0.32 reads
them (benchmarks/datasets.py `SpeedBench`: DIR/<subset>.jsonl, rows of messages and
category, the first message's content is the prompt), rendered by loadgen's DeepSeek-V4
encoder. What the server receives is read off the wire: a relay between the CLI and a real
`loadgen sim` keeps every byte the CLI sends.

The data is tests/fixtures/speed_bench/, a few hand-written rows in SPEED-Bench's schema
(the real set is downloaded by users, never by tests).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from encoders import ENCODERS
from loadgen.config.spec import SpecError, SpeedBenchOptions
from loadgen.workload.datasets import load_speed_bench
from tests.support.procs import free_port, one_error_line, run_file, run_loadgen, start_sim, stop
from tests.support.recording_proxy import recording_proxy

FIXTURE = Path(__file__).parent.parent / "fixtures" / "speed_bench"
OSL = 12


def rows(category: str | None = None) -> list[str]:
    texts = []
    for line in (FIXTURE / "qualitative.jsonl").read_bytes().splitlines():
        row = orjson.loads(line)
        if category is None or row["category"] == category:
            texts.append(row["messages"][0]["content"])
    return texts


def posted(wire: bytes, path: str) -> list[dict[str, Any]]:
    """The JSON bodies of every `POST path` in the bytes a client sent."""
    bodies = []
    for match in re.finditer(rb"POST " + re.escape(path.encode()) + rb" HTTP/1\.1\r\n", wire):
        head_end = wire.index(b"\r\n\r\n", match.end())
        length = re.search(rb"(?i)content-length: *(\d+)", wire[match.end() : head_end])
        assert length is not None, "every body is sent with its length"
        start = head_end + 4
        bodies.append(orjson.loads(wire[start : start + int(length.group(1))]))
    return bodies


async def run_through_relay(port: int, *args: str) -> tuple[int, str, bytes]:
    async with recording_proxy("127.0.0.1", port) as wire:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadgen",
            "--base-url",
            f"http://127.0.0.1:{wire.port}",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=os.environ.copy(),
        )
        output, _ = await asyncio.wait_for(process.communicate(), timeout=240)
        return process.returncode or 0, output.decode(), bytes(wire.sent)


def speed_bench_args(results: Path, *extra: str) -> list[str]:
    return [
        "--dataset-name",
        "speed_bench",
        "--dataset-path",
        str(FIXTURE),
        "--speed-bench-category",
        "coding",
        "--speed-bench-output-len",
        str(OSL),
        "--conc",
        "2",
        "--num-prompts",
        "6",
        "--num-warmups",
        "0",
        "--no-progress",
        "--results",
        str(results),
        *extra,
    ]


@pytest.fixture
def sim_port(tmp_path: Path) -> Any:
    port = free_port()
    process = start_sim(port, tmp_path / "sim.log")
    try:
        yield port
    finally:
        stop(process)


def test_only_the_category_is_sent_rendered_with_thinking_and_effort(
    tmp_path: Path, sim_port: int
) -> None:
    results = tmp_path / "completions"
    code, output, wire = asyncio.run(
        run_through_relay(
            sim_port,
            *speed_bench_args(
                results,
                "--thinking",
                "thinking",
                "--reasoning-effort",
                "high",
                "--temperature",
                "0.6",
                "--top-p",
                "0.95",
            ),
        )
    )
    assert code == 0, output
    bodies = [b for b in posted(wire, "/v1/completions") if b["max_tokens"] == OSL]
    assert len(bodies) >= 6, output
    expected = {
        ENCODERS["dsv4"].encode_messages(
            [{"role": "user", "content": text}], "thinking", reasoning_effort="high"
        )
        for text in rows("coding")
    }
    sent = {body["prompt"] for body in bodies}
    assert sent == expected  # every coding row, rendered by the encoder, and nothing else
    for prompt in sent:
        assert prompt.endswith("<｜Assistant｜><think>")  # thinking mode opens the reasoning
        assert prompt.startswith("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum")
        assert not any(text in prompt for text in rows() if text not in rows("coding"))
    assert {(b["temperature"], b["top_p"]) for b in bodies} == {(0.6, 0.95)}
    settings = run_file(results)["settings"]
    assert (settings["temperature"], settings["top_p"]) == (0.6, 0.95)
    assert settings["speed_bench"] == {"subset": "qualitative", "category": "coding"}
    assert settings["osl"] == OSL


def test_chat_sends_the_rows_messages_with_the_template_kwargs(
    tmp_path: Path, sim_port: int
) -> None:
    code, output, wire = asyncio.run(
        run_through_relay(
            sim_port,
            *speed_bench_args(
                tmp_path / "chat",
                "--endpoint",
                "chat",
                "--reasoning-effort",
                "max",  # Think Max (--thinking chat beside it is refused: Non-think)
            ),
        )
    )
    assert code == 0, output
    bodies = [b for b in posted(wire, "/v1/chat/completions") if b["max_tokens"] == OSL]
    assert len(bodies) >= 6, output
    assert {b["messages"][0]["content"] for b in bodies} == set(rows("coding"))
    assert all(len(b["messages"]) == 1 and b["messages"][0]["role"] == "user" for b in bodies)
    assert {orjson.dumps(b["chat_template_kwargs"]) for b in bodies} == {
        orjson.dumps({"thinking": True, "reasoning_effort": "max"})
    }
    assert all("top_p" not in b for b in bodies)  # not asked for: the server's default


def test_subset_names_the_file_and_category_filters_rows() -> None:
    coding = load_speed_bench(FIXTURE, SpeedBenchOptions("qualitative", "coding"))
    assert [c.messages[0]["content"] for c in coding] == rows("coding")
    assert len(load_speed_bench(FIXTURE, SpeedBenchOptions("qualitative", None))) == len(rows())
    [only] = load_speed_bench(FIXTURE, SpeedBenchOptions("throughput_1k", None))
    assert "1k subset" in only.messages[0]["content"]


def test_a_missing_category_lists_the_ones_there() -> None:
    with pytest.raises(SpecError, match="categories: coding, math, roleplay, writing"):
        load_speed_bench(FIXTURE, SpeedBenchOptions("qualitative", "stem"))


def test_a_fifo_subset_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "qualitative.jsonl")
    with pytest.raises(SpecError, match="not a regular file"):
        load_speed_bench(tmp_path, SpeedBenchOptions())


def test_the_cli_needs_a_directory_and_says_so(tmp_path: Path) -> None:
    done = run_loadgen(
        [
            "--sim",
            "--dataset-name",
            "speed_bench",
            "--conc",
            "1",
            "--no-progress",
            "--results",
            str(tmp_path / "r"),
        ]
    )
    assert done.returncode == 2
    assert "--dataset-path DIR" in one_error_line(done.stderr)
    done = run_loadgen(
        [
            "--sim",
            "--dataset-name",
            "speed_bench",
            "--dataset-path",
            str(FIXTURE / "qualitative.jsonl"),
            "--conc",
            "1",
            "--no-progress",
            "--results",
            str(tmp_path / "r2"),
        ]
    )
    assert done.returncode == 2
    assert "directory" in one_error_line(done.stderr)


def test_flags_map_as_vllms_and_conflicts_are_refused() -> None:
    from loadgen.config.args import spec_from_argv

    base = ["--sim", "--conc", "1", "--dataset-name", "speed_bench", "--dataset-path", str(FIXTURE)]
    spec = spec_from_argv(base)
    assert (
        spec.workload.osl == 4096 and spec.workload.encoder == "dsv4"
    )  # vLLM's default output length
    assert spec.workload.speed_bench == SpeedBenchOptions("qualitative", None)
    assert (
        spec_from_argv([*base, "--osl", "64", "--speed-bench-output-len", "64"]).workload.osl == 64
    )
    with pytest.raises(SpecError, match="--osl and --speed-bench-output-len"):
        spec_from_argv([*base, "--osl", "64", "--speed-bench-output-len", "32"])
    with pytest.raises(SpecError, match="applies to --dataset-name speed_bench"):
        spec_from_argv(
            ["--sim", "--conc", "1", "--isl", "8", "--osl", "8", "--speed-bench-category", "coding"]
        )
    with pytest.raises(SpecError, match="drop --multi-turn"):
        spec_from_argv([*base, "--multi-turn"])
    with pytest.raises(SpecError, match=r"--top-p 1\.5"):
        spec_from_argv([*base, "--top-p", "1.5"])
