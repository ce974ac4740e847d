"""The vLLM-shaped --save-result file: vLLM 0.32's keys, and what InferenceX's scripts need.

InferenceX's code is not vendored here. The keys and arithmetic below were read from
SemiAnalysisAI/InferenceX utils/process_result.py, utils/aggregate_power.py and
utils/compare_results.py (main at commit 843c6254ff69, 2026-08-21); the few derivations
the dashboard shows are re-implemented in `inferencex_derivations` to compare with
loadgen's own figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings

from loadgen.config.spec import VllmResultOptions
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.summary import PointContext
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.point import PointResult
from loadgen.sinks.vllm_result import inferencex_safe, result_path, vllm_result, write_vllm_result
from tests.support.fake_records import MS, completed_records, failed_record, full_point, make_record
from tests.support.inferencex import check_power_window, inferencex_derivations

# process_result.py reads these directly: int(max_concurrency) is the `conc`, model_id the
# `model`, and float() of total_token_throughput and output_throughput / num_gpus give
# tput_per_gpu, output_tput_per_gpu and input_tput_per_gpu.
PROCESS_RESULT_KEYS = ("max_concurrency", "model_id", "total_token_throughput", "output_throughput")
# compare_results.py reads, from process_result's output, tput_per_gpu and
# median/p90/p99/p99.9 of ttft, intvty (from tpot) and e2el.
COMPARE_STATS = ("median", "p90", "p99", "p99.9")
# vLLM 0.32 serve.py: the keys of `benchmark()`'s result and main's header keys.
VLLM_KEYS = (
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "latencies",
    "queue_times",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
)
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "errors")


def spec_snapshots() -> tuple[ServerSnapshot, ServerSnapshot]:
    names = (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    )
    before = ServerSnapshot(
        dict(zip(names, (10.0, 20.0, 5.0), strict=True)),
        {"vllm:spec_decode_num_accepted_tokens_per_pos_total": {"0": 3.0, "1": 2.0}},
    )
    after = ServerSnapshot(
        dict(zip(names, (110.0, 220.0, 165.0), strict=True)),
        {"vllm:spec_decode_num_accepted_tokens_per_pos_total": {"0": 93.0, "1": 72.0}},
    )
    return before, after


def point_struct(records: list[RequestRecord], **ctx: Any) -> PointResult:
    before, after = spec_snapshots()
    context = PointContext(conc=4, input_len=100, output_len=2, num_gpus=8, **ctx)
    point: PointResult = full_point(records, context, server_before=before, server_after=after)
    return point


def point(records: list[RequestRecord], **ctx: Any) -> dict[str, Any]:
    """The point in its file form, which the vLLM-format writer reads."""
    return point_struct(records, **ctx).to_json()


def test_file_has_vllm_keys_and_what_inferencex_reads() -> None:
    records = [
        make_record(
            i,
            start_ns=(1000 + i) * MS,
            offsets_ns=(10 * MS, (20 + i) * MS),
            tokens=(1, 3),
            sent_unix=1.7e9 + i / 1000,
        )
        for i in range(5)
    ]
    result = point(records)
    bmk = vllm_result(result, records, VllmResultOptions(model_id="deepseek-ai/DSv4"))
    assert set(VLLM_KEYS) <= set(bmk) and not set(DETAILED) & set(bmk)
    assert set(PROCESS_RESULT_KEYS) <= set(bmk) and bmk["model_id"] == "deepseek-ai/DSv4"
    check_power_window(bmk)
    derived = inferencex_derivations(bmk, num_gpus=8)
    for metric in ("ttft", "intvty", "e2el"):
        assert all(f"{stat}_{metric}" in derived for stat in COMPARE_STATS)
    # the dashboard's numbers are loadgen's
    assert derived["tput_per_gpu"] == pytest.approx(result["total_token_throughput_per_gpu"])
    assert derived["p99_ttft"] == pytest.approx(result["p99_ttft_ms"] / 1000)
    assert derived["median_intvty"] == pytest.approx(1000 / result["median_tpot_ms"])
    # 5 requests (odd): the median of 1/TPOT is 1/median TPOT, loadgen's interactivity
    assert derived["median_intvty"] == pytest.approx(result["median_interactivity_tok_s_user"])
    # vLLM's spec-decode block, from the server counters (rate in percent)
    assert bmk["spec_decode_acceptance_rate"] == pytest.approx(80.0)
    assert bmk["spec_decode_acceptance_length"] == pytest.approx(2.6)
    assert (
        bmk["spec_decode_num_drafts"],
        bmk["spec_decode_draft_tokens"],
        bmk["spec_decode_accepted_tokens"],
    ) == (100, 200, 160)
    assert bmk["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.9, 0.7])


@settings(max_examples=60, deadline=None)
@given(completed_records(max_records=6))
def test_every_ms_and_tpot_key_survives_process_result(records: list[RequestRecord]) -> None:
    """Any point, including single-token outputs (TPOT undefined) and one request (std 0)."""
    records = [*records, make_record(len(records), offsets_ns=(5 * MS,), tokens=(1,))]
    bmk = vllm_result(point(records), records, VllmResultOptions(detailed=True))
    inferencex_derivations(bmk, num_gpus=1)  # no TypeError, no ZeroDivisionError
    for key, value in bmk.items():
        if key.endswith("ms") or "tpot" in key:  # seconds: any number; 1000/x: non-zero
            assert isinstance(value, float), key
            assert value != 0.0 or "tpot" not in key, key


def test_statistics_without_samples_are_left_out() -> None:
    """All failed: loadgen's nulls (and its zero counts) never reach the file."""
    records = [failed_record(i, ErrorKind.HTTP) for i in range(3)]
    result = point(records)
    assert result["mean_ttft_ms"] is None and result["tpot_excluded_single_token"] == 0
    bmk = vllm_result(result, records, VllmResultOptions(detailed=True))
    assert not [k for k in bmk if k.endswith("ms") or "tpot" in k]
    inferencex_derivations(bmk, num_gpus=1)
    assert bmk["ttfts"] == [0.0] * 3 and bmk["latencies"] == [0.0] * 3  # vLLM's convention
    assert all(e.startswith("http") for e in bmk["errors"])


