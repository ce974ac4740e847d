"""The --trials interval covers what it promises (issue 24: "CIs that contain the mean ...
at least at the rate the method promises"), checked where it is cheap: the whole runner
(sweep_points, trials, pooling, files) on the virtual-clock fake backend of the
schedule-relative latency tests, whose TTFT is noisy per request (drawn from the request
body, so from each trial's seed) and whose clock costs nothing to advance.

Deterministic: the seeds and the fake's draws are fixed, so the counts below are the same
on every run; the bounds leave room for the binomial spread of 40 runs (sd ~3.4 % at 95 %).
Measured (seed 1): the intervals cover the 200-trial mean in 38 of 40 points, and
another point's mean in 19 of 20.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.errors import ServerError
from loadgen.records import RequestRecord
from loadgen.run.backend import OnRecord
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.workload.plan import RequestSpec
from tests.support.exact_server import (
    ITL_MS,
    MS,
    TOKENS_PER_CHUNK,
    TTFT_MS,
    ExactServer,
    VirtualClock,
    exact_record,
    spec,
)

RUNS = 40
CONCS = tuple(range(1, RUNS + 1))
TRIALS = 5
NOISE_MS = 20.0  # mean of the exponential extra TTFT per request


class NoisyServer(ExactServer):
    """ExactServer with a per-request extra TTFT ~ Exponential(NOISE_MS), drawn from a hash
    of the request's body: each trial's prompts (its seed) give it its own draws."""

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: OnRecord,
    ) -> RequestRecord:
        await asyncio.sleep(0)
        digest = hashlib.blake2b(request.body, digest_size=8).digest()
        uniform = (int.from_bytes(digest, "big") + 0.5) / 2**64
        extra_ns = int(-math.log(uniform) * NOISE_MS * MS)
        start = scheduled_ns
        chunks = request.max_tokens // TOKENS_PER_CHUNK
        times = tuple(start + extra_ns + (TTFT_MS + i * ITL_MS) * MS for i in range(chunks))
        self.clock.now_ns = max(self.clock.now_ns, times[-1])
        record = exact_record(request, conc, scheduled_ns, times)
        on_record(record)
        return record


async def _sweep(results: Path, tokens: Tokenizer, seed: int) -> list[dict[str, Any]]:
    """One sweep of RUNS points, each TRIALS trials of 20 requests: in this fake a TTFT
    does not depend on the concurrency, so its points are RUNS replicates of one
    experiment (each point draws its own prompts), measured in one sweep."""
    clock = VirtualClock()
    await sweep_points(
        spec(results, conc=CONCS, num_prompts=20, warmup_per_conc=0, trials=TRIALS, seed=seed),
        SweepOptions(tokenizer=tokens, backend=NoisyServer(clock), clock=clock, sleep=clock.sleep),
    )
    return [
        orjson.loads((results / f"conc_{conc}.json").read_bytes())["trial_spread"]["median_ttft_ms"]
        for conc in CONCS
    ]


async def test_trial_intervals_cover_the_mean_at_the_promised_rate(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    runs = await _sweep(tmp_path, tokenizer, seed=1)
    values = [v for entry in runs for v in entry["values"]]
    assert len(set(values)) > len(values) // 2  # the trials really differ
    truth = sum(values) / len(values)  # 200 trials: close to the true mean
    assert abs(truth - TTFT_MS - NOISE_MS * math.log(2)) < 3  # ~ the median of the noise
    covered = sum(e["ci_low"] <= truth <= e["ci_high"] for e in runs) / RUNS
    # 95 % promised; a normal (z) interval at n=5 gives ~88 %, a wrong width far less
    assert covered >= 0.875, covered
    # another run's 5-trial mean (another point: the same experiment) lies in an interval
    # with probability P(|t_4| < t_0.975,4 / sqrt(2)) = 0.879 (both means vary)
    half = RUNS // 2
    hit = (
        sum(
            a["ci_low"] <= b["mean"] <= a["ci_high"]
            for a, b in zip(runs[:half], runs[half:], strict=True)
        )
        / half
    )
    assert hit >= 0.7, hit
    assert all(e["wide"] is False and e["n"] == TRIALS for e in runs)


class DiesInTrialTwo(NoisyServer):
    """The server goes away during trial 2's measured phase (a run-level ServerError)."""

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: OnRecord,
    ) -> RequestRecord:
        if "-t2-" in x_request_id and "-t2-w" not in x_request_id and request.index == 3:
            raise ServerError("the fake server is gone")
        return await super().send(
            request,
            x_request_id=x_request_id,
            conc=conc,
            scheduled_ns=scheduled_ns,
            on_record=on_record,
        )


async def test_a_run_level_stop_in_trial_two_keeps_trial_one_and_resume_ends_the_point(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    settings = dict(conc=(2,), num_prompts=8, warmup_per_conc=1, trials=3, seed=5)
    clock = VirtualClock()
    with pytest.raises(ServerError) as stopped:
        await sweep_points(
            spec(tmp_path, **settings),
            SweepOptions(
                tokenizer=tokenizer, backend=DiesInTrialTwo(clock), clock=clock, sleep=clock.sleep
            ),
        )
    line = str(stopped.value)
    assert "conc_2_trial_2.json is kept marked complete: false" in line, line
    assert "its first 1 of 3 trials are complete and kept" in line, line
    first = (tmp_path / "conc_2_trial_1.json").read_bytes()
    assert not (tmp_path / "conc_2.json").exists()
    clock = VirtualClock()
    await sweep_points(
        spec(tmp_path, resume=True, **settings),
        SweepOptions(
            tokenizer=tokenizer, backend=NoisyServer(clock), clock=clock, sleep=clock.sleep
        ),
    )
    assert (tmp_path / "conc_2_trial_1.json").read_bytes() == first  # not measured again
    pooled = orjson.loads((tmp_path / "conc_2.json").read_bytes())
    assert pooled["complete"] is True and pooled["num_prompts"] == 24
    # trial 2 measured again with the same seed: its figures are those of an unbroken run
    clean = tmp_path / "clean"
    clock = VirtualClock()
    await sweep_points(
        spec(clean, **settings),
        SweepOptions(
            tokenizer=tokenizer, backend=NoisyServer(clock), clock=clock, sleep=clock.sleep
        ),
    )
    assert (
        pooled["trial_spread"]["median_ttft_ms"]["values"]
        == orjson.loads((clean / "conc_2.json").read_bytes())["trial_spread"]["median_ttft_ms"][
            "values"
        ]
    )
