"""Pure parts of the engine model: plans, detokenization table, step-time model defaults."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from loadgen.sim.config import SimConfig
from loadgen.sim.detok import EOS_ID, build_token_table
from loadgen.sim.engine import step_ns
from loadgen.sim.plan import PlanParams, draw_acceptance, make_plan
from loadgen.tokenizer import decode


def params(**fields: object) -> PlanParams:
    base: dict[str, object] = {
        "max_tokens": 64,
        "min_tokens": 0,
        "ignore_eos": True,
        "eos_prob": 0.0,
        "spec_tokens": 2,
        "acceptance": (0.8, 0.6),
        "fragment_fraction": 0.1,
    }
    base.update(fields)
    return PlanParams(**base)  # type: ignore[arg-type]


def test_plan_is_a_function_of_seed_and_params(tokenizer: Tokenizer) -> None:
    table = build_token_table(tokenizer)
    first, again = make_plan(table, 7, params()), make_plan(table, 7, params())
    other = make_plan(table, 8, params())
    assert first.all_token_ids() == again.all_token_ids()
    assert [first.accepted_at(i) for i in range(63)] == [again.accepted_at(i) for i in range(63)]
    assert first.all_token_ids() != other.all_token_ids()


def test_lazy_blocks_give_the_same_output_as_one_draw(tokenizer: Tokenizer) -> None:
    table = build_token_table(tokenizer)
    stepwise = make_plan(table, 5, params(max_tokens=1000))
    for end in range(1, 1001, 37):
        stepwise.ensure_tokens(end)
    stepwise.ensure_tokens(1000)
    assert stepwise.token_ids == make_plan(table, 5, params(max_tokens=1000)).all_token_ids()
    assert len(stepwise.token_ids) == 1000


def test_streamed_texts_concatenate_to_the_decoded_ids(tokenizer: Tokenizer) -> None:
    table = build_token_table(tokenizer)
    assert table.fragments, "the table needs byte-fragment units to exercise empty-text chunks"
    empty_text_tokens = 0
    for seed in range(20):
        plan = make_plan(table, seed, params(max_tokens=200, fragment_fraction=0.2))
        assert len(plan.all_token_ids()) == 200
        assert "".join(plan.texts) == decode(tokenizer, plan.token_ids)
        empty_text_tokens += plan.texts.count("")
        # Any prefix cut (a chunk boundary) streams a prefix of the final text.
        cut = seed * 7 + 3
        assert decode(tokenizer, plan.token_ids).startswith("".join(plan.texts[:cut]))
    assert empty_text_tokens > 0


def test_eos_respects_min_tokens_and_streams_no_text(tokenizer: Tokenizer) -> None:
    table = build_token_table(tokenizer)
    for seed in range(10):
        plan = make_plan(table, seed, params(ignore_eos=False, eos_prob=1.0, min_tokens=5))
        plan.ensure_tokens(plan.num_tokens)
        assert plan.finish_reason == "stop"
        assert plan.token_ids[-1] == EOS_ID and len(plan.token_ids) == 6
        assert plan.texts[-1] == ""
        assert "".join(plan.texts) == decode(tokenizer, plan.token_ids[:-1])
    ignored = make_plan(table, 1, params(ignore_eos=True, eos_prob=1.0))
    assert ignored.finish_reason == "length" and len(ignored.all_token_ids()) == 64


def test_acceptance_is_conditional_per_position() -> None:
    rng = np.random.default_rng(3)
    accepted = np.array(draw_acceptance(rng, 200_000, (0.8, 0.6)))
    assert set(np.unique(accepted)) == {0, 1, 2}
    assert (accepted >= 1).mean() == pytest.approx(0.8, abs=0.01)
    assert (accepted >= 2).mean() == pytest.approx(0.8 * 0.6, abs=0.01)
    assert draw_acceptance(rng, 5, ()) == [0] * 5


def tokens_per_second_per_user(config: SimConfig, conc: int, mtp: bool) -> float:
    """Steady decode: every request decodes each step (no prefill), expected tokens/step."""
    k = config.spec_tokens if mtp else 0
    probabilities = config.acceptance[:k]
    tokens_per_step = 1 + sum(float(np.prod(probabilities[: i + 1])) for i in range(k))
    step = step_ns(config, 0, conc * (k + 1), conc) / 1e9
    return tokens_per_step / step


def test_default_step_model_shows_the_mtp_crossover() -> None:
    config = SimConfig()
    gain = {
        c: tokens_per_second_per_user(config, c, True)
        / tokens_per_second_per_user(config, c, False)
        for c in (4, 8, 16, 32, 64, 128, 512)
    }
    assert gain[4] > 1.5 and gain[16] > 1.0, gain  # MTP wins at low concurrency
    assert gain[128] < 1.0 and gain[512] < 1.0, gain  # and loses at high concurrency
    decode_step_512 = step_ns(config, 0, 512 * (config.spec_tokens + 1), 512)
    assert decode_step_512 < 150_000_000


def test_step_time_counts_every_token_computed() -> None:
    config = SimConfig(step_fixed_ms=2.0, decode_token_us=10.0, prefill_token_us=1.0, seq_us=3.0)
    assert step_ns(config, 0, 0, 0) == 2_000_000
    assert step_ns(config, 1000, 30, 11) == 2_000_000 + 1_000_000 + 300_000 + 33_000
