"""The lossless check's arithmetic (metrics/lossless.py): pairing by prompt, identity,
first divergence, Wilson intervals and the verdicts."""

from __future__ import annotations

import base64
import hashlib
import math
from array import array

import numpy as np
import pytest

from loadgen.metrics.lossless import (
    FLAGGED,
    UNVERIFIED,
    LosslessRun,
    Share,
    Verdict,
    check_lossless,
    first_divergence,
    identical,
)
from loadgen.records import OutputBasis, RequestOutput


def out(prompt: str, ids: list[int] | None = None, text: str = "") -> RequestOutput:
    if ids is None:
        basis, packed, raw = OutputBasis.TEXT, None, text.encode()
    else:
        raw = array("I", ids).tobytes()
        basis, packed = OutputBasis.TOKEN_IDS, base64.b64encode(raw).decode()
    return RequestOutput(
        basis=basis,
        digest=hashlib.blake2b(raw, digest_size=16).hexdigest(),
        text=text,
        token_ids=packed,
        finish_reason="length",
        prompt_digest=prompt,
    )


def test_wilson_interval_matches_the_textbook_values() -> None:
    # 0 of 10 and 10 of 10: the rule-of-three-like bounds Wilson gives (0.2775, 0.7225)
    assert Share(0, 10).interval() == pytest.approx((0.0, 0.27753), abs=1e-5)
    assert Share(10, 10).interval() == pytest.approx((0.72247, 1.0), abs=1e-5)
    # Wilson's bounds are the p where the score test is at the edge: the roots of
    # (k/n - p)^2 = z^2 p (1 - p) / n, solved here as a quadratic in p
    k, n, z = 81, 263, 1.959963984540054
    a, b, c = 1 + z * z / n, -(2 * k / n + z * z / n), (k / n) ** 2
    roots = sorted(float(r) for r in np.roots([a, b, c]))
    assert Share(k, n).interval() == pytest.approx(tuple(roots), abs=1e-12)
    assert Share(0, 0).interval() is None and Share(0, 0).value is None


def test_outputs_pair_by_prompt_in_order_whatever_the_send_order() -> None:
    base = [out("p1", [1, 2, 3]), out("p2", [4, 5]), out("p1", [1, 2, 9])]
    lane = [out("p2", [4, 5]), out("p1", [1, 2, 3]), out("p1", [1, 2, 7]), out("p3", [0])]
    check = check_lossless([LosslessRun("b", {4: base}), LosslessRun("x", {4: lane})])
    assert check is not None
    (only,) = check.lanes
    # p3 has no partner; the second p1 pairs the base's second p1 and differs at token 2
    assert (only.share.identical, only.share.pairs) == (2, 3)
    assert only.divergence_median == 2 and only.divergence_unit == "token"
    assert only.verdict is Verdict.NO_FLOOR  # no repeat: nothing to judge it against


def test_first_divergence_by_tokens_else_by_characters() -> None:
    assert first_divergence(out("p", [1, 2, 3]), out("p", [1, 2, 3, 4])) == 3
    assert first_divergence(out("p", [5]), out("p", [6])) == 0
    # one side kept only its text: the texts are compared, character by character
    assert first_divergence(out("p", [1], text="abcd"), out("p", text="abXd")) == 2
    assert identical(out("p", [1], text="same"), out("p", text="same"))
    assert not identical(out("p", [1], text="same"), out("p", [2], text="same"))


def _runs(lane_identical: int, floor_identical: int, n: int = 40) -> list[LosslessRun]:
    base = [out(f"p{i}", [i, i]) for i in range(n)]
    repeat = [out(f"p{i}", [i, i] if i < floor_identical else [i, -i % 7 + n]) for i in range(n)]
    lane = [out(f"p{i}", [i, i] if i < lane_identical else [i, n + 1]) for i in range(n)]
    return [
        LosslessRun("base", {8: base}),
        LosslessRun("base.repeat", {8: repeat}),
        LosslessRun("lane", {8: lane}),
    ]


@pytest.mark.parametrize(
    ("lane", "floor", "verdict"),
    [
        (40, 40, Verdict.LOSSLESS),
        (37, 40, Verdict.LOSSLESS),  # 92.5 %: its interval still reaches the floor's
        (30, 40, Verdict.DIFFERS),  # 75 %: upper bound 0.86 < the floor's lower 0.91
        (30, 32, Verdict.LOSSLESS),  # a noisy floor (80 %) excuses the same share
    ],
)
def test_a_lane_is_flagged_only_below_the_noise_floor_beyond_both_intervals(
    lane: int, floor: int, verdict: Verdict
) -> None:
    check = check_lossless(_runs(lane, floor), repeat="base.repeat")
    assert check is not None and check.repeat == "base.repeat"
    (only,) = check.lanes  # the repeat is the floor, not a lane
    assert only.floor == Share(floor, 40) and only.share == Share(lane, 40)
    assert only.verdict is verdict
    high = (only.share.interval() or (0, 0))[1]
    floor_low = (Share(floor, 40).interval() or (0, 0))[0]
    assert (verdict is Verdict.DIFFERS) == (high < floor_low)
    assert (only.label == FLAGGED) == (verdict is Verdict.DIFFERS)
    assert bool(check.failures()) == (verdict is not Verdict.LOSSLESS)


