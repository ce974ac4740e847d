"""--speculative-config: vLLM 0.32's speculative config resolved to the simulator's K and
acceptance (vllm/config/speculative.py, SpeculativeConfig._acceptance_length_to_rates and
_resolve_synthetic_acceptance_rates, read at vllm-project/vllm 002e77c1).

The expected schedules here are derived by hand, not by calling the code under test: the
minimum-variance schedule for mean acceptance length L at K drafts accepts floor(L-1) drafts
every step plus one more with probability frac(L-1), so its unconditional rates are
floor(L-1) ones, then frac(L-1), then zeros; and the mean accepted drafts are their sum.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.cli import main as loadgen_main
from loadgen.sim.config import SimConfig
from loadgen.sim.parser import build_parser, config_from_args
from loadgen.sim.plan import draw_acceptance
from loadgen.sim.speculative import acceptance_length_to_rates, conditional_rates


def _config(spec: dict[str, object]) -> SimConfig:
    return config_from_args(build_parser().parse_args(["--speculative-config", json.dumps(spec)]))


@pytest.mark.parametrize(
    ("length", "k", "expected"),
    [
        (2.27, 2, [1.0, 0.27]),  # InferenceX dsv4_mtp.yaml thinking_on K=2
        (2.49, 3, [1.0, 0.49, 0.0]),  # K=3
        (3.77, 6, [1.0, 1.0, 0.77, 0.0, 0.0, 0.0]),  # dsv4-pro-0813-dspark K=6
        (2.0, 2, [1.0, 0.0]),
        (1.0, 4, [0.0, 0.0, 0.0, 0.0]),
        (9.0, 8, [1.0] * 8),  # every draft accepted at K=8
    ],
)
def test_length_resolves_to_the_minimum_variance_schedule(
    length: float, k: int, expected: list[float]
) -> None:
    rates = acceptance_length_to_rates(length, k)
    assert rates == pytest.approx(expected, abs=1e-12)
    assert 1 + sum(rates) == pytest.approx(length, abs=1e-12)


def test_synthetic_length_sets_k_and_conditional_acceptance() -> None:
    config = _config(
        {
            "method": "mtp",
            "num_speculative_tokens": 2,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": 2.27,
        }
    )
    assert config.spec_tokens == 2 and config.spec_method == "mtp"
    assert config.rejection_sample_method == "synthetic"
    # Conditional on the first draft (always accepted), the second is accepted 27% of steps.
    assert config.acceptance == pytest.approx((1.0, 0.27))


def test_unconditional_rates_become_conditional() -> None:
    config = _config(
        {
            "method": "dspark",
            "num_speculative_tokens": 3,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": [0.8, 0.4, 0.1],
        }
    )
    # P(2nd | 1st) = 0.4 / 0.8, P(3rd | 1st, 2nd) = 0.1 / 0.4
    assert config.acceptance == pytest.approx((0.8, 0.5, 0.25))
    assert conditional_rates([0.5, 0.0, 0.0]) == (0.5, 0.0, 0.0)


def test_drawn_steps_realize_the_synthetic_length() -> None:
    """The engine's draws under AL 2.27 (K=2): every step accepts 1 or 2 drafts (minimum
    variance), mean 1.27 within 4 standard errors of 20,000 Bernoulli(0.27) draws."""
    config = _config(
        {
            "num_speculative_tokens": 2,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": 2.27,
        }
    )
    accepted = np.asarray(draw_acceptance(np.random.default_rng(7), 20_000, config.acceptance))
    assert set(accepted.tolist()) == {1, 2}
    bound = 4 * np.sqrt(0.27 * 0.73 / 20_000)
    assert abs(accepted.mean() - 1.27) < bound


def test_standard_method_keeps_the_default_model_and_k8_is_accepted() -> None:
    config = _config({"method": "dspark", "num_speculative_tokens": 8})
    assert config.spec_tokens == 8 and len(config.acceptance) == 8
    assert config.rejection_sample_method == "standard"


@pytest.mark.parametrize(
    ("argv", "mentions"),
    [
        (["--speculative-config", "{not json"], "not JSON"),
        (["--speculative-config", '{"num_speculative_tokens": 0}'], "num_speculative_tokens"),
        (["--speculative-config", '{"num_speculative_tokens": 2, "method": "magic"}'], "magic"),
        (
            [
                "--speculative-config",
                '{"num_speculative_tokens": 2, "rejection_sample_method": "synthetic"}',
            ],
            "exactly one",
        ),
        (
            [
                "--speculative-config",
                '{"num_speculative_tokens": 2, "rejection_sample_method": '
                '"synthetic", "synthetic_acceptance_length": 3.5}',
            ],
            "[1, 3]",
        ),
        (
            [
                "--speculative-config",
                '{"num_speculative_tokens": 2, "rejection_sample_method": '
                '"synthetic", "synthetic_acceptance_rates": [0.5, 0.9]}',
            ],
            "non-increasing",
        ),
        (
            [
                "--speculative-config",
                '{"num_speculative_tokens": 2, "synthetic_acceptance_length": 2}',
            ],
            "synthetic",
        ),
        (["--speculative-config", '{"num_speculative_tokens": 2, "typo": 1}'], "typo"),
        (
            ["--spec-tokens", "2", "--speculative-config", '{"num_speculative_tokens": 2}'],
            "not both",
        ),
    ],
)
def test_bad_speculative_config_exits_2_with_one_line(
    argv: list[str], mentions: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert loadgen_main(["sim", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert mentions in err


def test_embedded_simulator_leaves_k_to_the_speculative_config() -> None:
    """`loadgen --sim` adds its --spec-tokens default only without --speculative-config,
    which refuses the shorthand beside it (the run above would exit 2)."""
    from loadgen.run.embedded_sim import simulator_argv

    spec = '{"num_speculative_tokens": 3}'
    assert "--spec-tokens" not in simulator_argv(8000, ["--speculative-config", spec])
    assert "--spec-tokens" not in simulator_argv(8000, [f"--speculative-config={spec}"])
    assert "--spec-tokens" in simulator_argv(8000, ["--step-fixed-ms", "3"])
