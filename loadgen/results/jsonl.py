"""The per-request JSONL file: one line per finished request, written as it finishes."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import sys
from pathlib import Path

import msgspec

from loadgen.records import RequestRecord
from loadgen.results.files import ResultsWriteError
from loadgen.results.point import ResultFileError, field_message


class JsonlSink:
    """Appends each record as one JSON line the moment it is finished.

    Each line goes to the OS with write(2) on an unbuffered descriptor (no flush that
    could push half a line), so a crash or Ctrl-C loses nothing already measured. A
    write that fails part-way (disk full, I/O error, file size limit) is cut back to the
    last whole line before ResultsWriteError is raised: the file never ends in a torn
    line. After a failure the sink takes no more lines (`dropped` counts them).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # O_EXCL: records of two runs never share a file, and none is ever replaced
            self._fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o666
            )
        except OSError as exc:
            raise ResultsWriteError(path, exc) from None
        self._size = os.fstat(self._fd).st_size  # end of the last whole line
        self._closed = False
        self.failed = False
        self.count = 0
        self.dropped = 0

    def write(self, record: RequestRecord) -> None:
        if self.failed or self._closed:
            self.dropped += 1
            return
        line = record.to_json() + b"\n"
        rest = memoryview(line)
        try:
            while rest:  # write(2) may take part of it (a full disk takes what fits)
                rest = rest[os.write(self._fd, rest) :]
        except OSError as exc:
            self.failed = True
            self.dropped += 1
            self._cut_back()
            raise ResultsWriteError(
                self.path,
                exc,
                f"its {self.count} records before this one are intact (no torn line)",
            ) from None
        self._size += len(line)
        self.count += 1

    def _cut_back(self) -> None:
        """Drop a partly written line; on a disk that fails even this, the reader
        (read_jsonl) still skips a last line without its newline."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self.failed:
                os.fsync(self._fd)
        except OSError as exc:
            self.failed = True
            raise ResultsWriteError(
                self.path,
                exc,
                f"{self.count} records were written but may not all have reached the disk",
            ) from None
        finally:
            os.close(self._fd)

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_RECORD = msgspec.json.Decoder(RequestRecord)


def read_jsonl(path: Path) -> list[RequestRecord]:
    """Records from a JSONL file, each decoded against RequestRecord; a torn last line
    (killed mid-write) is left out and said, in one line, as every record before it is
    kept. Any other line that is not a record this loadgen wrote is a ResultFileError
    naming the file, the line and the field."""
    records: list[RequestRecord] = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.endswith(b"\n"):
                print(
                    f"loadgen: WARNING: {path}: line {number} is torn (no newline: the run "
                    f"was stopped while writing it); read without it, "
                    f"{len(records)} records before it",
                    file=sys.stderr,
                )
                break
            records.append(_record(line, f"{path}: line {number}"))
    return records


def _record(line: bytes, where: str) -> RequestRecord:
    try:
        record = _RECORD.decode(line)
    except msgspec.ValidationError as exc:
        raise ResultFileError(f"{where}: {field_message(exc)}") from None
    except msgspec.DecodeError as exc:
        raise ResultFileError(f"{where}: not a JSON record ({exc})") from None
    problem = impossible(record)
    if problem:
        raise ResultFileError(f"{where}: {problem}: not a record loadgen wrote")
    return record


def impossible(record: RequestRecord) -> str | None:
    """What no measured record can hold (a forged or corrupted line)."""
    if len(record.chunk_ns) != len(record.chunk_tokens):
        return "chunk_ns and chunk_tokens differ in length"
    if any(t < 0 for t in record.chunk_tokens):
        return "field 'chunk_tokens': a negative token count"
    if record.output is not None and record.output.token_ids is not None:
        try:
            ids = base64.b64decode(record.output.token_ids, validate=True)
        except binascii.Error:
            return "field 'output.token_ids': not base64"
        if len(ids) % 4:
            return "field 'output.token_ids': not whole uint32 token ids"
    # Stamps are not held to an order: kernel stamps map onto the monotonic clock with
    # an error of microseconds, and a read-back file must never lose real measurements.
    return None
