"""Where sessions meet the rest of loadgen: one dataset format detection for every
reader, the server's cached_tokens validated like every other count, and the
combinations sessions do not support refused with one line (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.client.events import MalformedEvent, decode_event
from loadgen.config.args import spec_from_argv
from loadgen.config.dataset_format import detect_format
from loadgen.config.spec import SpecError
from loadgen.workload.datasets import load_dataset
from loadgen.workload.traces import load_conversations
from tests.support.paths import TRACES

BASE = ["--sim", "--conc", "2", "--isl", "100", "--osl", "10"]


def _usage(details: object, prompt: int = 130) -> bytes:
    return orjson.dumps(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 1,
                "prompt_tokens_details": details,
            },
        }
    )


def test_cached_tokens_are_validated_at_the_boundary() -> None:
    assert decode_event(_usage({"cached_tokens": 128})).cached_tokens == 128
    assert decode_event(_usage({"cached_tokens": 0})).cached_tokens == 0
    assert decode_event(_usage(None)).cached_tokens is None  # vLLM without the flag
    assert decode_event(_usage({})).cached_tokens is None
    for bad in (
        {"cached_tokens": True},
        {"cached_tokens": -1},
        {"cached_tokens": 1.5},
        {"cached_tokens": "128"},
        {"cached_tokens": 2**40},
        [1],
        "x",
    ):
        with pytest.raises(MalformedEvent, match="prompt_tokens_details"):
            decode_event(_usage(bad))
    with pytest.raises(MalformedEvent, match=r"at most usage.prompt_tokens \(130\)"):
        decode_event(_usage({"cached_tokens": 131}))


def test_one_detection_for_every_format(tmp_path: Path) -> None:
    cases = {
        "share.json": orjson.dumps(
            [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]
        ),
        "share.jsonl": b'{"conversations": [{"from": "human", "value": "hi"}, '
        b'{"from": "gpt", "value": "yo"}]}\n' * 2,
        "messages.jsonl": b'[{"role": "user", "content": "a"}]\n'
        b'[{"role": "user", "content": "b"}]\n',
        "one_line.jsonl": b'[{"role": "user", "content": "a"}]\n',
        "custom.jsonl": b'{"prompt": "hello", "output_tokens": 5}\n',
    }
    expected = {
        "share.json": "sharegpt",
        "share.jsonl": "sharegpt",
        "messages.jsonl": "jsonl",
        "one_line.jsonl": "jsonl",
        "custom.jsonl": "jsonl",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert detect_format(tmp_path / name) == expected[name], name
    assert detect_format(TRACES / "agentic_small.jsonl") == "weka"
    assert detect_format(TRACES / "mooncake_small.jsonl") == "mooncake"
    # the single-turn reader and the multi-turn reader agree on what a file holds
    assert [c.answer for c in load_dataset(tmp_path / "share.jsonl")] == ["yo", "yo"]
    assert len(load_dataset(tmp_path / "one_line.jsonl")) == 1
    assert load_dataset(tmp_path / "custom.jsonl")[0].output_tokens == 5
    assert load_conversations(tmp_path / "custom.jsonl", "auto") == [
        [{"role": "user", "content": "hello"}]
    ]
    with pytest.raises(SpecError, match="replayed as sessions"):
        load_dataset(TRACES / "mooncake_small.jsonl")


def test_dataset_format_and_dataset_name(tmp_path: Path) -> None:
    share = tmp_path / "share.json"
    share.write_bytes(
        orjson.dumps(
            [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]
        )
    )
    plain = spec_from_argv(["--sim", "--conc", "2", "--osl", "4", "--dataset", str(share)])
    assert (plain.workload.dataset_format, plain.workload.sharegpt_limits, plain.sessions) == (
        "auto",
        False,
        False,
    )
    named = spec_from_argv(
        ["--sim", "--conc", "2", "--dataset-name", "sharegpt", "--dataset-path", str(share)]
    )
    assert (named.workload.dataset_format, named.workload.sharegpt_limits) == ("sharegpt", True)
    forced = spec_from_argv([*BASE, "--dataset", str(share), "--dataset-format", "sharegpt"])
    assert (forced.workload.dataset_format, forced.workload.sharegpt_limits) == ("sharegpt", False)
    custom = spec_from_argv([*BASE, "--dataset", str(share), "--dataset-format", "custom"])
    assert custom.workload.dataset_format == "jsonl"
    with pytest.raises(SpecError, match="name different formats: give one"):
        spec_from_argv(
            [
                "--sim",
                "--conc",
                "2",
                "--dataset-name",
                "sharegpt",
                "--dataset-path",
                str(share),
                "--dataset-format",
                "messages",
            ]
        )
    trace = spec_from_argv(
        ["--sim", "--conc", "1", "--dataset-path", str(TRACES / "mooncake_small.jsonl")]
    )
    assert trace.workload.dataset_format == "mooncake" and trace.sessions
    with pytest.raises(SpecError, match="--multi-turn: --osl is required"):
        spec_from_argv(["--sim", "--conc", "1", "--dataset", str(share), "--multi-turn"])
    with pytest.raises(SpecError, match="--multi-turn plays a --dataset"):
        spec_from_argv([*BASE, "--multi-turn"])


def test_sessions_shard_by_lane_and_refuse_a_shared_hash_scope() -> None:
    # --workers N and --shard I/N both play a session run's lanes over processes
    # (tests/scale/test_sessions_workers.py, tests/scale/test_coordinator.py)
    assert spec_from_argv([*BASE, "--turns", "2", "--workers", "2"]).processes.workers == 2
    assert spec_from_argv([*BASE, "--turns", "2", "--shard", "1/2"]).processes.shard_count == 2
    mooncake = str(TRACES / "mooncake_small.jsonl")
    with pytest.raises(SpecError, match="--shard with a Mooncake trace"):
        spec_from_argv(["--sim", "--conc", "2", "--dataset", mooncake, "--shard", "1/2"])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--sim",
            "--conc",
            "2",
            "--dataset",
            mooncake,
            "--shard",
            "1/2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--shard with a Mooncake trace" in lines[0], done.stderr


def test_workers_auto_plays_a_mooncake_trace_in_one_process() -> None:
    from loadgen.scale.pool_driver import resolve_workers

    spec = spec_from_argv(
        [
            "--sim",
            "--conc",
            "4",
            "--dataset",
            str(TRACES / "mooncake_small.jsonl"),
            "--workers",
            "auto",
        ]
    )
    assert spec.processes.workers is None
    assert resolve_workers(spec).processes.workers == 1
