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
    """The file's bytes, never more than the limit: a device (/dev/zero) or a FIFO has no
    size to check beforehand and would be read until memory runs out, or block. The bytes
    detection kept are taken over if the file is unchanged; `keep`: hold them for the
    next reader (detection)."""
    try:
        if not path.is_file():  # stat only: a FIFO is not opened, so nothing blocks
            raise SpecError(
                f"--dataset {path}: not a regular file (a device, FIFO or socket "
                "cannot be a dataset); give a JSON or JSONL file or a directory"
            )
        # the size first (a large file is refused without reading it), then a bounded read
        # (the file may grow, or be a /proc-like file whose size says 0)
        status = path.stat()
        identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        too_big = status.st_size > MAX_DATASET_BYTES
        held = _held.pop(identity, None)
        data = b"" if too_big else held if held is not None else _read_at_most(path)
    except OSError as exc:
        raise SpecError(f"--dataset {path}: cannot read it ({exc.strerror or exc})") from None
    if too_big or len(data) > MAX_DATASET_BYTES:
        raise SpecError(
            f"--dataset {path}: over the {MAX_DATASET_BYTES >> 30} GiB limit (read "
            "into memory); split it or keep only the conversations you need"
        )
    _held.clear()  # never more than one file's bytes held
    if keep:
        _held[identity] = data
    return data


def _read_at_most(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(MAX_DATASET_BYTES + 1)


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
