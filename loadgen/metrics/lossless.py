"""Are the fast tokens right? Each lane's outputs against the baseline's, prompt by prompt (pure).

With greedy sampling, speculative decoding that verifies its drafts is lossless by
construction: every output equals the one the server gives without speculation, but for
the batch-dependent numerics a server shows even without it. So a lane's *identity
share* (requests whose output is identical to the baseline's answer to the same prompt)
is judged against the *noise floor*: the same share between two runs of the baseline
configuration (a repeat of the baseline lane). A lane is flagged when its share is below
the floor by more than the two shares' intervals can explain: its 95 % Wilson interval's
upper bound below the floor's lower bound (the floor is a measurement too, of as many
requests). A lane whose server accepts drafts synthetically is never called lossless:
its outputs are not verified by the target at all. A lane of so few pairs that even none
identical would lie within the floor's interval is not judged either: the check could not
have failed, so it says how many pairs it needs (`pairs_needed`).

Requests pair by their prompt's digest (lanes run with the same seed send the same
prompts), in order where a prompt repeats. Computed once here; every sink reads it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from loadgen.records import OutputBasis, RequestOutput

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval
FLAGGED = "outputs differ from the baseline beyond run-to-run noise"
UNVERIFIED = "outputs not verified by the target"


class Verdict(StrEnum):
    """What a lane's outputs at one concurrency are called (docs/results.md, `lossless`)."""

    LOSSLESS = "lossless"  # within the noise floor
    DIFFERS = "differs"  # FLAGGED
    UNVERIFIED = "unverified"  # synthetic acceptance: never lossless
    NO_FLOOR = "no_floor"  # no repeat of the baseline to judge the share against
    NO_PAIRS = "no_pairs"  # no prompt in common with the baseline (or no outputs kept)
    TOO_FEW = "too_few_pairs"  # even none identical would be within the floor's interval


@dataclass(frozen=True, slots=True)
class Share:
    """Identical pairs out of pairs, with its 95 % Wilson score interval."""

    identical: int
    pairs: int

    @property
    def value(self) -> float | None:
        return self.identical / self.pairs if self.pairs else None

    def interval(self) -> tuple[float, float] | None:
        """Wilson's score interval (it stays inside [0, 1] and is not empty at 0 or n).
        Its end at 0 of n is 0 and at n of n is 1 exactly: the formula's centre and
        half-width cancel there only to within rounding (5.55e-17 at 0 of 3)."""
        n = self.pairs
        if not n:
            return None
        p = self.identical / n
        z2 = Z95 * Z95
        centre = (p + z2 / (2 * n)) / (1 + z2 / n)
        half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        low = 0.0 if self.identical == 0 else max(0.0, centre - half)
        high = 1.0 if self.identical == n else min(1.0, centre + half)
        return low, high


def _apart(share: Share, floor_low: float) -> bool:
    """The flagging rule: the share's interval wholly below the floor's lower bound."""
    interval = share.interval()
    return interval is not None and interval[1] < floor_low


def pairs_needed(floor: Share) -> int | None:
    """The fewest pairs at which a lane with none identical would be told from `floor`
    (the rule `_apart` with 0 of n), found by bisection over n (0 of n's upper bound falls
    as n grows); None when no number of pairs would: the floor's lower bound is 0 (its
    repeat matched none of the baseline's outputs), or there is no floor."""
    interval = floor.interval()
    if interval is None or interval[0] <= 0:
        return None
    low_end, high_end = 0, 1  # not apart at low_end (0 pairs), apart at high_end
    while not _apart(Share(0, high_end), interval[0]):
        low_end, high_end = high_end, high_end * 2
    while high_end - low_end > 1:
        middle = (low_end + high_end) // 2
        if _apart(Share(0, middle), interval[0]):
            high_end = middle
        else:
            low_end = middle
    return high_end


