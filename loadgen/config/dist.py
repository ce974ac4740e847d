"""Seeded distributions given as flag values: `5`, `2..8` (uniform) or `exp:2.5`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from loadgen.config.parsers import SpecError


@dataclass(frozen=True, slots=True)
class Dist:
    """A seeded distribution from a flag: `5`, `2..8` (uniform) or `exp:2.5` (exponential)."""

    kind: Literal["const", "uniform", "exp"]
    low: float
    high: float = 0.0
    integer: bool = True

    def draw(self, rng: np.random.Generator, count: int) -> list[float]:
        if self.kind == "const":
            values = np.full(count, self.low)
        elif self.kind == "uniform":
            if self.integer:
                values = rng.integers(int(self.low), int(self.high) + 1, size=count)
            else:
                values = rng.uniform(self.low, self.high, size=count)
        else:
            values = rng.exponential(self.low, size=count)
        if self.integer:
            return [float(max(0, round(v))) for v in values]
        return [float(max(0.0, v)) for v in values]

    def mean(self) -> float:
        return {"const": self.low, "uniform": (self.low + self.high) / 2, "exp": self.low}[
            self.kind
        ]


def parse_dist(text: str, *, what: str, integer: bool = True) -> Dist:
    """`N`, `A..B` or `exp:MEAN`; SpecError naming the flag otherwise."""
    text = text.strip()
    try:
        if text.startswith("exp:"):
            dist = Dist("exp", float(text[4:]), integer=integer)
        elif ".." in text:
            low, high = text.split("..", 1)
            dist = Dist("uniform", float(low), float(high), integer)
        else:
            dist = Dist("const", float(text), integer=integer)
    except ValueError:
        raise SpecError(f"{what} {text!r}: expected N, A..B (uniform) or exp:MEAN") from None
    if dist.low < 0 or (dist.kind == "uniform" and dist.high < dist.low):
        raise SpecError(f"{what} {text!r}: values must be >= 0 and A <= B")
    return dist
