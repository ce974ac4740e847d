"""The server's counters held to what a server can have counted (issue 47, item 6): the
rules on snapshots parsed from /metrics text, and NaN/Inf as missing samples.

The end-to-end rows (a lying server over a real socket, the point file it leaves) are in
tests/client/test_lying_counters.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.metrics.acceptance import server_acceptance
from loadgen.metrics.frontend import frontend_fields
from loadgen.metrics.latency_bounds import ClientMaxima, bounded_means
from loadgen.metrics.server import (
    gauge_samples,
    parse_metrics,
    server_latency_means,
    server_spec_tokens,
)
from loadgen.metrics.summary import PointContext, summarize
from loadgen.results.point import flat_fields
from tests.support.fake_records import MS, make_record


def exposition(
    drafts: float = 0,
    draft_tokens: float = 0,
    accepted: float = 0,
    per_position: tuple[float, ...] = (),
    ttft: tuple[float, float] = (0, 0),
    frontend_ttft: tuple[float, float] = (0, 0),
    frontend_requests: float = 0,
    kv: float = 0.25,
) -> str:
    """vLLM's spec-decode counters, TTFT histogram and KV gauge, and a Dynamo frontend's
    TTFT histogram and request counter, as Prometheus text (values as given, any text)."""
    labels = 'engine="0",model_name="m"'
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens}",
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {v}'
            for i, v in enumerate(per_position)
        ),
        "# TYPE vllm:time_to_first_token_seconds histogram",
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {ttft[1]}',
        f"vllm:time_to_first_token_seconds_sum{{{labels}}} {ttft[0]}",
        f"vllm:time_to_first_token_seconds_count{{{labels}}} {ttft[1]}",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{labels}}} {kv}",
        "# TYPE dynamo_frontend_time_to_first_token_seconds histogram",
        f'dynamo_frontend_time_to_first_token_seconds_bucket{{le="+Inf"}} {frontend_ttft[1]}',
        f"dynamo_frontend_time_to_first_token_seconds_sum {frontend_ttft[0]}",
        f"dynamo_frontend_time_to_first_token_seconds_count {frontend_ttft[1]}",
        "# TYPE dynamo_frontend_requests counter",
        f"dynamo_frontend_requests_total {frontend_requests}",
    ]
    return "\n".join(lines) + "\n"


BEFORE = parse_metrics(exposition(per_position=(0, 0)))


def acceptance(spec_tokens: int | None = None, **after: Any) -> dict[str, Any]:
    return server_acceptance(BEFORE, parse_metrics(exposition(**after)), spec_tokens)


def test_honest_counters_of_a_real_vllm_capture_are_published(vllm_fixtures: Path) -> None:
    """A real vLLM 0.32 capture (K=3, every draft accepted: AL exactly K+1) against the same
    series at zero: nothing is impossible, so every figure is published."""
    text = (vllm_fixtures / "metrics.txt").read_text()
    zero = re.sub(r"^(vllm:[^#\s]+) \S+$", r"\1 0.0", text, flags=re.MULTILINE)
    result = server_acceptance(parse_metrics(zero), parse_metrics(text), 3)
    assert result["server_acceptance_invalid_reason"] is None
    assert result["server_acceptance_length"] == pytest.approx(4.0)
    assert result["server_acceptance_rate"] == pytest.approx(1.0)
    assert result["server_spec_tokens"] == 3


def test_accepted_above_drafts_voids_every_figure() -> None:
    """The issue's row: accepted > draft tokens gave AL 6.8 and rate 2.9 at K = 2."""
    result = acceptance(drafts=100, draft_tokens=200, accepted=580, per_position=(90, 80))
    assert result["server_acceptance_length"] is None and result["server_acceptance_rate"] is None
    assert result["server_acceptance_per_position"] is None
    assert result["server_spec_tokens"] is None and result["server_spec_decode_drafts"] is None
    assert (
        "accepted tokens 580 above draft tokens 200" in result["server_acceptance_invalid_reason"]
    )


def test_an_acceptance_length_above_k_plus_one_is_void() -> None:
    """K=2 known from the run: 300 draft tokens over 100 drafts and 260 accepted (AL 3.6)
    cannot come from a server that drafts 2 per step."""
    result = acceptance(2, drafts=100, draft_tokens=300, accepted=260)
    assert result["server_acceptance_length"] is None
    reason = result["server_acceptance_invalid_reason"]
    assert "acceptance length 3.60 above K+1 = 3" in reason
    assert "3.00 draft tokens per draft, above K = 2" in reason
    # the same counters with no K known apart from them: a K=3 server's, published
    assert acceptance(drafts=100, draft_tokens=300, accepted=260)[
        "server_acceptance_length"
    ] == pytest.approx(3.6)


