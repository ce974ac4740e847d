"""Event-by-event comparison with the real vLLM 0.32 captures: keys, key order, value types.

The simulator runs the capture's setup: model `tiny`, max_model_len 2048 and K=3 drafts that
are always accepted (the capture's draft model equals its target), so even the number of
events and the tokens per chunk (1, then 4s, then the cut-short rest) must match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.support.sim_helpers import SimFactory, fetch, sse_events

CAPTURE_SETUP = {
    "model": "tiny",
    "max_model_len": 2048,
    "spec_tokens": 3,
    "acceptance": (1.0, 1.0, 1.0),
}
PROMPT = "The quick brown fox jumps over the lazy dog. Tell me a story."
BOTH_USAGE = {"include_usage": True, "continuous_usage_stats": True}


def shape(value: Any) -> Any:
    """Keys in order and value types; token-id lists of any length compare equal."""
    if isinstance(value, dict):
        return [(key, shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        if value and all(isinstance(item, int) for item in value):
            return "list[int]"
        return [shape(item) for item in value]
    return type(value).__name__


def token_counts(events: list[Any]) -> list[int]:
    counts = []
    for event in events:
        if event == "[DONE]" or not event["choices"]:
            continue
        ids = event["choices"][0].get("token_ids")
        if ids is not None:
            counts.append(len(ids))
    return counts


STREAM_CASES = {
    "completions_stream_token_ids_usage.sse": (
        "/v1/completions",
        {
            "prompt": PROMPT,
            "max_tokens": 24,
            "stream_options": BOTH_USAGE,
            "return_token_ids": True,
        },
    ),
    "completions_stream.sse": (
        "/v1/completions",
        {"prompt": PROMPT, "max_tokens": 24, "stream_options": {"include_usage": True}},
    ),
    "completions_stream_prompt_ids.sse": (
        "/v1/completions",
        {
            "prompt": [11, 22, 33, 44, 55, 66],
            "max_tokens": 8,
            "stream_options": {"include_usage": True},
        },
    ),
    "chat_stream_token_ids_usage.sse": (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 24,
            "stream_options": BOTH_USAGE,
            "return_token_ids": True,
        },
    ),
    "chat_stream.sse": (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 24,
            "stream_options": {"include_usage": True},
        },
    ),
}


@pytest.mark.parametrize("fixture", sorted(STREAM_CASES))
async def test_stream_matches_capture_event_by_event(
    fixture: str, vllm_fixtures: Path, sim_factory: SimFactory
) -> None:
    expected = sse_events((vllm_fixtures / fixture).read_bytes())
    path, extra = STREAM_CASES[fixture]
    body = {"model": "tiny", "stream": True, "ignore_eos": True, **extra}
    async with sim_factory(**CAPTURE_SETUP) as sim:
        status, headers, raw = await fetch("POST", sim.base_url + path, json=body)
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    got = sse_events(raw)
    assert len(got) == len(expected)
    for index, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        assert shape(mine) == shape(theirs), f"event {index} differs from {fixture}"
    assert token_counts(got) == token_counts(expected)


@pytest.mark.parametrize(
    ("fixture", "path", "extra"),
    [
        ("completions_nonstream.json", "/v1/completions", {"prompt": PROMPT}),
        (
            "chat_nonstream.json",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": PROMPT}]},
        ),
    ],
)
async def test_non_stream_body_matches_capture(
    fixture: str, path: str, extra: dict[str, Any], vllm_fixtures: Path, sim_factory: SimFactory
) -> None:
    expected = orjson.loads((vllm_fixtures / fixture).read_bytes())
    body = {"model": "tiny", "max_tokens": 8, "ignore_eos": True, **extra}
    async with sim_factory(**CAPTURE_SETUP) as sim:
        status, _, raw = await fetch("POST", sim.base_url + path, json=body)
    assert status == 200
    got = orjson.loads(raw)
    assert shape(got) == shape(expected)
    assert got["usage"]["completion_tokens"] == 8


def read_error_fixture(path: Path) -> tuple[dict[str, Any], int]:
    body, status = path.read_text().rsplit("\nHTTP ", 1)
    return orjson.loads(body), int(status)


@pytest.mark.parametrize(
    ("fixture", "raw"),
    [
        ("error_wrong_model.txt", b'{"model":"nope","prompt":"hi","max_tokens":4}'),
        ("error_too_long.txt", b'{"model":"tiny","prompt":"hi","max_tokens":4000}'),
        ("error_bad_max_tokens.txt", b'{"model":"tiny","prompt":"hi","max_tokens":-3}'),
        # Cut off right after "prompt": -- the JSON error is at character 25, as captured.
        ("error_bad_json.txt", b'{"model":"tiny","prompt":'),
    ],
)
async def test_error_bodies_and_status_are_verbatim(
    fixture: str, raw: bytes, vllm_fixtures: Path, sim_factory: SimFactory
) -> None:
    expected, status = read_error_fixture(vllm_fixtures / fixture)
    async with sim_factory(**CAPTURE_SETUP) as sim:
        got_status, _, body = await fetch(
            "POST",
            sim.base_url + "/v1/completions",
            data=raw,
            headers={"Content-Type": "application/json"},
        )
    assert got_status == status
    assert orjson.loads(body) == expected


@pytest.mark.parametrize(
    ("fixture", "method", "path", "payload"),
    [
        ("models.json", "GET", "/v1/models", None),
        ("version.json", "GET", "/version", None),
        ("tokenize.json", "POST", "/tokenize", {"model": "tiny", "prompt": "Hello there, world"}),
        ("detokenize.json", "POST", "/detokenize", {"model": "tiny", "tokens": [33310, 2058]}),
    ],
)
async def test_small_endpoints_match_capture(
    fixture: str,
    method: str,
    path: str,
    payload: dict[str, Any] | None,
    vllm_fixtures: Path,
    sim_factory: SimFactory,
) -> None:
    expected = orjson.loads((vllm_fixtures / fixture).read_bytes())
    async with sim_factory(**CAPTURE_SETUP) as sim:
        status, _, raw = await fetch(method, sim.base_url + path, json=payload)
    assert status == 200
    got = orjson.loads(raw)
    assert shape(got) == shape(expected)
    if fixture == "models.json":
        assert got["data"][0]["id"] == "tiny" and got["data"][0]["max_model_len"] == 2048
    if fixture == "version.json":
        assert got == expected
    if fixture == "detokenize.json":
        assert got == {"prompt": "hello world"}


def metric_families(text: str) -> dict[str, tuple[str, set[frozenset[str]], list[str]]]:
    """name -> (type, label-name sets, histogram bucket bounds) for vllm: families."""
    families: dict[str, tuple[str, set[frozenset[str]], list[str]]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE vllm:"):
            _, _, name, kind = line.split()
            families[name] = (kind, set(), [])
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        series, _ = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        pairs = dict(p.split("=", 1) for p in labels.rstrip("}").split(",") if p)
        family = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        entry = families.get(family) or families.get(name)
        if entry is None:
            continue
        entry[1].add(frozenset(k for k in pairs if k != "le"))
        if name.endswith("_bucket") and pairs.get("le") not in entry[2]:
            entry[2].append(pairs["le"])
    return families


async def test_metrics_names_labels_and_buckets_match_capture(
    vllm_fixtures: Path, sim_factory: SimFactory
) -> None:
    expected = metric_families((vllm_fixtures / "metrics.txt").read_text())
    async with sim_factory(**CAPTURE_SETUP) as sim, aiohttp.ClientSession() as session:
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "ignore_eos": True}
        async with session.post(sim.base_url + "/v1/completions", json=body) as response:
            assert response.status == 200
        async with session.get(sim.base_url + "/metrics") as response:
            got = metric_families(await response.text())
    required = [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        # the dashboard's server panels
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
    ]
    assert set(required) <= set(got)
    for name, (kind, labels, buckets) in got.items():
        assert name in expected, f"{name} is not a vLLM 0.32 metric"
        assert (kind, labels, buckets) == expected[name], name


@pytest.mark.parametrize(
    ("method", "path", "status", "detail"),
    [
        ("GET", "/v1/nothing", 404, "Not Found"),
        ("GET", "/v1/completions", 405, "Method Not Allowed"),
    ],
)
async def test_unknown_routes_answer_like_fastapi(
    method: str, path: str, status: int, detail: str, sim_factory: SimFactory
) -> None:
    async with sim_factory() as sim:
        got_status, _, body = await fetch(method, sim.base_url + path)
    assert got_status == status
    assert orjson.loads(body) == {"detail": detail}


async def test_without_prefix_caching_queries_count_prompt_tokens_and_nothing_hits(
    sim_factory: SimFactory,
) -> None:
    async with sim_factory(**CAPTURE_SETUP) as sim, aiohttp.ClientSession() as session:
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 2, "ignore_eos": True}
        for _ in range(2):  # the same prompt twice: a real cache would hit the second time
            async with session.post(sim.base_url + "/v1/completions", json=body) as response:
                usage = (await response.json())["usage"]
        async with session.get(sim.base_url + "/metrics") as response:
            text = await response.text()
    samples = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("vllm:prefix_cache_", "vllm:num_preemptions_total"))
    }
    assert samples["vllm:prefix_cache_queries_total"] == 2 * usage["prompt_tokens"] > 0
    assert samples["vllm:prefix_cache_hits_total"] == 0
    assert samples["vllm:num_preemptions_total"] == 0
