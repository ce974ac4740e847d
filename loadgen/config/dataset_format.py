"""--dataset files: reading their items and detecting their format (--dataset-format).

A directory is a Weka trace directory (one trace per `.json` file); a file is JSONL (or one
JSON array); the first item decides the format when it is `auto`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from loadgen.config.spec import SpecError

FORMATS = ("auto", "messages", "sharegpt", "weka", "mooncake")
TRACE_FORMATS = ("weka", "mooncake")


def items(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, JSON value) per trace file in a directory, per array item, or per line."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise SpecError(f"--dataset {path}: a trace directory needs *.json files")
        for file in files:
            yield str(file), loads(file.read_bytes(), str(file))
        return
    data = path.read_bytes()
    if data.lstrip().startswith(b"["):
        for number, item in enumerate(loads(data, str(path))):
            yield f"{path}[{number}]", item
        return
    for number, line in enumerate(data.splitlines(), 1):
        if line.strip():
            yield f"{path}:{number}", loads(line, f"{path}:{number}")


def loads(data: bytes, where: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SpecError(f"--dataset {where}: not JSON ({exc})") from None


def detect_format(path: Path) -> str:
    """The format of the first item (a directory is a Weka trace directory)."""
    if path.is_dir():
        return "weka"
    for where, item in items(path):
        if isinstance(item, list):
            return "messages"
        if isinstance(item, dict):
            if "requests" in item:
                return "weka"
            if "input_length" in item and "hash_ids" in item:
                return "mooncake"
            if "conversations" in item:
                return "sharegpt"
            if "messages" in item:
                return "messages"
        raise SpecError(f"--dataset {where}: unknown format; use --dataset-format "
                        f"{'|'.join(FORMATS[1:])}")
    raise SpecError(f"--dataset {path}: no records in the file")