def test_a_duplicated_series_is_caught() -> None:
    """The issue's duplicated series: the accepted counter's line served twice sums to
    twice the truth (AL 3.6 at K = 2)."""
    text = exposition(drafts=100, draft_tokens=200, accepted=130)
    line = next(x for x in text.splitlines() if x.startswith("vllm:spec_decode_num_accepted_tok"))
    doubled = parse_metrics(text.replace(line, f"{line}\n{line}"))
    result = server_acceptance(BEFORE, doubled, 2)
    assert result["server_acceptance_length"] is None
    assert "acceptance length 3.60 above K+1 = 3" in result["server_acceptance_invalid_reason"]


def test_a_position_accepted_more_often_than_drafts_or_past_k_is_void() -> None:
    over = acceptance(drafts=100, draft_tokens=200, accepted=150, per_position=(120, 30))
    assert over["server_acceptance_per_position"] is None
    assert (
        "120 accepted at draft position 0 of 100 drafts" in over["server_acceptance_invalid_reason"]
    )
    past = acceptance(1, drafts=100, draft_tokens=100, accepted=60, per_position=(50, 10))
    assert past["server_acceptance_length"] is None
    assert "10 accepted at draft position 1, past K = 1" in past["server_acceptance_invalid_reason"]


def test_counts_that_are_not_whole_numbers_are_void() -> None:
    result = acceptance(drafts=100.5, draft_tokens=201, accepted=90)
    assert result["server_acceptance_length"] is None
    assert "drafts 100.5: not whole numbers" in result["server_acceptance_invalid_reason"]


def test_a_draft_ratio_that_is_not_whole_voids_only_k() -> None:
    """vLLM trims drafts to the step's token budget: 290 draft tokens over 100 drafts at
    K=3 is a busy point, every count true. The AL and rate stand; K is not 2.9 (nor its
    rounding), so server_spec_tokens is null with the reason."""
    result = acceptance(drafts=100, draft_tokens=290, accepted=150, per_position=(80, 50, 20))
    assert result["server_acceptance_length"] == pytest.approx(2.5)
    assert result["server_acceptance_rate"] == pytest.approx(150 / 290)
    assert result["server_spec_tokens"] is None
    assert "2.900 per draft, not a whole K" in result["server_acceptance_invalid_reason"]
    # a server without per-position series: its K is unknown, not round(2.9)
    flat = parse_metrics(exposition(drafts=100, draft_tokens=290, accepted=150))
    assert server_spec_tokens(flat) is None
    assert server_spec_tokens(parse_metrics(exposition(drafts=10, draft_tokens=30))) == 3


def test_a_position_label_that_is_not_a_number_is_no_position() -> None:
    text = exposition(drafts=10, draft_tokens=20, accepted=5, per_position=(3, 2)).replace(
        'position="1"', 'position="one"'
    )
    snapshot = parse_metrics(text)
    assert snapshot.accepted_per_position == {0: 3.0}
    assert server_acceptance(BEFORE, snapshot)["server_acceptance_length"] == pytest.approx(1.5)


BAD = ["NaN", "+Inf", "-Inf"]
# every kind of series the snapshot reads, by the exposition() argument that carries it
KINDS: dict[str, dict[str, Any]] = {
    "counter": {"drafts": "{bad}", "draft_tokens": 20, "accepted": 5},
    "keyed counter": {"drafts": 10, "draft_tokens": 20, "accepted": 5, "per_position": ("{bad}",)},
    "histogram sum": {"ttft": ("{bad}", 4)},
    "histogram count": {"ttft": (2.0, "{bad}")},
    "frontend histogram": {"frontend_ttft": ("{bad}", "{bad}")},
    "frontend counter": {"frontend_requests": "{bad}"},
    "gauge": {"kv": "{bad}"},
}


