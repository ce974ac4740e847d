"""E2E normalized interactivity against InferenceX's own arithmetic, on the records of a
real simulator run.

InferenceX's code is not vendored here (it never enters the repository, and CI has no
network). `inferencex_e2e_norm_intvty` re-implements, line for line, what
SemiAnalysisAI/InferenceX utils/agentic/aggregation/request_metrics.py
(`_metric_value`, `_e2e_normalized_interactivity_stats`, `_interactivity_stats`) and
utils/agentic/aggregation/aggregation_common.py (`percentile`, `stats_for`, `to_float`)
do at commit 843c6254ff69b567f772f6a5fd97675af3d04431 (2026-08-21), in pure Python
(`statistics`, sorted lists), apart from loadgen's numpy. Their records are aiperf's
profile_export.jsonl rows; loadgen's per-request records are put in that shape
(`request_latency` in ms, `output_sequence_length`).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.metrics.e2e_norm import FIELDS, e2e_norm_intvty_fields
from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from tests.support.procs import point, run_loadgen

# aggregation_common.py -------------------------------------------------------------


def _percentile(data: list[float], p: float) -> float:
    if not data:
        return 0.0
    sorted_data = sorted(data)
    k = (len(sorted_data) - 1) * (p / 100)
    f = int(k)
    c = f + 1
    if c >= len(sorted_data):
        return sorted_data[f]
    return sorted_data[f] + (k - f) * (sorted_data[c] - sorted_data[f])


def _to_float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# request_metrics.py ----------------------------------------------------------------


def _metric_value(record: dict[str, Any], key: str) -> Any:
    metric = record.get("metrics", {}).get(key)
    if isinstance(metric, dict):
        return metric.get("value")
    return metric


def inferencex_e2e_norm_intvty(
    records: list[dict[str, Any]], extra: tuple[int, ...] = ()
) -> dict[str, float]:
    """Their `_e2e_normalized_interactivity_stats`; `extra`: percentiles beyond their
    stats_for's (loadgen's p99), by the same `percentile` and inversion."""
    ratios: list[float] = []
    for record in records:
        e2el_ms = _to_float(_metric_value(record, "request_latency"))
        osl = _to_float(_metric_value(record, "output_sequence_length"))
        if (
            e2el_ms is None
            or osl is None
            or not math.isfinite(e2el_ms)
            or not math.isfinite(osl)
            or e2el_ms <= 0
            or osl <= 0
        ):
            continue
        ratios.append(e2el_ms / 1000.0 / osl)
    if not ratios:
        return {}
    stats = {  # stats_for("e2el_per_osl", ...)
        "mean": statistics.mean(ratios),
        **{f"p{p}": _percentile(ratios, p) for p in (50, 75, 90, 95, *extra)},
    }
    out = {f"{key}_e2e_norm_intvty": 1.0 / value for key, value in stats.items() if value > 0}
    per_request = [1.0 / value for value in ratios if value > 0]
    out["std_e2e_norm_intvty"] = statistics.pstdev(per_request) if len(per_request) > 1 else 0.0
    return out


def aiperf_row(record: RequestRecord) -> dict[str, Any]:
    """A loadgen record as an aiperf profile_export row (what their loader keeps: no error)."""
    e2el_ms = (record.chunk_ns[-1] - record.start_ns) / 1e6 if record.chunk_ns else None
    return {
        "metrics": {
            "request_latency": {"value": e2el_ms, "unit": "ms"},
            "output_sequence_length": {"value": record.output_tokens, "unit": "tokens"},
        },
        "error": None if record.ok else str(record.error),
    }


def test_point_fields_equal_inferencex_on_a_simulator_run(tmp_path: Path) -> None:
    results = tmp_path / "r"
    done = run_loadgen(
        [
            "--sim",
            "--sim-args",
            "--step-fixed-ms 2 --spin-us 0",
            "--conc",
            "6",
            "--isl",
            "64",
            "--osl",
            "48",
            "--range-ratio",
            "0.2",  # output lengths 9..48: E2EL/OSL differs per request
            "--encoder",
            "raw",
            "--prompts-per-conc",
            "20",
            "--warmup-per-conc",
            "0",
            "--no-progress",
            "--results",
            str(results),
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_jsonl(results / "requests_conc_6.jsonl")
    rows = [aiperf_row(r) for r in records if r.ok]  # their loader drops error rows
    assert len(rows) == 120 and len({r.output_tokens for r in records}) > 5
    theirs = inferencex_e2e_norm_intvty(rows, extra=(99,))
    mine = point(results, 6)
    assert set(theirs) == set(FIELDS)
    for key, value in theirs.items():
        assert mine[key] == pytest.approx(value, rel=1e-9, abs=0), key
    # the slow tail: p90 of seconds per token, inverted, is below the median rate
    assert mine["p90_e2e_norm_intvty"] < mine["p50_e2e_norm_intvty"]


def test_requests_without_a_positive_length_or_latency_are_left_out() -> None:
    e2el = np.array([100.0, 200.0, 0.0, 50.0, math.inf])
    osl = np.array([10, 0, 5, 5, 5], dtype=np.int64)
    mine = e2e_norm_intvty_fields(e2el, osl)
    rows = [
        {"metrics": {"request_latency": e, "output_sequence_length": int(o)}}
        for e, o in zip(e2el, osl, strict=True)
    ]
    theirs = inferencex_e2e_norm_intvty(rows, extra=(99,))
    assert mine == pytest.approx(theirs, rel=1e-12)
    assert mine["p50_e2e_norm_intvty"] == pytest.approx(1 / ((0.01 + 0.01) / 2))
    nothing = e2e_norm_intvty_fields(np.array([0.0]), np.array([3], dtype=np.int64))
    assert nothing == dict.fromkeys(FIELDS)
