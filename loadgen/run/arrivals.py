"""Each open-loop point's intended send times, from its own seed: a fixed rate's gamma
arrivals (run/scheduler.py), vLLM's ramp-up or rate stages (workload/ramp.py)."""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.config.spec import RunSpec
from loadgen.run.scheduler import arrival_offsets_ns
from loadgen.workload.plan import RequestSpec, point_rng
from loadgen.workload.ramp import ramp_offsets_ns, ramp_rates, staged_offsets_ns

ARRIVALS = 3  # rng stream id for open-loop arrival times


def point_offsets_ns(spec: RunSpec, conc: int) -> list[int]:
    """Every measured request's intended send time after the point start: a fixed rate's
    gamma arrivals or vLLM's ramp-up (workload/ramp.py), from the point's own seed."""
    count, rng = spec.load.measured_requests(conc), point_rng(spec, conc, ARRIVALS)
    if spec.load.ramp_up_strategy is not None:
        assert spec.load.ramp_up_start_rps is not None and spec.load.ramp_up_end_rps is not None
        rates = ramp_rates(
            count,
            spec.load.ramp_up_strategy,
            spec.load.ramp_up_start_rps,
            spec.load.ramp_up_end_rps,
        )
        return ramp_offsets_ns(rates, spec.load.burstiness, rng)
    if spec.load.rate_stages:
        return staged_offsets_ns(spec.load.rate_stages, spec.load.burstiness, rng, count)
    assert spec.load.request_rate is not None
    return arrival_offsets_ns(count, spec.load.request_rate, spec.load.burstiness, rng)


def offsets_for(requests: Sequence[RequestSpec], offsets: Sequence[int]) -> list[int]:
    """Each request's own arrival offset (requests carry their index in the point)."""
    return [offsets[request.index] for request in requests]
