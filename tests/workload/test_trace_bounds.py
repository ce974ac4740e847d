"""Trace values out of range are one line naming the file and line, before anything is
built from them: a Weka `in` of 10^12 tokens or a `block_size` of 10^9 would exhaust
memory building prompts, a Mooncake timestamp 10^12 ms after the first would hold a point
for decades."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.config.spec import SpecError
from loadgen.workload.traces import MAX_BLOCK_SIZE, MAX_TRACE_TOKENS, load_mooncake, load_weka
from tests.support.procs import one_error_line, run_loadgen

GOOD = b'{"type": "s", "in": 100, "out": 3, "hash_ids": [1]}'


def weka(tmp_path: Path, request: bytes, head: bytes = b"") -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(
        b'{"requests": ['
        + GOOD
        + b"]}\n"
        + b"{"
        + head
        + b'"requests": ['
        + GOOD
        + b", "
        + request
        + b"]}\n"
    )
    return path


@pytest.mark.parametrize(
    ("request_", "head", "message"),
    [
        (
            b'{"type": "s", "in": 1000000000000, "out": 3}',
            b"",
            f"request 1: `in` must be an integer >= 1 and at most {MAX_TRACE_TOKENS:,}, got "
            "1000000000000",
        ),
        (
            b'{"type": "s", "in": 10, "out": 1000000000000}',
            b"",
            "request 1: `out` must be an integer >= 1 and at most",
        ),
        (b'{"type": "s", "in": -5, "out": 3}', b"", "`in` must be an integer >= 1"),
        (
            GOOD,
            b'"block_size": 1000000000, ',
            f"`block_size` must be an integer >= 1 and at most {MAX_BLOCK_SIZE:,}, got 1000000000",
        ),
        (GOOD, b'"block_size": 0, ', "`block_size` must be an integer >= 1"),
        (
            b'{"type": "s", "in": 10, "out": 3, "hash_ids": [-1]}',
            b"",
            "`hash_ids` must hold at most",
        ),
    ],
)
def test_weka_values_out_of_range_name_the_line(
    tmp_path: Path, request_: bytes, head: bytes, message: str
) -> None:
    path = weka(tmp_path, request_, head)
    with pytest.raises(SpecError) as caught:
        load_weka(path)
    text = str(caught.value)
    assert text.startswith(f"--dataset {path}:2") and message in text, text
    assert "\n" not in text


def mooncake(tmp_path: Path, *stamps: object) -> Path:
    path = tmp_path / "mooncake.jsonl"
    path.write_text(
        "".join(f'{{"timestamp": {s}, "input_length": 100, "output_length": 4}}\n' for s in stamps)
    )
    return path


@pytest.mark.parametrize(
    ("stamps", "line", "message"),
    [
        (
            (0, 10**12),
            2,
            "`timestamp` 1000000000000 is 11,574.1 days after the first record's; "
            "a replay spans at most 7 days",
        ),
        ((0, -30), 2, "`timestamp` must be a number of ms >= 0, got -30"),
        ((-1,), 1, "`timestamp` must be a number of ms >= 0, got -1"),
        (
            (0, 60, 30),
            3,
            "`timestamp` 30 is before the record above it (60); records are in time order",
        ),
        (("0", 5), 1, "`timestamp` must be a number of ms >= 0, got '0'"),
    ],
)
def test_mooncake_timestamps_out_of_range_name_the_line(
    tmp_path: Path, stamps: tuple[object, ...], line: int, message: str
) -> None:
    path = mooncake(tmp_path, *(f'"{s}"' if isinstance(s, str) else s for s in stamps))
    with pytest.raises(SpecError) as caught:
        load_mooncake(path)
    assert str(caught.value) == f"--dataset {path}:{line}: {message}"


def test_a_week_of_mooncake_is_accepted(tmp_path: Path) -> None:
    week = 7 * 24 * 3600 * 1000
    trees = load_mooncake(mooncake(tmp_path, 1_700_000_000_000, 1_700_000_000_000 + week))
    assert [t.start_at_s for t in trees] == [0.0, week / 1000]


def test_the_cli_refuses_an_absurd_trace_in_one_line_before_any_request(tmp_path: Path) -> None:
    path = weka(tmp_path, b'{"type": "s", "in": 1000000000000, "out": 3}')
    done = run_loadgen(
        [
            "--sim",
            "--conc",
            "1",
            "--dataset",
            str(path),
            "--results",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        timeout=120,
    )
    assert done.returncode == 2
    assert one_error_line(done.stderr).startswith(
        f"loadgen: error: --dataset {path}:2 request 1: `in` must be an integer"
    )
    assert not list((tmp_path / "out").glob("requests_conc_*.jsonl"))
