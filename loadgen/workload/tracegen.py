"""Synthetic agentic traces in the Weka/AgentX schema, for benchmarks and tests (pure).

Shaped like Claude-Code sessions: a shared system+tools prefix, context that grows by the
previous reply plus a tool result every request, short outputs, think times of seconds,
and now and then a fan-out of subagents (their own smaller contexts, sharing the
system-prompt blocks) that the parent waits for. Hash ids follow the trace convention:
one id per `block_size` tokens; a request's full blocks keep their ids in the next
request, its partial last block becomes a new full block with a new id.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class TraceShape:
    requests: tuple[int, int] = (8, 40)  # requests per root session (uniform)
    system_tokens: int = 12_000  # shared prefix (system prompt and tool definitions)
    first_user_tokens: tuple[int, int] = (200, 2_000)
    tool_result_tokens: tuple[int, int] = (100, 4_000)  # new input per later request
    output_tokens: tuple[int, int] = (20, 600)
    think_time_s: float = 2.0  # mean (exponential)
    api_time_s: float = 5.0  # recorded server time per request (mean, exponential)
    max_context: int = 128_000
    subagent_prob: float = 0.15  # chance that a request spawns subagents
    fanout: tuple[int, int] = (1, 4)
    subagent_requests: tuple[int, int] = (2, 8)
    max_depth: int = 1
    block_size: int = 64


class _Ids:
    def __init__(self) -> None:
        self._next = itertools.count(1)

    def take(self, count: int) -> list[int]:
        return [next(self._next) for _ in range(count)]


def generate_traces(
    count: int, seed: int, shape: TraceShape = TraceShape()
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    traces = []
    for number in range(count):
        ids = _Ids()
        system = ids.take(-(-shape.system_tokens // shape.block_size))
        requests = _session(rng, ids, system, shape, depth=0, start_t=0.0)
        traces.append(
            {
                "id": f"synthetic-{seed}-{number:04d}",
                "block_size": shape.block_size,
                "requests": requests,
            }
        )
    return traces


def _uniform(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


def _session(
    rng: np.random.Generator,
    ids: _Ids,
    system: list[int],
    shape: TraceShape,
    depth: int,
    start_t: float,
) -> list[dict[str, Any]]:
    size = shape.block_size
    bounds = shape.requests if depth == 0 else shape.subagent_requests
    context = shape.system_tokens + _uniform(rng, shape.first_user_tokens)
    full = list(system[: shape.system_tokens // size])  # full blocks shared with the system
    requests: list[dict[str, Any]] = []
    t = start_t
    for number in range(_uniform(rng, bounds)):
        if context + shape.output_tokens[1] > shape.max_context:
            break
        blocks = -(-context // size)
        hash_ids = full + ids.take(blocks - len(full))
        out = _uniform(rng, shape.output_tokens)
        think = float(rng.exponential(shape.think_time_s)) if number else 0.0
        api = float(rng.exponential(shape.api_time_s))
        t += think
        requests.append(
            {
                "t": round(t, 3),
                "type": "s",
                "in": context,
                "out": out,
                "hash_ids": hash_ids,
                "think_time": round(think, 3),
                "api_time": round(api, 3),
            }
        )
        t += api
        if depth < shape.max_depth and rng.random() < shape.subagent_prob:
            for _ in range(_uniform(rng, shape.fanout)):
                child = _session(rng, ids, system, shape, depth + 1, t)
                if child:
                    requests.append({"type": "subagent", "t": round(t, 3), "requests": child})
        full = hash_ids[: context // size]
        context += out + _uniform(rng, shape.tool_result_tokens)
    return requests
