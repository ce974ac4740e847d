"""Engine steps reconstructed from loadgen's receive stamps against real vLLM's own step
count: `vllm:iteration_tokens_total` observes every engine step once, so its `_count`
delta over a point is the steps vLLM ran (the plain server of conftest.py: no
speculative decoding, stream interval 1, one engine).

One `loadgen` run per concurrency (1..8, no warmup) with a scrape before and after: the
delta also holds the preflight probe's steps (one request of PROBE_TOKENS tokens, at
most that many steps), so the estimate must lie within 5% of [delta - PROBE_TOKENS,
delta]. vLLM's frontend sometimes merges two steps' outputs into one event when it
falls behind (test_vllm.py: coalesced_chunks): those steps are one cluster, within the
5% on this machine.

Null is allowed, never a wrong number: this CPU build's frontend sometimes writes a
whole response in one go (ITL 0, even at conc 1: frontend_kept_awake makes it rarer, not
gone), and writes one step's chunks of several streams up to ~1 ms apart (Python per
request), which the boundary search can find ambiguous (3.4% of gaps near an 801 us
boundary at conc 2) or split (344 clusters for 213 steps at conc 8 on a busy machine);
then the point says why in `steps_note`. At least one concurrency must be estimated, or
nothing was compared (issue 34 stays open for the nulls).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.client.preflight import PROBE_TOKENS
from tests.integration.test_vllm import point, run_loadgen, server_counter
from tests.support.vllm_servers import VllmServer, frontend_kept_awake

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1500)]

STEPS = "vllm:iteration_tokens_total_count"


def test_estimated_steps_match_vllms_step_count(vllm_plain: VllmServer, tmp_path: Path) -> None:
    estimated: list[int] = []
    with frontend_kept_awake(vllm_plain):
        for conc in (1, 2, 4, 8):
            results = tmp_path / f"conc{conc}"
            before = server_counter(vllm_plain, STEPS)
            done = run_loadgen(
                vllm_plain,
                results,
                "--conc",
                str(conc),
                "--isl",
                "128",
                "--osl",
                "64",
                "--prompts-per-conc",
                "3",
                "--warmup-per-conc",
                "0",
            )
            after = server_counter(vllm_plain, STEPS)
            assert done.returncode == 0, done.stderr[-3000:]
            result = point(results, conc)
            delta = after - before
            estimate = result["steps_observed"]
            print(
                f"conc {conc}: loadgen {estimate} steps ({result['steps_note']}), vLLM "
                f"{delta:.0f} (incl. the preflight's <= {PROBE_TOKENS})"
            )
            if estimate is None:
                assert result["steps_note"].startswith("clusters cannot be told apart")
                continue
            estimated.append(conc)
            assert result["steps_engines"] == 1
            assert (delta - PROBE_TOKENS) * 0.95 <= estimate <= delta * 1.05, (conc, delta)
    assert estimated, "no concurrency was estimated: nothing was compared with vLLM's count"
