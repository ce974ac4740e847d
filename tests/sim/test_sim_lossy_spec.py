"""--fault-lossy-spec over a real socket: speculation alone never changes a request's
tokens; the fault changes some, only after accepted drafts, the same way every time."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from loadgen.sim.config import ConfigError, FaultConfig, SimConfig, validate
from tests.support.sim_helpers import SimFactory, chunk_token_ids, post_stream

BODY: dict[str, Any] = {
    "model": SimConfig().model,
    "prompt": "Say something long.",
    "ignore_eos": True,
    "max_tokens": 96,
    "return_token_ids": True,
    "temperature": 0,
}


async def _outputs(sim_factory: SimFactory, **config: Any) -> list[tuple[list[int], list[int]]]:
    """(token ids, tokens per chunk) of eight requests, each with its own seed."""
    outputs = []
    async with sim_factory(**config) as sim, aiohttp.ClientSession() as session:
        for seed in range(8):
            events = await post_stream(
                session, sim.base_url + "/v1/completions", {**BODY, "seed": seed}
            )
            chunks = chunk_token_ids(events)
            outputs.append(([i for chunk in chunks for i in chunk], [len(c) for c in chunks]))
    return outputs


async def test_lossy_spec_replaces_tokens_after_accepted_drafts_only(
    sim_factory: SimFactory,
) -> None:
    plain = await _outputs(sim_factory, spec_tokens=0)
    mtp = await _outputs(sim_factory, spec_tokens=2)
    lossy = await _outputs(sim_factory, spec_tokens=2, faults=FaultConfig(lossy_spec=0.3))
    again = await _outputs(sim_factory, spec_tokens=2, faults=FaultConfig(lossy_spec=0.3))
    # speculation that verifies is lossless: the same tokens, in bigger chunks
    assert [ids for ids, _ in mtp] == [ids for ids, _ in plain]
    assert any(max(sizes) > 1 for _, sizes in mtp)
    assert lossy == again  # a function of the seed, not of timing
    changed = 0
    for (ids, sizes), (good, _), (_, mtp_sizes) in zip(lossy, plain, mtp, strict=True):
        assert len(ids) == len(good) and sizes == mtp_sizes  # only the tokens differ
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        for position, (a, b) in enumerate(zip(ids, good, strict=True)):
            if a != b:
                changed += 1
                # the last accepted draft of a step (one chunk) that accepted any: the one
                # before its own token, or, in the last step cut short by max_tokens, the
                # last token it kept (all drafts); never the prefill's first token
                chunk = max(i for i, s in enumerate(starts) if s <= position)
                offset = position - starts[chunk]
                last = chunk == len(sizes) - 1
                assert chunk > 0 and (offset == sizes[chunk] - 2 or last), (position, sizes)
    assert changed > 0


def test_lossy_spec_is_a_probability() -> None:
    with pytest.raises(ConfigError, match="--fault-lossy-spec must be a probability"):
        validate(SimConfig(spec_tokens=2, faults=FaultConfig(lossy_spec=1.5)))
