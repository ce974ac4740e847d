"""The per-URL rows of --server-metrics (metrics/server_urls.py) as typed rows: a key a
row does not have (a URL not scraped, `loadgen merge`'s rows without latency bounds, no
role) stays absent from the point file, not null, and the file reads back to the rows."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson

from loadgen.metrics.server import KV_USAGE, RUNNING, ServerSnapshot, parse_metrics
from loadgen.metrics.server_urls import per_url_fields
from loadgen.results.point import ServerUrlFigures, point_from_json
from tests.support.fake_records import point_file

COUNTER_KEYS = {
    "server_acceptance_length",
    "server_mean_ttft_ms",
    "server_requests",
    "server_acceptance_invalid_reason",
}


def test_rows_keep_absent_keys_absent_and_read_back(vllm_fixtures: Path) -> None:
    # a real vLLM CPU capture, against an empty start: its whole counters are the point's
    after = parse_metrics((vllm_fixtures / "metrics.txt").read_text())
    before = ServerSnapshot(samples=dict.fromkeys(after.samples, 0.0))
    seen, lost = "http://a/metrics", "http://b/metrics"
    rows = per_url_fields(
        [seen, lost],
        {seen: before, lost: None},
        {seen: after, lost: None},
        {seen: {KV_USAGE: [0.25, 0.5], RUNNING: [2.0, 4.0]}},
    )
    assert all(isinstance(row, ServerUrlFigures) for row in rows)
    scraped, unscraped = msgspec.to_builtins(rows)
    assert list(scraped)[:2] == ["url", "scraped"] and scraped["scraped"] is True
    assert set(scraped) >= COUNTER_KEYS and scraped["server_requests"] > 0
    # no client maxima (loadgen merge): no latency verdict, not a null one
    assert "server_latency_invalid_reason" not in scraped
    assert (scraped["kv_cache_usage_max"], scraped["requests_running_mean"]) == (0.5, 3.0)
    assert unscraped["scraped"] is False and not COUNTER_KEYS & set(unscraped)
    assert unscraped["gauge_samples"] == 0 and unscraped["kv_cache_usage_mean"] is None
    assert "role" not in scraped

    roled = [msgspec.structs.replace(rows[0], role="prefill"), rows[1]]
    by_url = msgspec.to_builtins(roled)
    written = orjson.loads(orjson.dumps(point_file({"server_metrics_by_url": by_url})))
    point = point_from_json(written, "test")
    assert point.server_metrics_by_url == roled
    assert point.to_json()["server_metrics_by_url"] == written["server_metrics_by_url"]
    assert list(written["server_metrics_by_url"][0])[-1] == "role"
