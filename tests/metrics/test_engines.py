"""Engine dialects read each engine's own /metrics text (as transcribed from its source into
tests/fixtures/engines/) into the figures loadgen publishes, with vLLM's meaning."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.metrics.acceptance import server_acceptance
from loadgen.metrics.agentic import PREFIX_HITS, PREFIX_QUERIES
from loadgen.metrics.engines import DIALECTS, SGLANG, dialect, engine_by_names
from loadgen.metrics.frontend import FRONTEND_SERIES, frontend_fields
from loadgen.metrics.server import (
    KV_USAGE,
    RUNNING,
    WAITING,
    ServerSnapshot,
    gauge_samples,
    parse_metrics,
    server_latency_means,
)
from tests.support.paths import FIXTURES

ENGINES = FIXTURES / "engines"
ZERO = ServerSnapshot()


def fixture_text(engine: str) -> str:
    return (ENGINES / engine / "metrics.txt").read_text()


def canonical(engine: str) -> ServerSnapshot:
    return dialect(engine).canonical(parse_metrics(fixture_text(engine)))


def zero_of(snapshot: ServerSnapshot) -> ServerSnapshot:
    """The same series all at 0 (a server just started): the fixture's values are the delta."""
    return ServerSnapshot(
        samples=dict.fromkeys(snapshot.samples, 0.0),
        keyed={name: dict.fromkeys(by_key, 0.0) for name, by_key in snapshot.keyed.items()},
    )


@pytest.mark.parametrize("engine", ["trtllm", "atom"])
def test_counter_engines_give_vllm_acceptance(engine: str) -> None:
    """Both fixtures hold 100 steps of K=3 with 210 of 300 drafts accepted (90/70/50 by
    position): AL 3.1, rate 0.7, per position 0.9/0.7/0.5, as vLLM's counters would."""
    after = canonical(engine)
    got = server_acceptance(zero_of(after), after)
    assert got["server_acceptance_length"] == pytest.approx(3.1)
    assert got["server_acceptance_rate"] == pytest.approx(0.7)
    assert got["server_acceptance_per_position"] == pytest.approx([0.9, 0.7, 0.5])
    assert got["server_spec_tokens"] == 3
    assert (got["server_spec_decode_drafts"], got["server_spec_decode_accepted_tokens"]) == (
        100,
        210,
    )


def test_sglang_gauges_never_become_a_server_acceptance() -> None:
    """SGLang's spec_accept_length is 2.4 in the fixture: a gauge, so no server AL at all,
    and the reason is there for run.json."""
    after = canonical("sglang")
    assert parse_metrics(fixture_text("sglang")).get("sglang:spec_accept_length") == 2.4
    got = server_acceptance(zero_of(after), after)
    assert all(value is None for value in got.values())
    assert "gauges" in SGLANG.missing["server_acceptance_length"]


def test_llamacpp_has_no_server_acceptance() -> None:
    after = canonical("llamacpp")
    assert all(v is None for v in server_acceptance(zero_of(after), after).values())


@pytest.mark.parametrize(
    ("engine", "ttft_ms", "queue_ms"),
    [("sglang", 150.0, 20.0), ("trtllm", 150.0, 20.0), ("atom", None, None)],
)
def test_latency_means_from_the_engines_histograms(
    engine: str, ttft_ms: float | None, queue_ms: float | None
) -> None:
    after = canonical(engine)
    means = server_latency_means(zero_of(after), after)
    assert means["server_mean_ttft_ms"] == (None if ttft_ms is None else pytest.approx(ttft_ms))
    assert means["server_mean_queue_time_ms"] == (
        None if queue_ms is None else pytest.approx(queue_ms)
    )
    # SGLang's ITL histogram counts tokens, TRT-LLM and ATOM have none: never published
    assert means["server_mean_itl_ms"] is None


@pytest.mark.parametrize("engine", ["sglang", "trtllm", "atom"])
def test_prefix_counters_map_to_vllms(engine: str) -> None:
    after = canonical(engine)
    assert (after.get(PREFIX_QUERIES), after.get(PREFIX_HITS)) == (1000.0, 400.0)


