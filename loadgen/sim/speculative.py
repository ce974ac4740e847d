"""`--speculative-config JSON`: vLLM 0.32's speculative config, resolved to the simulator's K
and per-position acceptance.

vLLM's synthetic rejection sampling takes *unconditional* per-position rates (position i: the
chance that the first i+1 drafts are all accepted), given directly or derived from a target
mean acceptance length by the minimum-variance schedule: every whole accepted draft gets
rate 1, the fractional remainder goes to the next position, later positions get 0 (AL 2.27 at
K=2 is [1.0, 0.27]). The simulator draws each position *conditionally* on the ones before
it, so the rates are divided through here; the distribution of accepted drafts per step is
the same.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from loadgen.sim.config import ConfigError

# vLLM's SpeculativeMethod names the simulator answers to (all modelled alike: only K and the
# acceptance schedule matter to a step-time model).
METHODS = (
    "mtp",
    "deepseek_mtp",
    "eagle",
    "eagle3",
    "draft_model",
    "ngram",
    "medusa",
    "mlp_speculator",
    "suffix",
    "dflash",
    "dspark",
)
# Keys that change what a GPU computes but not what the simulator models: accepted, ignored.
IGNORED_KEYS = frozenset(
    {
        "model",
        "draft_tensor_parallel_size",
        "draft_sample_method",
        "enforce_eager",
        "quantization",
        "max_model_len",
        "revision",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "attention_backend",
    }
)
KNOWN_KEYS = frozenset(
    {
        "method",
        "num_speculative_tokens",
        "rejection_sample_method",
        "synthetic_acceptance_length",
        "synthetic_acceptance_rates",
    }
)


@dataclass(frozen=True, slots=True)
class Speculative:
    method: str
    spec_tokens: int
    rejection_sample_method: str
    # Conditional per-position acceptance for the simulator's draws; () = the default model.
    acceptance: tuple[float, ...]


def acceptance_length_to_rates(length: float, n: int) -> list[float]:
    """Unconditional per-position rates for mean acceptance length `length` at K=n (vLLM's
    minimum-variance schedule; same arithmetic, so the same floats)."""
    accepted_drafts = length - 1
    whole = int(accepted_drafts)
    return ([1.0] * whole + [accepted_drafts - whole] + [0.0] * (n - whole - 1))[:n]


def conditional_rates(unconditional: list[float]) -> tuple[float, ...]:
    """P(position i accepted | all before it accepted), from marginal rates."""
    out: list[float] = []
    previous = 1.0
    for rate in unconditional:
        out.append(min(1.0, rate / previous) if previous > 0 else 0.0)
        previous = rate
    return tuple(out)


def parse_speculative_config(text: str) -> Speculative:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        example = '{"method": "mtp", "num_speculative_tokens": 2}'
        raise ConfigError(
            f"--speculative-config is not JSON ({exc.msg}); give e.g. '{example}'"
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError("--speculative-config must be a JSON object")
    unknown = sorted(set(raw) - KNOWN_KEYS - IGNORED_KEYS)
    if unknown:
        raise ConfigError(
            f"--speculative-config: unknown key(s) {', '.join(unknown)}; "
            f"the simulator models {', '.join(sorted(KNOWN_KEYS))}"
        )
    method = raw.get("method", "mtp")
    if method not in METHODS:
        raise ConfigError(
            f"--speculative-config: method {method!r} is not one of {', '.join(METHODS)}"
        )
    k = raw.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(
            f"--speculative-config: num_speculative_tokens must be an integer >= 1, got {k!r}"
        )
    sample = raw.get("rejection_sample_method", "standard")
    if sample == "standard":
        if "synthetic_acceptance_length" in raw or "synthetic_acceptance_rates" in raw:
            raise ConfigError(
                "--speculative-config: synthetic_acceptance_* needs "
                '"rejection_sample_method": "synthetic" (as in vLLM)'
            )
        return Speculative(method, k, sample, ())
    if sample != "synthetic":
        raise ConfigError(
            f"--speculative-config: rejection_sample_method {sample!r} "
            "is not modelled; use standard or synthetic"
        )
    rates = _synthetic_rates(raw, k)
    return Speculative(method, k, sample, conditional_rates(rates))


def _synthetic_rates(raw: dict[str, Any], k: int) -> list[float]:
    """vLLM's resolution: exactly one of rates (length K, in [0, 1], non-increasing) or a
    length in [1, K+1]."""
    rates, length = raw.get("synthetic_acceptance_rates"), raw.get("synthetic_acceptance_length")
    if (rates is None) == (length is None):
        raise ConfigError(
            '--speculative-config: "synthetic" needs exactly one of '
            "synthetic_acceptance_rates or synthetic_acceptance_length"
        )
    if rates is not None:
        if not isinstance(rates, list) or not all(_number(r) for r in rates):
            raise ConfigError(
                "--speculative-config: synthetic_acceptance_rates must be a list of numbers"
            )
        if len(rates) != k:
            raise ConfigError(
                f"--speculative-config: synthetic_acceptance_rates must "
                f"have {k} entries (num_speculative_tokens), got {rates}"
            )
        if not all(0.0 <= r <= 1.0 for r in rates):
            raise ConfigError(
                "--speculative-config: synthetic_acceptance_rates "
                f"entries must be in [0, 1], got {rates}"
            )
        if any(rates[i] > rates[i - 1] for i in range(1, k)):
            raise ConfigError(
                "--speculative-config: synthetic_acceptance_rates must "
                f"be non-increasing (they are unconditional), got {rates}"
            )
        return [float(r) for r in rates]
    if not isinstance(length, (int, float)) or not _number(length) or not 1.0 <= length <= k + 1:
        raise ConfigError(
            "--speculative-config: synthetic_acceptance_length must be "
            f"in [1, {k + 1}], got {length!r}"
        )
    return acceptance_length_to_rates(float(length), k)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