def test_detailed_lists_match_the_records() -> None:
    records = [
        make_record(
            1, start_ns=2000 * MS, offsets_ns=(30 * MS, 35 * MS, 45 * MS), tokens=(1, 2, 2)
        ),
        make_record(0, start_ns=1000 * MS, offsets_ns=(10 * MS, 20 * MS)),
        failed_record(2, ErrorKind.DISCONNECT, start_ns=3000 * MS),
    ]
    bmk = vllm_result(
        point(records),
        records,
        VllmResultOptions(
            detailed=True, percentile_metrics=("client_queue_time",), metric_percentiles=(50.0,)
        ),
    )
    assert bmk["input_lens"] == [100, 100, 100] and bmk["output_lens"] == [2, 5, 0]
    assert bmk["ttfts"] == pytest.approx([0.010, 0.030, 0.0])
    assert bmk["itls"] == [pytest.approx([0.010]), pytest.approx([0.005, 0.010]), []]
    assert bmk["latencies"] == pytest.approx([0.020, 0.045, 0.0])
    assert bmk["start_times"] == pytest.approx([1.0, 2.0, 3.0])
    # closed loop (rate inf): every request arrived at the start, as vLLM's semaphore wait
    assert bmk["queue_times"] == pytest.approx([0.0, 1.0, 2.0])
    assert bmk["median_client_queue_time_ms"] == pytest.approx(500.0)  # completed ones only
    assert "mean_ttft_ms" not in bmk  # only the metrics asked for


def test_metadata_label_and_file_names(tmp_path: Path) -> None:
    records = [make_record(i, sent_unix=1.7e9) for i in range(3)]
    options = VllmResultOptions(
        filename="dsv4_8k1k",
        metadata=(("tp", "8"), ("run", "a")),
        label="nightly",
        model_id="org/Model-X",
    )
    path = write_vllm_result(tmp_path, point_struct(records), records, options, points=1)
    assert path == tmp_path / "dsv4_8k1k.json"
    bmk = orjson.loads(path.read_bytes())
    assert (bmk["tp"], bmk["run"], bmk["label"]) == ("8", "a", "nightly")
    assert result_path(tmp_path, options, bmk, points=3) == tmp_path / "dsv4_8k1k_conc4.json"
    unnamed = VllmResultOptions(result_dir=tmp_path / "vllm")
    assert result_path(tmp_path, unnamed, bmk, points=3) == (
        tmp_path / "vllm" / f"vllm-infqps-concurrency4-Model-X-{bmk['date']}.json"
    )


def test_inferencex_safe_rules() -> None:
    fields = {
        "a_ms": None,
        "b_ms": 0.0,
        "std_tpot_ms": 0.0,
        "tpot_excluded_single_token": 0,
        "goodput_slos_ms": {"ttft": 1.0},
        "p99_tpot_ms": 2.0,
        "ttfts": [0.0],
    }
    assert inferencex_safe(fields) == {"b_ms": 0.0, "p99_tpot_ms": 2.0, "ttfts": [0.0]}
    assert np.isfinite(
        inferencex_derivations(
            {
                "max_concurrency": 1,
                "total_token_throughput": 1,
                "output_throughput": 1,
                **inferencex_safe(fields),
            },
            1,
        )["p99_intvty"]
    )