@pytest.mark.parametrize(
    ("engine", "kv", "waiting", "running"),
    [
        ("sglang", 0.25, 1.0, 3.0),
        ("trtllm", 0.3, 0.0, 4.0),
        ("atom", 0.2, 0.0, 3.0),
        ("llamacpp", None, 0.0, 2.0),
    ],
)
def test_gauges_by_line_scan(engine: str, kv: float | None, waiting: float, running: float) -> None:
    got = gauge_samples(fixture_text(engine), dialect(engine).gauge_names())
    assert (got.get(KV_USAGE), got.get(WAITING), got.get(RUNNING)) == (kv, waiting, running)


@pytest.mark.parametrize("engine", ["sglang", "trtllm", "atom", "llamacpp"])
def test_every_series_a_dialect_reads_is_in_its_fixture(engine: str) -> None:
    """Names confirmed against the engine's source: nothing read that the engine lacks."""
    families = text_string_to_metric_families(fixture_text(engine))
    samples = {s.name for family in families for s in family.samples}
    d = dialect(engine)
    read = set(d.renames) | set(d.gauges)
    assert read <= samples, read - samples
    assert engine_by_names(samples) is d


def test_vllm_is_the_identity() -> None:
    snapshot = parse_metrics((FIXTURES / "vllm_0.32_cpu" / "metrics.txt").read_text())
    assert DIALECTS["vllm"].canonical(snapshot) is snapshot
    assert engine_by_names(snapshot.samples).name == "vllm"  # type: ignore[union-attr]


DYNAMO_CAPTURES = FIXTURES / "dynamo_1.4.2"


def test_a_dynamo_frontend_is_named_by_its_own_series() -> None:
    """Real Dynamo 1.4.2 captures: the frontend alone is Dynamo; its worker serves vLLM's
    names (the mocker's engine type), and beside a worker the worker's engine is read."""
    frontend = parse_metrics((DYNAMO_CAPTURES / "frontend_metrics.txt").read_text())
    worker = parse_metrics((DYNAMO_CAPTURES / "worker_metrics.txt").read_text())
    assert engine_by_names(frontend.samples) is DIALECTS["dynamo"]
    assert engine_by_names(worker.samples) is DIALECTS["vllm"]
    assert engine_by_names([*frontend.samples, *worker.samples]) is DIALECTS["vllm"]


def test_the_dynamo_dialect_keeps_the_frontends_series_and_says_what_it_lacks() -> None:
    frontend = parse_metrics((DYNAMO_CAPTURES / "frontend_metrics.txt").read_text())
    kept = DIALECTS["dynamo"].canonical(frontend)
    assert kept.samples and all(name.startswith(FRONTEND_SERIES) for name in kept.samples)
    assert "dynamo_component_router_kv_hit_rate_count" in kept.samples  # the router's: kept
    assert server_latency_means(zero_of(kept), kept)["server_mean_ttft_ms"] is None
    assert "DYN_SYSTEM_PORT" in DIALECTS["dynamo"].missing["server_mean_ttft_ms"]


def test_the_frontends_own_figures_read_from_the_real_capture() -> None:
    """metrics/frontend.py over the real frontend's text: its requests_total is split by
    endpoint and status labels, and every label set counts."""
    text = (DYNAMO_CAPTURES / "frontend_metrics.txt").read_text()
    kept = DIALECTS["dynamo"].canonical(parse_metrics(text))
    families = text_string_to_metric_families(text)
    total = sum(
        s.value for f in families for s in f.samples if s.name == "dynamo_frontend_requests_total"
    )
    fields = frontend_fields(zero_of(kept), kept)
    assert total > 0 and fields["frontend_requests"] == total
    assert fields["frontend_mean_ttft_ms"] is not None and fields["frontend_mean_ttft_ms"] > 0


def test_the_kv_routers_prefix_hits_read_from_the_real_capture() -> None:
    """The real 1.4.2 frontend with `--router-mode kv` after 16 multi-turn requests and the
    preflight's one (the fixture's README): the router's mean predicted hit rate per
    routed request; the workers reported no cached tokens, so that figure is null, said."""
    text = (DYNAMO_CAPTURES / "router_kv_frontend_metrics.txt").read_text()
    kept = DIALECTS["dynamo"].canonical(parse_metrics(text))
    fields = frontend_fields(zero_of(kept), kept)
    assert fields["router_routed_requests"] == 17
    assert fields["router_kv_hit_rate"] == pytest.approx(4 * (4 / 6 + 5 / 7 + 6 / 8) / 17)
    assert fields["frontend_cached_tokens"] is None is fields["frontend_prefix_hit_rate"]
    assert "for 0 of the 17 requests" in fields["frontend_prefix_null_reason"]
