"""The per-request JSONL file: one line per finished request, written as it finishes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

import orjson

from loadgen.records import RequestRecord


class JsonlSink:
    """Appends each record as one JSON line the moment it is finished.

    Each line is written with one write() call and flushed to the OS, so a crash or
    Ctrl-C loses nothing already measured and never leaves half a line behind a record.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = open(path, "ab")  # noqa: SIM115 - lives as long as the sink
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        self._file.write(record.to_json() + b"\n")
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path) -> list[RequestRecord]:
    """Records from a JSONL file; a torn last line (killed mid-write) is ignored."""
    records = []
    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break
            records.append(RequestRecord.from_dict(orjson.loads(line)))
    return records
