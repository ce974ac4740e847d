"""Load shapes and endpoints are types picked once (run/shapes.py, workload/bodies.py):
each setting maps to its variant, and each variant schedules and builds what the `if`
chains it replaced did (the same seeded arrival stream, the same body bytes)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from loadgen.config.spec import RunSpec
from loadgen.records import RequestRecord
from loadgen.run.embedded_sim import sweep_estimate
from loadgen.run.scheduler import arrival_offsets_ns
from loadgen.run.shapes import (
    ClosedLoop,
    ConcStages,
    LoadShape,
    OpenLoop,
    Phase,
    Ramp,
    RateStages,
    arrivals_rng,
    load_shape,
)
from loadgen.workload.bodies import (
    BodyOptions,
    Chat,
    Completions,
    chat_body,
    completion_body,
    request_builder,
)
from loadgen.workload.plan import RequestSpec
from loadgen.workload.ramp import ramp_offsets_ns, ramp_rates, staged_offsets_ns
from loadgen.workload.reply import ReplyText, assistant_message


def spec(tmp_path: Path, **settings: Any) -> RunSpec:
    values: dict[str, Any] = (
        dict(conc=(4,), isl=64, osl=8, sim=True, seed=7, results_dir=tmp_path) | settings
    )
    return RunSpec.flat(**values)


SHAPES: list[tuple[dict[str, Any], LoadShape]] = [
    ({}, ClosedLoop(None)),
    ({"duration_s": 2.5}, ClosedLoop(2.5)),
    ({"request_rate": 20.0}, OpenLoop(20.0, 1.0, None)),
    ({"request_rate": 8.0, "burstiness": 0.5, "duration_s": 3.0}, OpenLoop(8.0, 0.5, 3.0)),
    (
        {"ramp_up_strategy": "linear", "ramp_up_start_rps": 5.0, "ramp_up_end_rps": 40.0},
        Ramp("linear", 5.0, 40.0, 1.0, None),
    ),
    (
        {
            "ramp_up_strategy": "exponential",
            "ramp_up_start_rps": 2.0,
            "ramp_up_end_rps": 30.0,
            "burstiness": 2.0,
        },
        Ramp("exponential", 2.0, 30.0, 2.0, None),
    ),
    ({"rate_stages": ((10.0, 1.0), (30.0, 0.5))}, RateStages(((10.0, 1.0), (30.0, 0.5)), 1.0, 1.5)),
    ({"conc": (6,), "conc_stages": ((2, 1.0), (6, 1.0))}, ConcStages(((2, 1.0), (6, 1.0)), 2.0)),
]


@pytest.mark.parametrize(("settings", "shape"), SHAPES)
def test_each_load_setting_picks_its_shape(
    tmp_path: Path, settings: dict[str, Any], shape: LoadShape
) -> None:
    run = spec(tmp_path, **settings)
    picked = load_shape(run)
    assert picked == shape and type(picked) is type(shape)
    # the point file's request_rate, as the if chain in point_records wrote it
    load = run.load
    before = (
        load.request_rate
        if load.request_rate is not None
        else "ramp"
        if load.ramp_up_strategy is not None
        else "stages"
        if load.rate_stages
        else "inf"
    )
    assert picked.rate_label == before
    # the deadline the point used: --duration, or the stages' sum
    assert picked.duration_s == load.point_duration_s


def _old_offsets_ns(run: RunSpec, conc: int) -> list[int]:
    """run/arrivals.py's point_offsets_ns before the shapes: rng stream 3 of the point."""
    load, count = run.load, run.load.measured_requests(conc)
    rng = np.random.default_rng([run.seed, conc, 3])
    if load.ramp_up_strategy is not None:
        assert load.ramp_up_start_rps is not None and load.ramp_up_end_rps is not None
        rates = ramp_rates(
            count, load.ramp_up_strategy, load.ramp_up_start_rps, load.ramp_up_end_rps
        )
        return ramp_offsets_ns(rates, load.burstiness, rng)
    if load.rate_stages:
        return staged_offsets_ns(load.rate_stages, load.burstiness, rng, count)
    assert load.request_rate is not None
    return arrival_offsets_ns(count, load.request_rate, load.burstiness, rng)


Sent = tuple[int, int, int]  # (request index, scheduled_ns, sent at)


class VirtualClock:
    """Time moves only when the scheduler sleeps: sends take no time, and the tasks due
    run before the clock moves on."""

    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)
        self.now += round(seconds * 1e9)


def _phase(
    run: RunSpec, conc: int, requests: Sequence[RequestSpec], clock: VirtualClock, sent: list[Sent]
) -> tuple[Phase, list[Sequence[int]]]:
    watched: list[Sequence[int]] = []

    async def send(request: RequestSpec, scheduled: int) -> RequestRecord | None:
        sent.append((request.index, scheduled, clock()))
        return None

    def watch(arrivals: Sequence[int]) -> Callable[[int], bool] | None:
        watched.append(arrivals)
        return None

    phase = Phase(
        conc=conc,
        requests=requests,
        planned=run.load.measured_requests(conc),
        slots=conc,
        send=send,
        clock=clock,
        sleep=clock.sleep,
        rng=arrivals_rng(run, conc),
        watch=watch,
    )
    return phase, watched


