"""Each client process's health as a typed row (run/client_health.py), combined into the
point's client_* fields, and a point file from before `event_loop` still reading."""

from __future__ import annotations

import msgspec
import orjson

from loadgen.results.point import ClientProcess, point_from_json
from loadgen.run.client_health import ProcessHealth, client_health
from tests.support.fake_records import point_file


def test_processes_combine_and_a_file_without_event_loop_reads() -> None:
    worker = ProcessHealth("shard 0/1 worker 1/2", 3, 40, 0.02, (1_000_000, 3_000_000), "uvloop")
    parent = ProcessHealth("parent", 0, 0, 0.01, ())  # stamps nothing: no loop lag
    rows = [parent.figures(), worker.figures()]
    assert all(isinstance(row, ClientProcess) for row in rows)
    assert rows[1].cpu_per_chunk_us == 0.02 / 40 * 1e6 and rows[1].loop_lag_max_ms == 3.0
    assert rows[0].cpu_per_chunk_us is None and rows[0].loop_lag_p99_ms is None

    health = client_health(rows, chunks=40, clock_uncertainty_ms=0.0)
    assert health.client_cpu_seconds == 0.03
    assert health.client_loop_lag_max_ms == 3.0  # the lagging process's, not the parent's
    assert health.client_loop_lag_samples == 2

    older = msgspec.to_builtins(rows)
    del older[1]["event_loop"]  # a loadgen before the field
    written = orjson.loads(orjson.dumps(point_file({"client_processes": older})))
    point = point_from_json(written, "test")
    assert point.client.client_processes[1] == msgspec.structs.replace(rows[1], event_loop=None)
