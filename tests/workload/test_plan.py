"""Workload building (workload/plan.py): seeded, exact lengths, chat bodies, datasets.
The schedulers' timing rules are tests/run/test_scheduler.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec, SpecError
from loadgen.tokenizer import encode
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.datasets import load_dataset
from loadgen.workload.plan import Workload, sample_lengths


def spec(**changes: object) -> RunSpec:
    values: dict[str, object] = dict(
        conc=(2,), isl=96, osl=12, base_url="http://x", prompts_per_conc=3, warmup_per_conc=1
    )
    values.update(changes)
    return RunSpec.flat(**values)


COMPLETIONS = BodyOptions(endpoint="completions", model="m")


def test_sample_lengths() -> None:
    rng = np.random.default_rng(0)
    assert sample_lengths(rng, 5, 100, 1.0) == [100] * 5
    values = sample_lengths(rng, 2000, 100, 0.5)
    assert min(values) == 50 and max(values) == 100  # InferenceX: uniform in [R*L, L]


def test_point_requests_exact_and_seeded(tokenizer: Tokenizer) -> None:
    workload = Workload(spec(), tokenizer, COMPLETIONS)
    plan = workload.point(2)
    assert len(plan.measured) == 6 and len(plan.warmup) == 2
    bodies = [orjson.loads(r.body) for r in plan.measured]
    for request, body in zip(plan.measured, bodies, strict=True):
        assert request.input_len == 96 == len(encode(tokenizer, body["prompt"]))
        assert body["max_tokens"] == request.max_tokens == 12 and body["stream"]
    assert len({b["seed"] for b in bodies}) == 6  # one sampling stream per request
    warm = {orjson.loads(r.body)["prompt"] for r in plan.warmup}
    assert warm.isdisjoint(b["prompt"] for b in bodies)  # no shared prefix with warmup
    again = Workload(spec(), tokenizer, COMPLETIONS).point(2)
    assert [r.body for r in again.measured] == [r.body for r in plan.measured]
    other = Workload(spec(seed=1), tokenizer, COMPLETIONS).point(2)
    assert [r.body for r in other.measured] != [r.body for r in plan.measured]


def test_chat_bodies_carry_the_user_content(tokenizer: Tokenizer) -> None:
    options = BodyOptions(endpoint="chat", model="m", thinking="chat")
    plan = Workload(spec(endpoint="chat", thinking="chat"), tokenizer, options).point(2)
    body = orjson.loads(plan.measured[0].body)
    assert body["messages"][0]["role"] == "user" and body["messages"][0]["content"]
    assert body["chat_template_kwargs"] == {"thinking": False}


def test_dataset_requests(tmp_path: Path, tokenizer: Tokenizer) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        '[{"role":"user","content":"hello there"}]\n\n'
        '{"messages":[{"role":"user","content":"second"}]}\n'
    )
    plan = Workload(spec(dataset=path), tokenizer, COMPLETIONS).point(2)
    prompts = {orjson.loads(r.body)["prompt"] for r in plan.measured}
    assert len(prompts) == 2 and any("hello there" in p for p in prompts)
    for r in plan.measured:
        assert r.input_len == len(encode(tokenizer, orjson.loads(r.body)["prompt"]))
    path.write_text('{"messages": "nope"}\n')
    with pytest.raises(SpecError, match=r"d.jsonl:1"):
        load_dataset(path)
