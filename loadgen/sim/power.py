"""The simulator's power model, and its dcgm-exporter-format rendering (/gpu/metrics).

Every simulated GPU draws `idle_watts` all the time, plus a fixed energy per token the
engine computes: `joules_per_token` per decode token (1 per decoding request, or K+1 with
MTP: drafts verified are computed whether accepted or not) and `joules_per_prefill_token`
per prompt token prefilled. The token energy of a step is spread evenly over the step's
modelled duration, so power is piecewise constant and energy is its exact integral: the
energy counter is the ground truth a client's sampled integral is checked against. The
power gauge is the mean over the last `average_s` (1 s, as NVML averages board power):
an instant's power is one step's, which a scrape that lands between steps would miss.
Energy follows the engine's modelled timeline: when the simulator falls behind it (it
warns "behind its step schedule"), late steps are dated in the past, so readings taken
meanwhile under-read the gauge; the counter's delta between two idle-or-caught-up
instants (a point's first and last samples) stays exact.
These parameters describe the simulator, not any hardware.

Exposed as NVIDIA dcgm-exporter does (its default counters): `DCGM_FI_DEV_POWER_USAGE`
(gauge, W) and `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (counter, mJ, no `_total` suffix),
one series per GPU labelled gpu, UUID, pci_bus_id, device, modelName, Hostname. Each
simulator's GPUs have UUIDs of their own (random per process, as real GPUs differ), so
two simulators standing for two nodes are two sets of GPUs to a client that identifies
GPUs by UUID.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Callable
from dataclasses import dataclass

NS_PER_S = 1_000_000_000
MODEL_NAME = "loadgen-sim simulated GPU"
PRUNE_AT = 4096  # marks kept before old ones are dropped (without keep_history)


@dataclass(frozen=True, slots=True)
class PowerConfig:
    num_gpus: int = 1
    idle_watts: float = 150.0
    joules_per_token: float = 0.03  # per decode token computed, per GPU
    joules_per_prefill_token: float = 0.005  # per prompt token prefilled, per GPU
    hostname: str = "loadgen-sim"
    # DCGM_FI_DEV_POWER_USAGE is the mean over this many seconds before the scrape, as NVML
    # averages board power over 1 s; 0 = the power of the instant (one step's, noisy).
    average_s: float = 1.0
    # Keep every step, so energy_j(t) holds for any past t too (tests' ground truth over
    # a client's window); off in `loadgen sim`, whose memory must not grow per step.
    keep_history: bool = False

    def describe(self) -> str:
        return (
            f"power model (simulated, not hardware): {self.num_gpus} GPU(s), each "
            f"{self.idle_watts:g} W idle + {self.joules_per_token:g} J per decode token "
            f"computed (MTP drafts included) + {self.joules_per_prefill_token:g} J per "
            f"prefill token; power reported as the mean over the last {self.average_s:g} s"
        )


class PowerModel:
    """Per-GPU energy since `clock()` at construction; every GPU draws the same.

    Marks are (step start, energy at it, step end, the step's token joules), oldest first:
    energy at any instant since the oldest mark is exact from the mark before it.
    """

    def __init__(self, config: PowerConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock
        self.start_ns = clock()
        self._marks: list[tuple[int, float, int, float]] = [
            (self.start_ns, 0.0, self.start_ns, 0.0)
        ]
        self._average_ns = int(config.average_s * NS_PER_S)
        # (when, energy) as each scrape reported it: the gauge averages between reported
        # values, so energy a late step dates in the past still reaches a later reading
        self._reads: list[tuple[int, float]] = [(self.start_ns, 0.0)]
        self._board = uuid.uuid4()  # this simulator's GPUs' UUIDs derive from it

    def step(self, start_ns: int, end_ns: int, prefill_tokens: int, decode_tokens: int) -> None:
        """A step computing these tokens runs from start_ns to end_ns (steps never overlap
        and come in order)."""
        c = self.config
        joules = decode_tokens * c.joules_per_token + prefill_tokens * c.joules_per_prefill_token
        self._marks.append((start_ns, self.energy_j(start_ns), end_ns, joules))
        if not c.keep_history and len(self._marks) > PRUNE_AT:
            self._prune(min(start_ns, self.clock()) - self._average_ns - NS_PER_S)

    def _prune(self, horizon_ns: int) -> None:
        """Marks older than what a power average or a scrape can still ask about go."""
        keep = bisect.bisect_right(self._marks, horizon_ns, key=lambda m: m[0]) - 1
        if keep > 0:
            del self._marks[:keep]

    def energy_j(self, now_ns: int | None = None) -> float:
        """One GPU's energy from the start to `now_ns` (the exact integral of its power)."""
        now = self.clock() if now_ns is None else now_ns
        i = max(0, bisect.bisect_right(self._marks, now, key=lambda m: m[0]) - 1)
        start, energy, end, joules = self._marks[i]
        if now >= end:
            share = joules
        elif now <= start:
            share = 0.0
        else:
            share = joules * (now - start) / (end - start)
        return energy + self.config.idle_watts * (now - start) / NS_PER_S + share

    def instant_power_w(self, now_ns: int) -> float:
        start, _, end, joules = self._marks[-1]
        dynamic = joules * NS_PER_S / (end - start) if start <= now_ns < end else 0.0
        return self.config.idle_watts + dynamic

    def power_w(self, now_ns: int | None = None) -> float:
        """One GPU's power at `now_ns`: the mean over the last `average_s` (as NVML averages
        board power over 1 s), or the instant's with average_s 0. The mean is taken from
        the energy an earlier scrape reported (the last one at least `average_s` ago, else
        the start), so the gauge's integral follows the counter even when the engine runs
        behind its schedule and dates late steps in the past."""
        now = self.clock() if now_ns is None else now_ns
        if self._average_ns == 0:
            return self.instant_power_w(now)
        i = bisect.bisect_right(self._reads, now - self._average_ns, key=lambda r: r[0]) - 1
        since, reported = self._reads[max(0, i)]
        if now <= since:
            return self.instant_power_w(now)
        return (self.energy_j(now) - reported) * NS_PER_S / (now - since)

    def read(self, now_ns: int) -> tuple[float, float]:
        """(power W, energy J) as a scrape at `now_ns` reports them, remembered for the
        gauge's later means."""
        power, energy = self.power_w(now_ns), self.energy_j(now_ns)
        if now_ns > self._reads[-1][0]:
            self._reads.append((now_ns, energy))
            horizon = now_ns - 2 * self._average_ns
            keep = bisect.bisect_right(self._reads, horizon, key=lambda r: r[0]) - 1
            if keep > 0:
                del self._reads[:keep]
        return power, energy

    def max_power_w(self, start_ns: int, end_ns: int) -> float:
        """The highest power of any step overlapping [start_ns, end_ns] (keep_history)."""
        assert self.config.keep_history, "PowerConfig(keep_history=True)"
        return self.config.idle_watts + max(
            (
                j * NS_PER_S / (e - s)
                for s, _, e, j in self._marks
                if e > s and e > start_ns and s < end_ns
            ),
            default=0.0,
        )

    def render(self) -> str:
        """Prometheus text as dcgm-exporter writes it (values at one instant)."""
        power, energy_j = self.read(self.clock())
        energy_mj = int(energy_j * 1000)
        lines = [
            "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
            "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
        ]
        lines += [
            f"DCGM_FI_DEV_POWER_USAGE{{{self._labels(i)}}} {power:.3f}"
            for i in range(self.config.num_gpus)
        ]
        lines += [
            "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption "
            "since boot (in mJ).",
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
        ]
        lines += [
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{self._labels(i)}}} {energy_mj}"
            for i in range(self.config.num_gpus)
        ]
        return "\n".join(lines) + "\n"

    def _labels(self, index: int) -> str:
        host = self.config.hostname
        gpu_uuid = "GPU-" + str(uuid.uuid5(self._board, f"{host}/{index}"))
        return (
            f'gpu="{index}",UUID="{gpu_uuid}",pci_bus_id="00000000:{index + 1:02X}:00.0",'
            f'device="nvidia{index}",modelName="{MODEL_NAME}",Hostname="{host}"'
        )
