"""The session figures a split of one session run (--workers, --shard, a coordinator)
must give exactly as one process does."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.workload.tracegen import TraceShape, generate_traces

SAME = (
    "completed",
    "failed",
    "planned_requests",
    "session_ids",
    "session_trees",
    "subagent_session_ids",
    "prompt_tokens_sent",
    "theoretical_cached_tokens",
    "theoretical_prefix_hit_rate",
    "server_prefix_cache_queries",
    "server_prefix_cache_hits",
    "server_prefix_hit_rate",
    "client_cached_tokens",
    "replay_primers",
    "replay_trees_started",
    "replay_trees_completed",
    "replay_sessions_started",
    "replay_subagents_started",
)


def generated_trace(path: Path) -> Path:
    """A seeded generated trace (9 trees of 4 sessions, subagents, fan-outs) written to
    `path`: the session run those splits are held to."""
    shape = TraceShape(
        requests=(3, 7),
        system_tokens=600,
        first_user_tokens=(30, 200),
        tool_result_tokens=(10, 250),
        output_tokens=(3, 10),
        think_time_s=0.01,
        api_time_s=0.02,
        subagent_prob=0.4,
        fanout=(1, 2),
        subagent_requests=(1, 3),
    )
    path.write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in generate_traces(9, 4, shape)))
    return path
