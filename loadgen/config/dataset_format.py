"""--dataset files: reading their items and detecting their format (--dataset-format,
vLLM's --dataset-name). The one reader every dataset loader uses: workload/datasets.py
(single-turn prompts) and workload/traces.py (sessions and trace replay).

A directory is a Weka trace directory (one trace per `.json` file). A file is one JSON
array (ShareGPT as vLLM reads it, or an array of traces) or JSONL; the first item decides
the format when it is `auto`.

A file is opened once per run, detection included: `detect_format` keeps the bytes it
read, and the next `items` of the same unchanged file (the workload's) takes them over
instead of reading the file again (a 1 GB trace would otherwise be read twice).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson

from loadgen.config.parsers import SpecError

DatasetFormat = Literal["auto", "sharegpt", "jsonl", "weka", "mooncake", "speed_bench"]
# jsonl: OpenAI messages or vLLM custom {prompt} per line; weka, mooncake: traces replayed
# as sessions (docs/sessions.md). speed_bench: NVIDIA SPEED-Bench, a directory of
# <subset>.jsonl (workload/datasets.py).
DATASET_FORMATS: tuple[str, ...] = ("auto", "sharegpt", "jsonl", "weka", "mooncake", "speed_bench")
TRACE_FORMATS: tuple[str, ...] = ("weka", "mooncake")
# A dataset is read into memory whole, and each conversation is tokenized in one piece
# (~1.4 s and ~130 MB of RSS per MB of text): bound both before reading a byte of it.
MAX_DATASET_BYTES = 1 << 30  # 1 GiB
MAX_CONVERSATION_BYTES = 4 << 20  # 4 MiB per line: ~1M tokens of text, above any context

# --dataset-format choices -> RunSpec.dataset_format: OpenAI messages and vLLM custom
# {prompt, output_tokens} lines are read by one JSONL reader, which takes either per line.
FORMAT_CHOICES = ("auto", "sharegpt", "messages", "custom", "weka", "mooncake")
_SPEC_FORMAT = {"messages": "jsonl", "custom": "jsonl"}


def spec_format(choice: str) -> str:
    """The RunSpec.dataset_format a --dataset-format choice names."""
    fmt = _SPEC_FORMAT.get(choice, choice)
    assert fmt in DATASET_FORMATS
    return fmt


# The bytes detection read, by the file's identity then (device, inode, size, mtime):
# at most one file, handed to the next reader of it (see the module's docstring).
_held: dict[tuple[int, int, int, int], bytes] = {}


def items(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, JSON value) per trace file in a directory, per array item, or per line."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise SpecError(f"--dataset {path}: a trace directory needs *.json files")
        for file in files:
            yield str(file), loads(read_bounded(file), str(file))
        return
    yield from _items_of(path, read_bounded(path))


def _items_of(path: Path, data: bytes) -> Iterator[tuple[str, Any]]:
    whole = _whole_array(data)
    if whole is not None:
        for number, item in enumerate(whole):
            check_item_size(len(orjson.dumps(item)), f"--dataset {path}[{number}]")
            yield f"{path}[{number}]", item
        return
    for number, line in enumerate(data.splitlines(), 1):
        if line.strip():
            check_item_size(len(line), f"--dataset {path}:{number}")
            yield f"{path}:{number}", loads(line, f"{path}:{number}")


def read_bounded(path: Path, *, keep: bool = False) -> bytes:
    """The dataset file's bytes (`read_regular`). The bytes detection kept are taken over
    if the file is unchanged; `keep`: hold them for the next reader (detection)."""
    status = regular_file(path, "--dataset", "give a JSON or JSONL file or a directory")
    identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    held = _held.pop(identity, None)
    data = (
        held
        if held is not None and status.st_size <= MAX_DATASET_BYTES
        else read_regular(path, "--dataset", status, DATASET_SMALLER)
    )
    _held.clear()  # never more than one file's bytes held
    if keep:
        _held[identity] = data
    return data


DATASET_SMALLER = "split it or keep only the conversations you need"


def regular_file(path: Path, flag: str, expected: str) -> os.stat_result:
    """The file's status, refused (one SpecError line) unless it is a regular file: a
    device (/dev/zero) has no size to check beforehand and would be read until memory
    runs out, a FIFO would block the read. A stat only: nothing is opened, so nothing
    blocks. `expected`: what to give instead."""
    try:
        status = path.stat()  # follows a link: a link to /dev/zero is /dev/zero
    except OSError as exc:
        raise SpecError(
            f"{flag} {path}: cannot read it ({exc.strerror or exc}); {expected}"
        ) from None
    if not stat.S_ISREG(status.st_mode):
        raise SpecError(
            f"{flag} {path}: not a regular file (devices, FIFOs, sockets and directories "
            f"are not read); {expected}"
        )
    return status


def read_regular(path: Path, flag: str, status: os.stat_result, smaller: str) -> bytes:
    """A regular file's bytes (`status` from `regular_file`), never more than
    MAX_DATASET_BYTES: the size first (a large file is refused without reading it), then
    a bounded read (the file may grow, or be a /proc-like file whose size says 0).
    `smaller`: what to do about a file over the limit."""
    data = b""
    if status.st_size <= MAX_DATASET_BYTES:
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_DATASET_BYTES + 1)
        except OSError as exc:
            raise SpecError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    if status.st_size > MAX_DATASET_BYTES or len(data) > MAX_DATASET_BYTES:
        raise SpecError(
            f"{flag} {path}: over the {MAX_DATASET_BYTES >> 30} GiB limit (read into "
            f"memory); {smaller}"
        )
    return data


def check_item_size(size: int, where: str) -> None:
    """One conversation over the limit would be tokenized in one piece (minutes,
    gigabytes) only to be too long for any server's context."""
    if size > MAX_CONVERSATION_BYTES:
        raise SpecError(
            f"{where}: the conversation is over {MAX_CONVERSATION_BYTES >> 20} MiB "
            "(about 1M tokens, more than any model's context); shorten or drop it"
        )


def _whole_array(data: bytes) -> list[Any] | None:
    """The file as one JSON array of items, or None when it is JSONL (whose lines may
    themselves be arrays: a messages list per line, or one such line alone)."""
    if not data.lstrip().startswith(b"["):
        return None
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None  # several lines, each a JSON value
    if not isinstance(whole, list) or _is_messages(whole):
        return None
    return whole


def _is_messages(value: list[Any]) -> bool:
    return bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def loads(data: bytes, where: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SpecError(
            f"--dataset {where}: not JSON ({exc}); expected ShareGPT JSON, "
            "JSONL (messages, {prompt}) or a Weka/Mooncake trace"
        ) from None


def detect_format(path: Path) -> str:
    """The RunSpec.dataset_format of the first item (a directory is Weka traces)."""
    if path.is_dir():
        return "weka"
    for where, item in _items_of(path, read_bounded(path, keep=True)):
        return item_format(where, item)
    raise SpecError(f"--dataset {path}: no records in the file")


def item_format(where: str, item: Any) -> str:
    """The RunSpec.dataset_format a dataset's first item shows."""
    if isinstance(item, list):
        return "jsonl"
    if isinstance(item, dict):
        if "requests" in item:
            return "weka"
        if "input_length" in item and "hash_ids" in item:
            return "mooncake"
        if "conversations" in item:
            return "sharegpt"
        if "messages" in item or "prompt" in item:
            return "jsonl"
    raise SpecError(
        f"--dataset {where}: unknown format; use --dataset-format {'|'.join(FORMAT_CHOICES[1:])}"
    )
