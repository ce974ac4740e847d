"""The session figures a split of one session run (--workers, --shard, a coordinator)
must give exactly as one process does."""

from __future__ import annotations

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
