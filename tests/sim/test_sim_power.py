"""The simulator's power model and its dcgm-exporter-format /gpu/metrics."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.sim.config import ConfigError
from loadgen.sim.parser import build_parser, config_from_args
from loadgen.sim.power import PowerConfig, PowerModel
from tests.support.sim_helpers import SimFactory, post_stream


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now


def test_energy_is_the_exact_integral_of_piecewise_constant_power() -> None:
    clock = FakeClock()
    model = PowerModel(
        PowerConfig(idle_watts=100.0, joules_per_token=0.5, joules_per_prefill_token=0.1), clock
    )
    start = clock.now
    # a 0.5 s step computing 10 prefill + 4 decode tokens: 1 + 2 = 3 J over 0.5 s = 6 W
    model.step(start, start + 500_000_000, prefill_tokens=10, decode_tokens=4)
    assert model.instant_power_w(start + 100_000_000) == pytest.approx(106.0)
    assert model.energy_j(start + 250_000_000) == pytest.approx(25.0 + 1.5)
    # idle 0.5 s after the step, then a second 1 s step of 2 decode tokens (1 J)
    model.step(start + 1_000_000_000, start + 2_000_000_000, 0, 2)
    assert model.instant_power_w(start + 1_500_000_000) == pytest.approx(101.0)
    # past instants stay exact: before and inside the first step
    assert model.energy_j(start + 750_000_000) == pytest.approx(75.0 + 3.0)
    assert model.energy_j(start + 1_500_000_000) == pytest.approx(150.0 + 3.0 + 0.5)
    assert model.energy_j(start + 3_000_000_000) == pytest.approx(300.0 + 4.0)
    # the gauge: the mean since the last reading at least 1 s old (1.25..2.25 s: 0.75 s
    # of the 1 W step), or since the start when there is none (0..0.5 s: 6 W on top)
    assert model.power_w(start + 500_000_000) == pytest.approx(106.0)
    model.read(start + 1_250_000_000)
    assert model.power_w(start + 2_250_000_000) == pytest.approx(100.0 + 0.75)
    clock.now = start + 3_000_000_000
    assert model.power_w() == pytest.approx(100.0 + 0.75 / 1.75)  # 1.25..3 s


def test_a_step_dated_before_a_reading_reaches_the_next_reading() -> None:
    """A CPU-starved engine schedules a step whose modelled time already passed: the
    energy the counter reported so far stays, and the gauge's next mean carries the step,
    so the gauge's integral still adds up to the counter's delta."""
    clock = FakeClock()
    model = PowerModel(PowerConfig(idle_watts=0.0, joules_per_token=1.0), clock)
    start = clock.now
    assert model.read(start + 1_000_000_000) == (0.0, 0.0)
    model.step(start + 500_000_000, start + 900_000_000, 0, 10)  # 10 J, dated in the past
    power, energy = model.read(start + 2_000_000_000)
    assert energy == pytest.approx(10.0) and power == pytest.approx(10.0)  # 10 J over 1 s


def gpu_series(text: str) -> dict[str, dict[str, float]]:
    """family name -> {gpu label: value}, parsed by prometheus_client as a scraper would
    (which names a counter's samples `<name>_total` though dcgm-exporter writes none)."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            out.setdefault(name, {})[sample.labels["gpu"]] = sample.value
    return out


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, dict[str, float]]:
    async with session.get(url) as response:
        assert response.status == 200
        return gpu_series(await response.text())


async def test_gpu_metrics_count_every_computed_token_on_every_gpu(sim_factory: SimFactory) -> None:
    # No idle draw and no prefix cache: the counter delta is a function of the tokens only.
    power = PowerConfig(
        num_gpus=2, idle_watts=0.0, joules_per_token=0.25, joules_per_prefill_token=0.125
    )
    async with (
        sim_factory(power=power, spec_tokens=2, enable_prefix_caching=False) as sim,
        aiohttp.ClientSession() as session,
    ):
        url = f"{sim.base_url}/gpu/metrics"
        before = await scrape(session, url)
        assert set(before) == {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}
        assert set(before["DCGM_FI_DEV_POWER_USAGE"]) == {"0", "1"}
        events = [
            await post_stream(
                session,
                f"{sim.base_url}/v1/completions",
                {
                    "model": sim.config.model,
                    "prompt": [7] * 40,
                    "max_tokens": 30,
                    "ignore_eos": True,
                    "stream_options": {"include_usage": True},
                },
            )
            for _ in range(3)
        ]
        after = await scrape(session, url)
    assert all(e[-2]["usage"]["completion_tokens"] == 30 for e in events)
    engine_steps_tokens = sim_decode_tokens(sim)
    expected_mj = (engine_steps_tokens * 0.25 + 3 * 40 * 0.125) * 1000
    for gpu in ("0", "1"):
        delta = (
            after["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][gpu]
            - before["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][gpu]
        )
        assert delta == pytest.approx(expected_mj, abs=1.0)  # the counter is integer mJ


def sim_decode_tokens(sim: object) -> int:
    """Decode tokens computed, from the simulator's own counters: (K+1) per MTP draft
    step; every request's first token comes from its prefill."""
    from prometheus_client import generate_latest

    text = generate_latest(sim.registry).decode()  # type: ignore[attr-defined]
    drafts = next(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "vllm:spec_decode_num_drafts_total"
    )
    return int(drafts) * 3


async def test_idle_gpus_draw_idle_watts(sim_factory: SimFactory) -> None:
    """Over /gpu/metrics, with the running model's clock moved by hand: 0.3 s idle at
    200 W is exactly 60 J on the counter (the counter is integer mJ)."""
    power = PowerConfig(num_gpus=1, idle_watts=200.0)
    async with sim_factory(power=power) as sim, aiohttp.ClientSession() as session:
        url = f"{sim.base_url}/gpu/metrics"
        clock = FakeClock()
        clock.now = sim.power.clock()
        sim.power.clock = clock  # no request: nothing else steps the model meanwhile
        before = await scrape(session, url)
        clock.now += 300_000_000
        after = await scrape(session, url)
    assert after["DCGM_FI_DEV_POWER_USAGE"]["0"] == 200.0
    delta_j = (
        after["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]["0"]
        - before["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]["0"]
    ) / 1000
    assert delta_j == pytest.approx(60.0, abs=0.0011), delta_j


def test_power_flags_build_the_model_and_are_checked() -> None:
    args = build_parser().parse_args(
        ["--num-gpus", "8", "--gpu-idle-watts", "90", "--gpu-joules-per-token", "0.1"]
    )
    config = config_from_args(args)
    assert config.power.num_gpus == 8 and config.power.idle_watts == 90.0
    assert "8 GPU(s), each 90 W idle + 0.1 J per decode token" in config.power.describe()
    with pytest.raises(ConfigError, match="--num-gpus must be at least 1"):
        config_from_args(build_parser().parse_args(["--num-gpus", "0"]))
    with pytest.raises(ConfigError, match="--gpu-idle-watts"):
        config_from_args(build_parser().parse_args(["--gpu-idle-watts", "-1"]))
