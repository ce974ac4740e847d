"""`loadgen sim --engine X` speaks each engine's dialect as tests/fixtures/engines/ records
it (transcribed from the engines' source): metric names, types and label names on the
engine's path, its own endpoints, SGLang's per-request sglext; and every dialect is a view
of the same ground truth (the vLLM instruments the simulator counts with).

SGLang, TensorRT-LLM and ATOM need GPUs and cannot run on this CPU machine, and llama.cpp
would need a GGUF model and a build: the fixtures, checked against their source, stand in
for them, and the real vLLM is tested in tests/integration.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.client.events import MetricsEvent, decode_event
from loadgen.client.request_metrics import BadRequestMetrics, from_sglext
from loadgen.metrics.acceptance import server_acceptance
from loadgen.metrics.engines import dialect
from loadgen.metrics.server import ServerSnapshot, parse_metrics
from tests.support.paths import FIXTURES
from tests.support.sim_helpers import SimFactory, fetch, post_stream

ENGINES = ("sglang", "trtllm", "atom", "llamacpp")
PATHS = {"sglang": "/metrics", "trtllm": "/prometheus/metrics", "atom": "/metrics"}
# K=3 with every draft accepted: each verify step accepts exactly 3
ALL_ACCEPTED = {"spec_tokens": 3, "acceptance": (1.0, 1.0, 1.0)}


def families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """family name -> (type, label names of its samples, `le` left out)."""
    out = {}
    for family in text_string_to_metric_families(text):
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        out[family.name] = (family.type, frozenset(labels))
    return out


async def generate(base_url: str, n: int, extra: dict[str, Any] | None = None) -> list[Any]:
    async with aiohttp.ClientSession() as session:
        events = []
        for i in range(n):
            body = {
                "model": "deepseek-v4-sim",
                "prompt": f"hello {i}",
                "max_tokens": 33,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
                **(extra or {}),
            }
            events.append(await post_stream(session, base_url + "/v1/completions", body))
        return events


@pytest.mark.parametrize("engine", ENGINES)
async def test_the_dialect_is_the_fixtures_names_types_and_labels(
    sim_factory: SimFactory, engine: str
) -> None:
    async with sim_factory(engine=engine, **ALL_ACCEPTED) as sim:
        await generate(sim.base_url, 2)
        status, _, body = await fetch("GET", sim.base_url + PATHS.get(engine, "/metrics"))
        assert status == 200
        if engine == "trtllm":  # trtllm-serve's /metrics is its JSON iteration stats
            status, _, json_body = await fetch("GET", sim.base_url + "/metrics")
            assert status == 200 and json_body == b"[]"
    served = families(body.decode())
    expected = families((FIXTURES / "engines" / engine / "metrics.txt").read_text())
    assert served, body
    for name, (kind, labels) in served.items():
        assert name in expected, f"{engine} has no {name}"
        assert expected[name][0] == kind, (name, kind)
        # the fixture's label names, model_name allowed (the simulator serves one model)
        assert labels - {"model_name"} == expected[name][1] - {"model_name"}, name
    # what loadgen's dialect reads is all there
    d = dialect(engine)
    names = {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    assert set(d.renames) | set(d.gauges) <= names


@pytest.mark.parametrize("engine", ["trtllm", "atom"])
async def test_counter_dialects_give_the_ground_truth(sim_factory: SimFactory, engine: str) -> None:
    """Every draft accepted at K=3: AL 4, rate 1, per position 1, whatever the dialect."""
    async with sim_factory(engine=engine, **ALL_ACCEPTED) as sim:
        await generate(sim.base_url, 3)
        _, _, body = await fetch("GET", sim.base_url + PATHS[engine])
    after = dialect(engine).canonical(parse_metrics(body.decode()))
    at_start = ServerSnapshot(  # a server just started: every counter at 0
        samples=dict.fromkeys(after.samples, 0.0),
        keyed={name: dict.fromkeys(by_key, 0.0) for name, by_key in after.keyed.items()},
    )
    got = server_acceptance(at_start, after)
    assert got["server_acceptance_length"] == 4.0
    assert got["server_acceptance_rate"] == 1.0
    assert got["server_acceptance_per_position"] == [1.0, 1.0, 1.0]
    # 3 requests of 33 tokens: the first from prefill, then 8 steps of 4 each
    assert got["server_spec_decode_drafts"] == 3 * 8


async def test_sglang_sends_sglext_only_when_asked(sim_factory: SimFactory) -> None:
    async with sim_factory(engine="sglang", **ALL_ACCEPTED) as sim:
        (asked,) = await generate(sim.base_url, 1, {"return_spec_tokens_details": True})
        (unasked,) = await generate(sim.base_url, 1)
        _, _, info = await fetch("GET", sim.base_url + "/get_server_info")
    assert b"internal_states" in info
    assert all("sglext" not in e for e in unasked if e != "[DONE]")
    final = asked[-2]
    assert "metrics" not in final  # vLLM's per-request metrics are not SGLang's
    details = final["sglext"]["spec_tokens_details"]
    assert details["spec_verify_ct"] == 8 and details["spec_num_correct_drafts"] == 24
    assert details["spec_correct_drafts_histogram"] == [0, 0, 0, 8]
    event = decode_event(orjson.dumps(final))
    assert isinstance(event, MetricsEvent)
    stats = event.metrics[0]
    assert stats is not None and stats.mean_acceptance_length == 4.0
    assert stats.num_spec_tokens == 3 and stats.acceptance_histogram == (0, 0, 0, 8)


def test_sglext_of_the_fixture() -> None:
    """The fixture's response: 27 verify steps, 37 of 54 drafts accepted (K=2)."""
    body = orjson.loads((FIXTURES / "engines" / "sglang" / "response.json").read_bytes())
    stats = from_sglext(body["sglext"])
    assert stats is not None
    assert stats.mean_acceptance_length == pytest.approx(1 + 37 / 27)
    assert stats.num_spec_tokens == 2 and stats.draft_acceptance_rate == pytest.approx(37 / 54)


def test_a_grown_histogram_is_padded_to_k_and_a_contradiction_refused() -> None:
    short = {
        "spec_tokens_details": {
            "spec_verify_ct": 4,
            "spec_num_correct_drafts": 2,
            "spec_num_proposed_drafts": 12,  # K=3, nothing beyond 1 accepted yet
            "spec_correct_drafts_histogram": [2, 2],
        }
    }
    stats = from_sglext(short)
    assert stats is not None and stats.acceptance_histogram == (2, 2, 0, 0)
    lying = {"spec_tokens_details": {**short["spec_tokens_details"], "spec_verify_ct": 5}}
    with pytest.raises(BadRequestMetrics, match="disagree"):
        from_sglext(lying)
