"""`--dataset-format auto` opens the dataset once per run: the detection at the command
line hands the bytes it read to the workload (config/dataset_format.py).

Each case runs the real CLI in a subprocess against the embedded simulator, with an
audit hook on `open` (CPython's event for every file opened in the process) counting the
opens of the dataset's file(s); one case per format the command line detects.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
import pytest

from loadgen.config.dataset_format import detect_format, items

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
FAST_SIM = "--step-fixed-ms 2 --decode-token-us 20 --prefill-token-us 2 --spin-us 0"
# The CLI as `python -m loadgen`, after a hook that prints each open of a watched file.
_HOOKED_CLI = """
import runpy, sys
from pathlib import Path
watched = {str(Path(p).resolve()) for p in sys.argv[1].split("|")}
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, Path)):
        path = str(Path(args[0]).resolve())
        if path in watched:
            print(f"OPENED {path}", file=sys.stderr, flush=True)
sys.addaudithook(hook)
sys.argv = ["loadgen", *sys.argv[2:]]
runpy.run_module("loadgen", run_name="__main__")
"""


def _jsonl(path: Path, rows: Sequence[object]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _sharegpt(tmp: Path) -> tuple[Path, list[str]]:
    rows = [
        {
            "id": str(i),
            "conversations": [
                {"from": "human", "value": f"tell me about the weather number {i}"},
                {"from": "gpt", "value": "it is sunny and warm today " * 2},
            ],
        }
        for i in range(6)
    ]
    path = tmp / "share.json"
    path.write_bytes(orjson.dumps(rows))
    return path, []


def _messages(tmp: Path) -> tuple[Path, list[str]]:
    rows = [
        {"messages": [{"role": "user", "content": f"question {i} about rain"}]} for i in range(6)
    ]
    return _jsonl(tmp / "messages.jsonl", rows), ["--osl", "6"]


def _custom(tmp: Path) -> tuple[Path, list[str]]:
    rows = [{"prompt": f"question {i} about snow", "output_tokens": 6} for i in range(6)]
    return _jsonl(tmp / "custom.jsonl", rows), []


def _mooncake(tmp: Path) -> tuple[Path, list[str]]:
    return Path(shutil.copy(TRACES / "mooncake_small.jsonl", tmp / "mooncake.jsonl")), []


def _weka_file(tmp: Path) -> tuple[Path, list[str]]:
    return Path(shutil.copy(TRACES / "agentic_small.jsonl", tmp / "weka.jsonl")), []


def _weka_dir(tmp: Path) -> tuple[Path, list[str]]:
    directory = tmp / "weka"
    directory.mkdir()
    for number, line in enumerate((TRACES / "agentic_small.jsonl").read_bytes().splitlines()):
        if line.strip():
            (directory / f"trace_{number}.json").write_bytes(line)
    return directory, []


@pytest.mark.parametrize(
    ("make", "detected"),
    [
        (_sharegpt, "sharegpt"),
        (_messages, "jsonl"),
        (_custom, "jsonl"),
        (_mooncake, "mooncake"),
        (_weka_file, "weka"),
        (_weka_dir, "weka"),
    ],
    ids=["sharegpt", "messages", "custom", "mooncake", "weka-file", "weka-directory"],
)
def test_an_auto_detected_dataset_is_opened_once_per_run(
    tmp_path: Path, make: Callable[[Path], tuple[Path, list[str]]], detected: str
) -> None:
    dataset, flags = make(tmp_path)
    files = sorted(dataset.glob("*.json")) if dataset.is_dir() else [dataset]
    results = tmp_path / "results"
    argv = ["--sim", "--sim-args", FAST_SIM, "--dataset", str(dataset)]
    argv += ["--dataset-format", "auto", *flags, "--conc", "1", "--prompts-per-conc", "2"]
    argv += ["--warmup-per-conc", "0", "--no-progress", "--results", str(results)]
    done = subprocess.run(
        [sys.executable, "-c", _HOOKED_CLI, "|".join(map(str, files)), *argv],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    opened = [
        line.split(" ", 1)[1] for line in done.stderr.splitlines() if line.startswith("OPENED ")
    ]
    assert sorted(opened) == sorted(str(f.resolve()) for f in files)  # each file once
    run = orjson.loads((results / "run.json").read_bytes())
    assert run["settings"]["dataset_format"] in (detected, "auto")
    assert (results / "conc_1.json").is_file()


def test_a_file_changed_after_detection_is_read_again(tmp_path: Path) -> None:
    """The bytes detection kept are only handed over while the file is unchanged."""
    path = _jsonl(tmp_path / "d.jsonl", [{"prompt": "first", "output_tokens": 1}])
    assert detect_format(path) == "jsonl"
    _jsonl(path, [{"prompt": "second, and longer", "output_tokens": 1}])
    assert [item["prompt"] for _, item in items(path)] == ["second, and longer"]
