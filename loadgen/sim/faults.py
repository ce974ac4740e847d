"""Which requests get which fault: drawn from (server seed, request index), so reproducible.

Mid-stream faults are placed at a token position: the fault fires on the first chunk that
reaches it. A request that produces a single token has no "mid-stream" and gets none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.sim.config import FaultConfig

# Mixed into the seed so fault draws never correlate with token draws.
FAULT_STREAM = 0xFA17


@dataclass(frozen=True, slots=True)
class RequestFaults:
    error_500: bool = False
    abort_at_token: int | None = None
    malformed_at_token: int | None = None
    stall_at_token: int | None = None


NO_FAULTS = RequestFaults()


def draw_faults(
    config: FaultConfig, seed: int, index: int, num_tokens: int, stream: bool
) -> RequestFaults:
    """Faults for request `index` that will produce `num_tokens` tokens."""
    if config.error_500 <= 0 and not config.any_mid_stream():
        return NO_FAULTS
    rng = np.random.default_rng([seed, index, FAULT_STREAM])
    u = rng.random(4)
    positions = rng.integers(1, max(num_tokens, 2), size=3).tolist()
    mid_ok = stream and num_tokens > 1

    def at(fraction: float, draw: float, position: int) -> int | None:
        return position if mid_ok and draw < fraction else None

    return RequestFaults(
        error_500=bool(u[0] < config.error_500),
        abort_at_token=at(config.abort, u[1], positions[0]),
        malformed_at_token=at(config.malformed, u[2], positions[1]),
        stall_at_token=at(config.stall, u[3], positions[2]),
    )
