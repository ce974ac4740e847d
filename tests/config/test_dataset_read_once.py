"""A dataset is read once per run: the one Workload the preflight and every point share
takes over the bytes the format check at the command line read (when the format is left
to detection).

Reads are counted with an audit hook on `open` (CPython's own event, raised for every
file open in this process), during a real run against the embedded simulator.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer

from loadgen.config.args import spec_from_argv
from loadgen.run.sweep import SweepOptions, sweep_points

FAST_SIM = "--step-fixed-ms 2 --decode-token-us 20 --prefill-token-us 2 --spin-us 0"
_watched: list[Path] = []
_opens: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if (
        event == "open"
        and _watched
        and isinstance(args[0], str | Path)
        and Path(args[0]).resolve() == _watched[0]
    ):
        _opens.append(str(args[0]))


sys.addaudithook(_audit)  # hooks cannot be removed: this one only counts the watched path


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"prompt": f"question number {i} about the weather", "output_tokens": 6} for i in range(12)
    ]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


async def _opens_of_a_run(tmp_path: Path, tokenizer: Tokenizer, *flags: str) -> int:
    dataset = _dataset(tmp_path)
    _watched[:] = [dataset.resolve()]
    _opens.clear()
    try:
        spec = spec_from_argv(
            [
                "--sim",
                "--sim-args",
                FAST_SIM,
                "--dataset",
                str(dataset),
                *flags,
                "--conc",
                "1,2",
                "--prompts-per-conc",
                "4",
                "--warmup-per-conc",
                "1",
                "--results",
                str(tmp_path / "r"),
                "--no-progress",
            ]
        )
        outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    finally:
        _watched.clear()
    assert outcome.exit_code == 0 and [p.conc for p in outcome.points] == [1, 2]
    return len(_opens)


async def test_a_dataset_of_a_named_format_is_read_once(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    assert await _opens_of_a_run(tmp_path, tokenizer, "--dataset-format", "custom") == 1


async def test_detecting_the_format_reads_nothing_more(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    assert await _opens_of_a_run(tmp_path, tokenizer) == 1
