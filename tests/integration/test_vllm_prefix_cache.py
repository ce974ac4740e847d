"""Multi-turn sessions against real vLLM with prefix caching: loadgen's per-request
`cached_tokens` add up to exactly the server's prefix-cache hit counter.

vLLM (v1) looks a waiting request up in its block cache when it first tries to schedule
it: `vllm:prefix_cache_queries` grows by the request's prompt tokens and
`vllm:prefix_cache_hits` by the tokens found (whole blocks), and the same number
becomes the request's `num_cached_tokens`, which `--enable-prompt-tokens-details`
reports as `usage.prompt_tokens_details.cached_tokens`. So over a measured phase:
  hits delta == sum(cached_tokens) and queries delta == sum(prompt_tokens).
The one way they part: a request looked up but not scheduled in that step (token budget
or KV blocks exhausted) is looked up again next step, and a preempted one when it is
resumed; both count twice in the counters, once in usage (hits >= sum, queries >= sum).
This run stays far from both (2 streams, prompts < 1k tokens, a 1 GiB KV cache), so the
test asserts equality; a failure with hits > sum means a deferral or preemption, not a
loadgen miscount.

--reset-prefix-cache against the real endpoint (vLLM 0.32's POST /reset_prefix_cache,
served only with VLLM_SERVER_DEV_MODE=1): the same prompts sent twice hit the second
time, and not at all when the cache is reset before the point; without dev mode the run
stops before its first point with the one line.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.vllm_runs import records, run_loadgen, server_counter
from tests.support.vllm_servers import VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

CONC, TURNS = 2, 4


def block_size(server: VllmServer) -> int:
    """The server's KV block size (the prefix cache's unit), from vllm:cache_config_info."""
    found = re.search(rb'vllm:cache_config_info\{[^}]*block_size="(\d+)"', server.get("/metrics"))
    assert found, "vllm:cache_config_info has no block_size label"
    return int(found.group(1))


def test_multi_turn_cached_tokens_equal_the_server_hits(
    vllm_plain: VllmServer, tmp_path: Path
) -> None:
    done = run_loadgen(
        vllm_plain,
        tmp_path,
        "--conc",
        str(CONC),
        "--isl",
        "256",
        "--osl",
        "32",
        "--turns",
        str(TURNS),
        "--turn-tokens",
        "64",
        "--think-time",
        "0",
        "--sessions-per-conc",
        "2",
    )
    assert done.returncode == 0, f"loadgen failed (log {vllm_plain.log}):\n{done.stderr}"
    result = json.loads((tmp_path / f"conc_{CONC}.json").read_text())
    recs = records(tmp_path, CONC)
    assert len(recs) == CONC * 2 * TURNS and all(r.ok for r in recs)
    assert all(r.cached_tokens is not None for r in recs)  # every response reported it
    cached = sum(r.cached_tokens or 0 for r in recs)
    prompts = sum(r.prompt_tokens or 0 for r in recs)

    assert cached > 0 and result["client_cached_tokens"] == cached
    assert result["server_prefix_cache_hits"] == cached, result
    assert result["server_prefix_cache_queries"] == prompts, result
    assert result["client_prefix_hit_rate"] == result["server_prefix_hit_rate"]
    assert result["prefix_hit_rate_diff"] == 0.0

    by_session: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for r in recs:
        assert r.session_id is not None and r.turn_index is not None
        by_session[r.session_id].append((r.turn_index, r.cached_tokens or 0, r.prompt_tokens or 0))
    assert len(by_session) == CONC * 2
    size = block_size(vllm_plain)
    for turns in by_session.values():
        turns.sort()
        assert [t for t, _, _ in turns] == list(range(TURNS))
        # Each play's cache-bust marker: a first turn shares no block with any other
        # session (or with an earlier run against the same server).
        assert turns[0][1] == 0, turns
        for (_, _, previous_prompt), (_, hit, _) in itertools.pairwise(turns):
            # The previous turn's prompt is a prefix of this one (--encoder raw renders
            # the history as it was sent; replies are the recorded ones, so the blocks
            # vLLM cached from the live output match nothing): every full block of it hits.
            assert hit == previous_prompt // size * size, (size, turns)


def test_live_history_cached_tokens_equal_the_server_hits(
    vllm_plain: VllmServer, tmp_path: Path
) -> None:
    """--live-history: each turn resends the server's own reply; the two counts still
    agree, and each later turn still hits every full block of the prompt before it."""
    done = run_loadgen(
        vllm_plain,
        tmp_path,
        "--conc",
        str(CONC),
        "--isl",
        "256",
        "--osl",
        "32",
        "--turns",
        str(TURNS),
        "--turn-tokens",
        "64",
        "--think-time",
        "0",
        "--sessions-per-conc",
        "1",
        "--live-history",
    )
    assert done.returncode == 0, f"loadgen failed (log {vllm_plain.log}):\n{done.stderr}"
    result = json.loads((tmp_path / f"conc_{CONC}.json").read_text())
    recs = records(tmp_path, CONC)
    assert result["session_history"] == "live" and result["replay_sessions_cut"] == 0
    assert len(recs) == CONC * TURNS and all(r.ok for r in recs)
    cached = sum(r.cached_tokens or 0 for r in recs)
    assert cached > 0 and result["server_prefix_cache_hits"] == cached, result
    size = block_size(vllm_plain)
    by_session: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for r in recs:
        assert r.session_id is not None and r.turn_index is not None
        by_session[r.session_id].append((r.turn_index, r.cached_tokens or 0, r.prompt_tokens or 0))
    for turns in by_session.values():
        turns.sort()
        for (_, _, previous_prompt), (_, hit, prompt) in itertools.pairwise(turns):
            # the reply's text is in this prompt: it grew by more than the new user turn
            assert prompt > previous_prompt + 64, turns
            # (vLLM also caches the blocks of its own output, which can add hits)
            assert hit >= previous_prompt // size * size, (size, turns)


# One point of 8 requests, no warmup, the same seed (run_loadgen's) every time: the same
# prompts. 600-token prompts span whole KV blocks of 16 as of 256 tokens.
ONE_POINT = (
    "--conc", "2", "--prompts-per-conc", "4", "--warmup-per-conc", "0",
    "--isl", "600", "--osl", "8",
)  # fmt: skip


def test_reset_needs_dev_mode_and_stops_before_the_first_point(
    vllm_ngram: VllmServer, tmp_path: Path
) -> None:
    """The ngram server runs without dev mode (tests/support/vllm_servers.py)."""
    done = run_loadgen(vllm_ngram, tmp_path, *ONE_POINT, "--reset-prefix-cache")
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("loadgen: error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "POST /reset_prefix_cache" in errors[0] and "VLLM_SERVER_DEV_MODE=1" in errors[0]
    assert not list(tmp_path.glob("conc_*"))


def test_same_prompts_twice_hit_unless_the_cache_is_reset(
    vllm_plain: VllmServer, tmp_path: Path
) -> None:
    server = vllm_plain
    hits: dict[str, float] = {}
    for name, extra in (("first", ()), ("again", ()), ("reset", ("--reset-prefix-cache",))):
        before = server_counter(server, "vllm:prefix_cache_hits_total")
        done = run_loadgen(server, tmp_path / name, *ONE_POINT, *extra)
        assert done.returncode == 0, f"loadgen failed (log {server.log}):\n{done.stderr}"
        hits[name] = server_counter(server, "vllm:prefix_cache_hits_total") - before
    again, reset = records(tmp_path / "again", 2), records(tmp_path / "reset", 2)
    cached_again = sum(r.cached_tokens or 0 for r in again)
    size = block_size(server)
    # every request of the second run finds its whole-block prefix; after a reset none
    assert all(r.cached_tokens == ((r.prompt_tokens or 0) - 1) // size * size for r in again)
    assert cached_again > 0 and all(r.cached_tokens == 0 for r in reset)
    states = {
        name: json.loads((tmp_path / name / "conc_2.json").read_text())["cache_state"]
        for name in hits
    }
    assert states == {"first": "uncontrolled", "again": "uncontrolled", "reset": "reset"}
    # The server's own counter: the preflight probe (before the reset) hits alike in both
    # runs; the measured requests only without the reset.
    assert hits["again"] - hits["reset"] == cached_again, hits