def test_synthetic_acceptance_is_never_lossless() -> None:
    runs = _runs(40, 40)
    runs[2] = LosslessRun("lane", runs[2].outputs, synthetic=True)
    check = check_lossless(runs, repeat="base.repeat")
    assert check is not None
    (only,) = check.lanes
    assert only.share.value == 1.0 and only.verdict is Verdict.UNVERIFIED
    assert only.label == UNVERIFIED and check.failures()


def test_nothing_to_check_without_kept_outputs() -> None:
    assert check_lossless([LosslessRun("a", {}), LosslessRun("b", {})]) is None
    assert check_lossless([LosslessRun("a", {1: [out("p", [1])]})]) is None


def test_divergence_percentiles_are_numpys() -> None:
    base = [out(f"p{i}", list(range(20))) for i in range(11)]
    lane = [out(f"p{i}", [*range(i), 99]) for i in range(11)]  # diverges at token i
    check = check_lossless([LosslessRun("b", {1: base}), LosslessRun("x", {1: lane})])
    assert check is not None
    (only,) = check.lanes
    assert only.divergence_median == 5 and math.isclose(only.divergence_p10 or 0, 1.0)


def test_a_lane_that_kept_nothing_is_not_left_out() -> None:
    runs = _runs(40, 40)
    runs[2] = LosslessRun("lane", {8: []})  # measured, outputs not kept
    check = check_lossless(runs, repeat="base.repeat")
    assert check is not None
    (only,) = check.lanes
    assert only.verdict is Verdict.NO_PAIRS and check.failures()


def test_an_interval_ends_at_exactly_0_and_1_at_none_and_all() -> None:
    # the formula's centre and half-width cancel at 0 of n only to within rounding: the
    # CSV printed 5.55e-17 for 0 of 3
    for n in range(1, 200):
        low, _ = Share(0, n).interval() or (None, None)
        _, high = Share(n, n).interval() or (None, None)
        assert low == 0.0 and high == 1.0, n


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_lane_of_too_few_pairs_is_not_called_lossless(n: int) -> None:
    """Every output differs, and the floor is perfect: with 3 pairs or fewer, 0 of n's
    interval still reaches n of n's, so the check could not have flagged anything."""
    check = check_lossless(_runs(0, n, n=n), repeat="base.repeat")
    assert check is not None
    (only,) = check.lanes
    assert only.share == Share(0, n) and only.floor == Share(n, n)
    assert only.verdict is Verdict.TOO_FEW and check.failures()
    # the pairs it needs, by the same rule: the fewest at which 0 of them lies below the
    # floor's interval, and one fewer would not
    needed = only.needed
    assert needed is not None and needed > n
    floor_low = (Share(n, n).interval() or (0, 0))[0]
    assert (Share(0, needed).interval() or (1, 1))[1] < floor_low
    assert (Share(0, needed - 1).interval() or (1, 1))[1] >= floor_low
    assert f"{n} pairs" in only.label and f"{needed} needed" in only.label
    assert f"--prompts-per-conc {-(-needed // 8)}" in only.label


def test_the_pairs_needed_move_with_the_floor() -> None:
    # a noisier floor needs more pairs; one with no identical pair cannot be fallen below
    lanes = []
    for floor in (3, 2, 0):
        check = check_lossless(_runs(0, floor, n=3), repeat="base.repeat")
        assert check is not None
        (only,) = check.lanes
        assert only.verdict is Verdict.TOO_FEW
        lanes.append(only)
    perfect, noisy, none = (lane.needed for lane in lanes)
    assert perfect is not None and noisy is not None and perfect < noisy
    assert none is None and "no number of pairs" in lanes[2].label


def test_enough_pairs_are_judged_as_before() -> None:
    # 4 pairs is the first count at which 0 of them is told from a perfect floor of as many
    differs = check_lossless(_runs(0, 4, n=4), repeat="base.repeat")
    same = check_lossless(_runs(4, 4, n=4), repeat="base.repeat")
    assert differs is not None and same is not None
    assert differs.lanes[0].verdict is Verdict.DIFFERS
    assert same.lanes[0].verdict is Verdict.LOSSLESS and not same.failures()


def test_require_lossless_fails_on_too_few_pairs_saying_how_many() -> None:
    from loadgen.compare.cli import NotLossless, require_lossless

    check = check_lossless(_runs(0, 3, n=3), repeat="base.repeat")
    with pytest.raises(NotLossless) as raised:
        require_lossless(check)
    message = str(raised.value)
    assert "\n" not in message and "lane at conc 8: too few pairs to judge (3 pairs" in message
    assert "5 needed" in message  # 0 of 4 reaches 3 of 3's lower bound 0.4385, 0 of 5 not
