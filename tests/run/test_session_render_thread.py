"""Session turns are rendered off the event loop, one at a time, in the order they are due.

A synthetic session's turn re-encodes and re-tokenizes its whole history (~100 ms of CPU
for 20k tokens on this machine). Rendered on the event loop, that time would hold back
the stamping of every chunk arriving meanwhile (they would be stamped together, ITL 0).
The test records, inside each real render, which thread ran it and whether the loop
ran a callback while the render was under way (the render waits for it: on a loop held
by the render, or waiting on it, the callback never runs).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.records import RequestRecord, TokenSource
from loadgen.run.sessions import ReplayOptions, SessionReplay
from loadgen.tokenizer import count_tokens, encode
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import RequestSpec
from loadgen.workload.session_plan import session_source
from loadgen.workload.session_render import SessionRenderer

ISL = 20_000


class WatchedRenderer(SessionRenderer):
    """The real renderer; notes the thread of each render and whether the event loop ran
    a callback while it was under way."""

    renders: list[tuple[int, int, bool]]  # (index, thread id, the loop turned meanwhile)
    loop: asyncio.AbstractEventLoop

    def render(self, *args: Any, **kwargs: Any) -> RequestSpec:
        turned = threading.Event()
        self.loop.call_soon_threadsafe(turned.set)
        request = super().render(*args, **kwargs)
        # a guard, not a measurement: a loop free to run does so in microseconds
        self.renders.append((request.index, threading.get_ident(), turned.wait(10)))
        return request


async def test_turns_render_off_the_loop_in_due_order(tokenizer: Tokenizer) -> None:
    spec = RunSpec.flat(
        conc=(1,),
        isl=ISL,
        osl=8,
        turns="3",
        turn_tokens="200",
        think_time="0",
        sessions_per_conc=2,
        sim=True,
    )
    source = session_source(spec, tokenizer)
    renderer = WatchedRenderer(
        source.settings(),
        tokenizer,
        BodyOptions(endpoint="completions", model="m"),
        source.block_size,
        0,
    )
    renderer.renders = []
    renderer.loop = asyncio.get_running_loop()
    replay = SessionReplay(
        source.trees(1),
        renderer,
        ReplayOptions(conc=1),
        clock=time.perf_counter_ns,
        sleep=asyncio.sleep,
    )
    sent: list[RequestSpec] = []

    async def send(request: RequestSpec, due_ns: int) -> RequestRecord:
        sent.append(request)
        now = time.perf_counter_ns()
        return RequestRecord(
            request.index,
            1,
            request.input_len,
            request.max_tokens,
            due_ns,
            now,
            0,
            (now,),
            (request.max_tokens,),
            now,
            TokenSource.USAGE,
        )

    loop_thread = threading.get_ident()
    await replay.warmup(send)
    await replay.measure(send, None)

    assert len(sent) == 6 == len(renderer.renders)  # 2 sessions x 3 turns, all sent
    assert [r.index for r in sent] == list(range(6))  # numbered and sent in order
    assert [r[0] for r in renderer.renders] == list(range(6))  # rendered in that order
    assert all(thread != loop_thread for _, thread, _ in renderer.renders)
    assert all(turned for *_, turned in renderer.renders)  # the loop ran meanwhile
    first = sent[0]
    assert first.input_len == ISL  # the count made off the loop is the exact one
    text = first.body.decode()
    assert '"max_tokens":8' in text and len(text) > ISL


def test_count_tokens_equals_encode(tokenizer: Tokenizer) -> None:
    for text in ("", "hello", " a b  c\n<｜User｜>x", "é" * 999):
        assert count_tokens(tokenizer, text) == len(encode(tokenizer, text))