@dataclass(frozen=True, slots=True)
class LaneCheck:
    """One lane at one concurrency against the baseline."""

    run: str
    conc: int
    share: Share
    # where the first differing token (character, where either side kept only text) is,
    # over the pairs that differ: median and 10th percentile; None when none differ
    divergence_median: float | None
    divergence_p10: float | None
    divergence_unit: str  # "token" or "character"
    floor: Share | None  # the baseline's repeat at this concurrency
    verdict: Verdict
    synthetic: bool
    # the fewest pairs at which the check could flag this lane at all (pairs_needed);
    # None without a floor, or with one no number of pairs would fall below
    needed: int | None = None

    @property
    def flagged(self) -> bool:
        return self.verdict is Verdict.DIFFERS

    @property
    def label(self) -> str:
        """The words every sink prints for the verdict."""
        if self.verdict is Verdict.TOO_FEW:
            return self._too_few()
        return {
            Verdict.LOSSLESS: "within run-to-run noise",
            Verdict.DIFFERS: FLAGGED,
            Verdict.UNVERIFIED: UNVERIFIED,
            Verdict.NO_FLOOR: "no noise floor (no repeat of the baseline)",
            Verdict.NO_PAIRS: "no prompt in common with the baseline",
        }[self.verdict]

    def _too_few(self) -> str:
        if self.needed is None:
            return (
                "too few pairs to judge: the noise floor has no identical pair, so no number "
                "of pairs could show a difference; make the baseline repeat itself "
                "(greedy, one seed) and give the repeat more prompts"
            )
        per_conc = -(-self.needed // self.conc)
        return (
            f"too few pairs to judge ({self.share.pairs} pairs: even none identical would "
            f"be within run-to-run noise; {self.needed} needed): measure at least "
            f"{self.needed} requests at this concurrency in each lane "
            f"(--prompts-per-conc {per_conc})"
        )


@dataclass(frozen=True, slots=True)
class LosslessCheck:
    baseline: str
    repeat: str | None  # the baseline's repeat run, the noise floor's source
    lanes: tuple[LaneCheck, ...]

    @property
    def flagged(self) -> tuple[LaneCheck, ...]:
        return tuple(lane for lane in self.lanes if lane.flagged)

    def failures(self) -> list[str]:
        """Why `--require-lossless` fails ([] when it passes): a flagged lane, a lane never
        verified, one that cannot be judged without a floor or without pairs."""
        return [
            f"{lane.run} at conc {lane.conc}: {lane.label}"
            for lane in self.lanes
            if lane.verdict is not Verdict.LOSSLESS
        ]


@dataclass(frozen=True, slots=True)
class LosslessRun:
    """A run as the check reads it: its kept outputs per concurrency, and whether its
    server accepts drafts synthetically (declared, or seen in its config)."""

    name: str
    outputs: Mapping[int, Sequence[RequestOutput]]
    synthetic: bool = False


def _pairs(
    base: Sequence[RequestOutput], other: Sequence[RequestOutput]
) -> list[tuple[RequestOutput, RequestOutput]]:
    by_prompt: dict[str, list[RequestOutput]] = defaultdict(list)
    for output in base:
        by_prompt[output.prompt_digest].append(output)
    taken: dict[str, int] = defaultdict(int)
    pairs = []
    for output in other:
        candidates = by_prompt.get(output.prompt_digest)
        index = taken[output.prompt_digest]
        if candidates and index < len(candidates):
            pairs.append((candidates[index], output))
            taken[output.prompt_digest] = index + 1
    return pairs


def _both_ids(a: RequestOutput, b: RequestOutput) -> bool:
    return a.basis is OutputBasis.TOKEN_IDS and b.basis is OutputBasis.TOKEN_IDS


def identical(a: RequestOutput, b: RequestOutput) -> bool:
    """Token for token where both kept ids, else character for character."""
    if a.basis is b.basis:
        return a.digest == b.digest
    return (a.text, a.reasoning) == (b.text, b.reasoning)


def first_divergence(a: RequestOutput, b: RequestOutput) -> int:
    """Index of the first token (character) where the two differ; the shorter one's length
    when one is the other's prefix."""
    left: Sequence[object]
    right: Sequence[object]
    if _both_ids(a, b):
        left, right = a.ids() or (), b.ids() or ()
    else:
        left, right = a.text + a.reasoning, b.text + b.reasoning
    for index, (x, y) in enumerate(zip(left, right, strict=False)):
        if x != y:
            return index
    return min(len(left), len(right))


def share_of(base: Sequence[RequestOutput], other: Sequence[RequestOutput]) -> Share:
    pairs = _pairs(base, other)
    return Share(sum(identical(a, b) for a, b in pairs), len(pairs))


def _verdict(share: Share, floor: Share | None, synthetic: bool) -> Verdict:
    if synthetic:
        return Verdict.UNVERIFIED
    if share.interval() is None:
        return Verdict.NO_PAIRS
    floor_interval = None if floor is None else floor.interval()
    if floor_interval is None:
        return Verdict.NO_FLOOR
    if not _apart(Share(0, share.pairs), floor_interval[0]):
        return Verdict.TOO_FEW  # the check could not have flagged it, whatever it sent
    return Verdict.DIFFERS if _apart(share, floor_interval[0]) else Verdict.LOSSLESS


def check_lane(
    run: LosslessRun, conc: int, base: Sequence[RequestOutput], floor: Share | None
) -> LaneCheck:
    pairs = _pairs(base, run.outputs.get(conc, ()))
    same = [identical(a, b) for a, b in pairs]
    share = Share(sum(same), len(pairs))
    where = [first_divergence(a, b) for (a, b), s in zip(pairs, same, strict=True) if not s]
    by_ids = all(_both_ids(a, b) for a, b in pairs)
    return LaneCheck(
        run=run.name,
        conc=conc,
        share=share,
        divergence_median=float(np.median(where)) if where else None,
        divergence_p10=float(np.percentile(where, 10)) if where else None,
        divergence_unit="token" if by_ids else "character",
        floor=floor,
        verdict=_verdict(share, floor, run.synthetic),
        synthetic=run.synthetic,
        needed=None if floor is None else pairs_needed(floor),
    )


def check_lossless(runs: Sequence[LosslessRun], repeat: str | None = None) -> LosslessCheck | None:
    """Every run after the first against the first, per concurrency both measured;
    `repeat` names the run that repeats the baseline (the noise floor). None when no run
    kept its outputs (nothing to check)."""
    if len(runs) < 2 or not any(any(run.outputs.values()) for run in runs):
        return None
    baseline = runs[0]
    again = next((run for run in runs[1:] if run.name == repeat), None)
    floors = {
        conc: share_of(outputs, again.outputs.get(conc, ()))
        for conc, outputs in baseline.outputs.items()
        if again is not None
    }
    lanes = tuple(
        check_lane(run, conc, baseline.outputs[conc], floors.get(conc))
        for run in runs[1:]
        if run is not again
        for conc in sorted(run.outputs)
        if conc in baseline.outputs
    )
    return LosslessCheck(baseline.name, None if again is None else again.name, lanes)