def filled(args: dict[str, Any], bad: str) -> dict[str, Any]:
    def one(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(one(v) for v in value)
        return bad if value == "{bad}" else value

    return {key: one(value) for key, value in args.items()}


def finite_or_none(fields: dict[str, Any]) -> None:
    for key, value in fields.items():
        values = value if isinstance(value, list) else [value]
        for v in values:
            assert v is None or isinstance(v, str) or math.isfinite(v), (key, value)


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("kind", list(KINDS))
def test_nan_and_inf_are_missing_samples_in_every_series_kind(kind: str, bad: str) -> None:
    """A NaN or infinite value, in any kind of series, is a missing sample: the series
    is absent from the snapshot, nothing raises (a NaN counter raised `cannot convert
    float NaN to integer` and lost the point), and no figure is NaN or infinite."""
    text = exposition(**filled(KINDS[kind], bad))
    after = parse_metrics(text)
    assert all(math.isfinite(v) for v in after.samples.values())
    assert all(math.isfinite(v) for by in after.keyed.values() for v in by.values())
    for fields in (
        server_acceptance(BEFORE, after),
        server_latency_means(BEFORE, after),
        frontend_fields(BEFORE, after),
    ):
        finite_or_none(fields)
    assert all(math.isfinite(v) for v in gauge_samples(text).values())
    record = make_record(0, offsets_ns=(MS, 2 * MS), tokens=(1, 1), max_tokens=2)
    ctx = PointContext(conc=1, input_len=8, output_len=2)
    result = flat_fields(summarize([record], ctx, server_before=BEFORE, server_after=after))
    finite_or_none({k: v for k, v in result.items() if k.startswith(("server_", "frontend_"))})


def test_a_nan_engine_leaves_the_whole_sum_missing() -> None:
    """Two engines, one NaN: a sum of the other alone would be a wrong total."""
    text = exposition(drafts=10, draft_tokens=20, accepted=5)
    line = next(x for x in text.splitlines() if x.startswith("vllm:spec_decode_num_drafts_t"))
    second = line.replace('engine="0"', 'engine="1"').rsplit(" ", 1)[0] + " NaN"
    text = text.replace(line, f"{line}\n{second}")
    snapshot = parse_metrics(text)
    assert snapshot.get("vllm:spec_decode_num_drafts_total") is None
    assert snapshot.get("vllm:spec_decode_num_draft_tokens_total") == 20


MAXIMA = ClientMaxima.of(
    {
        "ttft": np.array([8.0, 10.0]),
        "e2el": np.array([90.0, 100.0]),
        "itl": np.array([3.0, 4.0]),
        "itl_per_token": np.array([2.0]),
    }
)


def test_a_server_mean_above_the_clients_largest_is_void() -> None:
    """The issue's rows: a server (or Dynamo frontend) TTFT of 6-15 s beside a client
    whose largest TTFT was 10 ms. Its queue lies inside its TTFT, so it is held to the
    client's TTFT too; a mean within the client's largest (1 ms slack) stands."""
    server = bounded_means(
        {
            "server_mean_ttft_ms": 6000.0,
            "server_mean_e2el_ms": 100.5,
            "server_mean_itl_ms": 3.5,
            "server_mean_queue_time_ms": 15000.0,
            "server_requests": 4,
        },
        MAXIMA,
        "server",
    )
    assert server["server_mean_ttft_ms"] is None and server["server_mean_queue_time_ms"] is None
    assert server["server_mean_e2el_ms"] == 100.5 and server["server_mean_itl_ms"] == 3.5
    reason = server["server_latency_invalid_reason"]
    assert "server_mean_ttft_ms 6000.0 ms above the client's largest TTFT 10.0 ms" in reason
    assert "server_mean_queue_time_ms 15000.0 ms above the client's largest TTFT" in reason
    frontend = bounded_means(
        {"frontend_mean_ttft_ms": 9.0, "frontend_mean_itl_per_token_ms": 2.5e3}, MAXIMA, "frontend"
    )
    assert frontend["frontend_mean_ttft_ms"] == 9.0
    assert frontend["frontend_mean_itl_per_token_ms"] is None
    assert "ITL per token 2.0 ms" in frontend["frontend_latency_invalid_reason"]
    honest = bounded_means({"server_mean_ttft_ms": 9.9}, MAXIMA, "server")
    assert honest["server_latency_invalid_reason"] is None
    # no completed request: nothing to hold the means to
    unchecked = bounded_means({"server_mean_ttft_ms": 6000.0}, ClientMaxima({}), "server")
    assert unchecked["server_mean_ttft_ms"] == 6000.0
