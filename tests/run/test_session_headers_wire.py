"""A multi-turn run with the default options sends each session's id in X-Session-ID and
in X-Dynamo-Session-ID, Dynamo's own name (the recipe's), on every turn: what went on the
wire between loadgen and a real simulator, through a recording relay."""

from __future__ import annotations

import asyncio
import re
import sys
from collections import Counter
from pathlib import Path

from loadgen.sim.server import SimConfig, running_simulator
from tests.support.recording_proxy import recording_proxy


async def test_every_turn_carries_both_session_headers(tmp_path: Path) -> None:
    config = SimConfig(model="sim-model", step_fixed_ms=1.0)
    async with (
        running_simulator(config, host="127.0.0.1", port=0) as sim,
        recording_proxy("127.0.0.1", sim.port) as wire,
    ):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadgen",
            "--base-url",
            f"http://127.0.0.1:{wire.port}",
            *("--endpoint", "chat", "--turns", "3", "--turn-tokens", "16", "--conc", "1"),
            *("--sessions-per-conc", "2", "--isl", "64", "--osl", "4"),
            *("--warmup-per-conc", "0", "--results", str(tmp_path), "--no-progress"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-2000:]
    sent = wire.sent.decode("utf-8", "replace")
    plain = re.findall(r"X-Session-ID: (\S+)\r\n", sent)
    dynamo = re.findall(r"X-Dynamo-Session-ID: (\S+)\r\n", sent)
    assert len(plain) == 6 and dynamo == plain  # 2 sessions x 3 turns, the same id in each
    assert sorted(Counter(plain).values()) == [3, 3]  # one stable id per conversation
