"""--trace FILE: the simulator's ground truth, one JSON line per request that reached the engine.

{"x_request_id", "arrival_ns", "first_sched_ns", "prompt_tokens",
 "chunks": [[intended_ns, sent_ns, tokens], ...], "completion_tokens", "finish_reason",
 "reasoning_tokens", "answer_tokens", "first_answer_chunk"}
The last three are a thinking request's phases as generated (accounting.thinking_truth),
null for a request that did not think.
Times are time.perf_counter_ns() (CLOCK_MONOTONIC, comparable across processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import orjson


class TraceWriter:
    def __init__(self, path: str | Path) -> None:
        self._file: IO[bytes] = Path(path).open("wb")  # noqa: SIM115 - closed by close()

    def write(self, record: dict[str, Any]) -> None:
        # Flushed per request so a reader sees every finished request while we still serve.
        self._file.write(orjson.dumps(record) + b"\n")
        self._file.flush()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    with Path(path).open("rb") as handle:
        return [orjson.loads(line) for line in handle if line.strip()]
