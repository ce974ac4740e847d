"""--step-log FILE: the simulator's engine steps, the ground truth for step reconstruction.

One JSON line per step: {"engine", "step", "start_ns", "end_ns", "sent_ns", "sent_end_ns",
"requests",
"decode_requests", "decode_tokens", "output_tokens", "prefill_tokens", "chunks",
"prefill_done": [x_request_id, ...]}. start/end are the step's scheduled times (the
end is when its chunks are due), sent_ns and sent_end_ns when its chunks' writing began
and ended (later than the end when the simulator falls behind its schedule); all are
time.perf_counter_ns() (CLOCK_MONOTONIC, the clock loadgen's records use).

Lines are serialised after the step's chunks are written and kept in memory until
FLUSH_BYTES accumulate (and at exit), so the log costs the step schedule one small
orjson call and no system call per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import orjson

FLUSH_BYTES = 1 << 20


class StepLog:
    def __init__(self, path: str | Path) -> None:
        self._file: IO[bytes] = Path(path).open("wb")  # noqa: SIM115 - closed by close()
        self._buffer = bytearray()

    def write(self, step: dict[str, Any]) -> None:
        self._buffer += orjson.dumps(step)
        self._buffer += b"\n"
        if len(self._buffer) >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self._file.write(self._buffer)
            self._buffer.clear()
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()


def read_step_log(path: str | Path) -> list[dict[str, Any]]:
    with Path(path).open("rb") as handle:
        return [orjson.loads(line) for line in handle if line.strip()]
