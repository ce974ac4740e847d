"""The simulator's power model, and its dcgm-exporter-format rendering (/gpu/metrics).

Every simulated GPU draws `idle_watts` all the time, plus a fixed energy per token the
engine computes: `joules_per_token` per decode token (1 per decoding request, or K+1 with
MTP: drafts verified are computed whether accepted or not) and `joules_per_prefill_token`
per prompt token prefilled. The token energy of a step is spread evenly over the step's
modelled duration, so power is piecewise constant and energy is its exact integral: the
energy counter is the ground truth a client's sampled integral is checked against.
These parameters describe the simulator, not any hardware.

Exposed as NVIDIA dcgm-exporter does (its default counters): `DCGM_FI_DEV_POWER_USAGE`
(gauge, W) and `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (counter, mJ, no `_total` suffix),
one series per GPU labelled gpu, UUID, pci_bus_id, device, modelName, Hostname.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

NS_PER_S = 1_000_000_000
MODEL_NAME = "loadgen-sim simulated GPU"


@dataclass(frozen=True, slots=True)
class PowerConfig:
    num_gpus: int = 1
    idle_watts: float = 150.0
    joules_per_token: float = 0.03  # per decode token computed, per GPU
    joules_per_prefill_token: float = 0.005  # per prompt token prefilled, per GPU
    hostname: str = "loadgen-sim"
    # Keep every step, so energy_j(t) holds for any past t too (tests' ground truth over
    # a client's window); off in `loadgen sim`, whose memory must not grow per step.
    keep_history: bool = False

    def describe(self) -> str:
        return (f"power model (simulated, not hardware): {self.num_gpus} GPU(s), each "
                f"{self.idle_watts:g} W idle + {self.joules_per_token:g} J per decode token "
                f"computed (MTP drafts included) + {self.joules_per_prefill_token:g} J per "
                "prefill token")


class PowerModel:
    """Per-GPU energy since `clock()` at construction; every GPU draws the same."""

    def __init__(self, config: PowerConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock
        self.start_ns = clock()
        self._finished_j = 0.0  # token energy of steps before the current one
        self._step = (self.start_ns, self.start_ns, 0.0)  # (start, end, token joules)
        self._history: list[tuple[int, int, float]] | None = [] if config.keep_history else None

    def step(self, start_ns: int, end_ns: int, prefill_tokens: int,
             decode_tokens: int) -> None:
        """A step computing these tokens runs from start_ns to end_ns (steps never overlap)."""
        self._finished_j += self._step[2]
        c = self.config
        joules = decode_tokens * c.joules_per_token + prefill_tokens * c.joules_per_prefill_token
        self._step = (start_ns, end_ns, joules)
        if self._history is not None:
            self._history.append(self._step)

    def _step_share(self, now_ns: int, step: tuple[int, int, float] | None = None) -> float:
        start, end, joules = self._step if step is None else step
        if now_ns >= end:
            return joules
        if now_ns <= start:
            return 0.0
        return joules * (now_ns - start) / (end - start)

    def energy_j(self, now_ns: int | None = None) -> float:
        """One GPU's energy from the start to `now_ns` (the exact integral of its power)."""
        now = self.clock() if now_ns is None else now_ns
        idle = self.config.idle_watts * (now - self.start_ns) / NS_PER_S
        if self._history is not None and now < self._step[0]:  # a past instant
            return idle + sum(self._step_share(now, step) for step in self._history)
        return idle + self._finished_j + self._step_share(now)

    def max_power_w(self, start_ns: int, end_ns: int) -> float:
        """The highest power of any step overlapping [start_ns, end_ns] (keep_history)."""
        assert self._history is not None, "PowerConfig(keep_history=True)"
        return self.config.idle_watts + max(
            (j * NS_PER_S / (e - s) for s, e, j in self._history
             if e > s and e > start_ns and s < end_ns), default=0.0)

    def power_w(self, now_ns: int | None = None) -> float:
        """One GPU's power at `now_ns`."""
        now = self.clock() if now_ns is None else now_ns
        start, end, joules = self._step
        dynamic = joules * NS_PER_S / (end - start) if start <= now < end else 0.0
        return self.config.idle_watts + dynamic

    def render(self) -> str:
        """Prometheus text as dcgm-exporter writes it (values at one instant)."""
        now = self.clock()
        power, energy_mj = self.power_w(now), int(self.energy_j(now) * 1000)
        lines = ["# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
                 "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
        lines += [f"DCGM_FI_DEV_POWER_USAGE{{{self._labels(i)}}} {power:.3f}"
                  for i in range(self.config.num_gpus)]
        lines += ["# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption "
                  "since boot (in mJ).", "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"]
        lines += [f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{self._labels(i)}}} {energy_mj}"
                  for i in range(self.config.num_gpus)]
        return "\n".join(lines) + "\n"

    def _labels(self, index: int) -> str:
        host = self.config.hostname
        gpu_uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}/{index}"))
        return (f'gpu="{index}",UUID="{gpu_uuid}",pci_bus_id="00000000:{index + 1:02X}:00.0",'
                f'device="nvidia{index}",modelName="{MODEL_NAME}",Hostname="{host}"')
