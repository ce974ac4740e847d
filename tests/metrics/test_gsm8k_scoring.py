"""metrics/gsm8k.py against lm-eval's gsm8k filters and exact_match, case by case."""

from __future__ import annotations

import random
import re
import time

import pytest

from loadgen.metrics.gsm8k import (
    FALLBACK,
    FLEXIBLE,
    IGNORED,
    STRICT,
    exact_match,
    extract,
    gold,
    normalise,
    score,
)
from loadgen.workload.gsm8k import shot_indices

GOLD = "She has 3 * 4 = <<3*4=12>>12.\nSo 1,200 - 12 = 1188.\n#### 1,188"


def test_gold_is_the_number_after_the_marks_without_commas() -> None:
    assert gold(GOLD) == "1188"
    assert gold("x\n#### $5.") == "5"


@pytest.mark.parametrize(
    ("response", "strict", "flexible", "strict_ok", "flexible_ok"),
    [
        ("so 1188\n#### 1,188", "1,188", "1,188", True, True),
        ("#### 5\n#### 1188.", "1188.", "1188.", True, True),  # last match; trailing dot ignored
        ("The answer is $1,188.", FALLBACK, "$1,188.", False, True),
        ("1188 then 7", FALLBACK, "7", False, False),  # flexible: the last number
        ("#### -3", "-3", "-3", False, False),
        ("nothing here", FALLBACK, FALLBACK, False, False),
    ],
)
def test_filters(
    response: str, strict: str, flexible: str, strict_ok: bool, flexible_ok: bool
) -> None:
    assert extract(STRICT, response) == strict
    assert extract(FLEXIBLE, response) == flexible
    scored = score(response, GOLD)
    assert (scored.strict_correct, scored.flexible_correct) == (strict_ok, flexible_ok)


def test_exact_match_and_lm_evals_stderr() -> None:
    """lm-eval's mean_stderr: the sample stddev / sqrt(n)."""
    figure = exact_match([True, True, True, False])
    assert figure.value == 0.75 and figure.n == 4
    assert figure.stderr == pytest.approx((0.75 * 0.25 * 4 / 3) ** 0.5 / 2)
    assert exact_match([True]).stderr is None


def test_shots_drawn_as_lm_evals_sampler() -> None:
    rnd = random.Random(1234)
    pool = list(range(7473))  # GSM8K's train split
    expected = [rnd.sample(pool, 5) for _ in range(3)]
    assert shot_indices(3, 7473) == expected


@pytest.mark.parametrize(
    "text",
    ["#### 5", "a\n#### 1\nb #### 2.", "####  7", "no mark", "", "x#### ", "$1,2.\n#### $3."],
)
def test_normalise_removes_up_to_the_last_mark_as_lm_evals_regexes_do(text: str) -> None:
    expected = text
    for pattern in IGNORED:  # lm-eval's exact_match, the regexes as it runs them
        expected = re.sub(pattern, "", expected)
    assert normalise(text) == expected.lower()


@pytest.mark.exclusive
def test_a_200kb_digit_run_is_scored_in_linear_time() -> None:
    """The subject is cost, so this one test times (alone, and prints it): the regex
    `(?s).*#### ` took 12 s on this reply (quadratic); linear work on 200 KB is
    milliseconds, 1 s leaves room for a loaded machine and still fails the quadratic form
    tenfold."""
    reply = "7" * 200_000
    started = time.perf_counter()
    scored = score(reply, GOLD)
    elapsed = time.perf_counter() - started
    print(f"gsm8k scoring: a 200 KB digit run in {elapsed * 1e3:.1f} ms")
    assert (scored.strict, scored.flexible) == (FALLBACK, reply)
    assert not scored.flexible_correct
    assert normalise(reply) == reply
    assert elapsed < 1.0, f"{elapsed:.2f} s"