@pytest.mark.parametrize(
    "settings",
    [settings for settings, shape in SHAPES if isinstance(shape, OpenLoop | Ramp | RateStages)],
)
async def test_open_shapes_send_on_the_schedule_the_point_always_drew(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    run = spec(tmp_path, **settings)
    shape = load_shape(run)
    assert isinstance(shape, OpenLoop | Ramp | RateStages)
    count = run.load.measured_requests(4)
    old = _old_offsets_ns(run, 4)
    assert shape.offsets_ns(count, arrivals_rng(run, 4)) == old
    # a worker's share (every other request) keeps its requests' own arrival times
    clock, sent = VirtualClock(), list[Sent]()
    share = [RequestSpec(i, 1, 1, b"") for i in range(0, count, 2)]
    phase, watched = _phase(run, 4, share, clock, sent)
    start = clock()
    await shape.measure(phase)
    deadline = None if shape.duration_s is None else int(shape.duration_s * 1e9)
    due = [(i, old[i]) for i in range(0, count, 2) if deadline is None or old[i] < deadline]
    assert [(i, scheduled - start) for i, scheduled, _ in sent] == due
    assert all(at == scheduled for _, scheduled, at in sent)  # sent when due, in order
    assert watched == [[old[i] for i in range(0, count, 2)]]  # the watch saw the share's


async def test_closed_shapes_send_in_index_order_and_watch_nothing(tmp_path: Path) -> None:
    run = spec(tmp_path)
    clock, sent = VirtualClock(), list[Sent]()
    requests = [RequestSpec(i, 1, 1, b"") for i in range(40)]
    phase, watched = _phase(run, 4, requests, clock, sent)
    await load_shape(run).measure(phase)
    assert [i for i, _, _ in sent] == list(range(40)) and not watched


async def test_conc_stages_say_when_the_requests_ran_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sends take no time, so the first slot sends every request at the start, in stage
    1: the stages are cut short there, and the point says so."""
    run = spec(tmp_path, conc=(6,), conc_stages=((2, 1.0), (6, 1.0)))
    clock, sent = VirtualClock(), list[Sent]()
    requests = [RequestSpec(i, 1, 1, b"") for i in range(10)]
    phase, watched = _phase(run, 6, requests, clock, sent)
    await load_shape(run).measure(phase)
    assert [i for i, _, _ in sent] == list(range(10)) and not watched
    assert {at for _, _, at in sent} == {1_000_000_000}
    assert "the point's 10 requests ran out 0.0 s into --conc-stages' 2 s" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("endpoint", "builder"), [("completions", Completions()), ("chat", Chat())]
)
def test_each_endpoint_picks_its_builder_and_builds_the_old_bytes(
    endpoint: str, builder: Completions | Chat
) -> None:
    options = BodyOptions(endpoint=endpoint, model="m", reasoning_effort="high", seed=3)
    assert request_builder(endpoint) == builder and options.builder == builder
    messages = [{"role": "user", "content": "hi there"}]
    body = options.builder.body(
        options, text="<bos>hi there", messages=messages, max_tokens=9, seed=11
    )
    # the bodies the endpoint `if`s built
    old = (
        completion_body(options, "<bos>hi there", 9, 11)
        if endpoint == "completions"
        else chat_body(options, messages, 9, 11)
    )
    assert body == orjson.dumps(old)
    assert options.path == (
        "/v1/completions" if endpoint == "completions" else "/v1/chat/completions"
    )
    # run.json's server.options: the builder is no field, the JSON is what it was
    assert "builder" not in dataclasses.asdict(options)
    with pytest.raises(ValueError, match="'responses'"):
        request_builder("responses")


def test_a_reply_goes_back_into_history_as_its_endpoint_sends_it() -> None:
    reply = ReplyText()
    reply.add("why", reasoning=True)
    reply.add("so", reasoning=False)
    chat = assistant_message(reply, builder=Chat(), encoder="raw", thinking="thinking")
    assert chat == {"role": "assistant", "content": "so", "reasoning": "why"}
    raw = assistant_message(reply, builder=Completions(), encoder="raw", thinking="thinking")
    assert raw == {"role": "assistant", "content": "so"}  # a new key: not chat's cached


@pytest.mark.parametrize(("settings", "shape"), SHAPES)
def test_the_step_model_estimates_closed_shapes_only(
    tmp_path: Path, settings: dict[str, Any], shape: LoadShape
) -> None:
    """The --sim estimate is a closed loop's: a ramp or rate stages sends on its own
    schedule, so (as for a fixed rate) there is no estimate, not a closed loop's."""
    run = spec(tmp_path, **settings)
    estimate = sweep_estimate(run, run.load.conc)
    assert (estimate is not None) == isinstance(shape, ClosedLoop | ConcStages)
