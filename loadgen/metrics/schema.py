"""The one typed result of a concurrency point: what `conc_<N>.json` holds.

`summarize` (metrics/summary.py) produces the `PointMetrics` part from the records; the
runner adds the `PointResult` fields it alone knows (client health, run identity and
settings). Every sink (result files, console table, CSV, plot, Prometheus, the sidecar)
reads this one shape, and docs/results.md documents each key (a test holds the two
together). Keys keep vLLM `bench serve` / InferenceX spelling, so they are not all
identifiers (`p99.9_ttft_ms`): hence the functional TypedDict syntax.

Percentiles beyond the default set (`--percentiles 75`) add keys of the same pattern
(`p75_ttft_ms`, ...) which a static schema cannot name in advance: they are present at
run time and documented as a pattern.
"""

from __future__ import annotations

from typing import Any, TypedDict

PointMetrics = TypedDict(
    "PointMetrics",
    {
        "num_prompts": int,
        "max_concurrency": int,
        "completed": int,
        "failed": int,
        "cancelled": int,
        "num_gpus": int | None,
        "spec_tokens": int | None,
        "benchmark_start_time_unix": float | None,
        "duration": float | None,
        "total_input_tokens": int,
        "total_output_tokens": int,
        "request_throughput": float | None,
        "output_throughput": float | None,
        "input_throughput": float | None,
        "total_token_throughput": float | None,
        "output_throughput_per_gpu": float | None,
        "total_token_throughput_per_gpu": float | None,
        "max_concurrent_requests": int,
        "max_output_tokens_per_s": float | None,
        "steady_window_start_s": float | None,
        "steady_window_duration": float | None,
        "steady_request_throughput": float | None,
        "steady_output_throughput": float | None,
        "steady_input_throughput": float | None,
        "steady_total_token_throughput": float | None,
        "steady_output_throughput_per_gpu": float | None,
        "steady_total_token_throughput_per_gpu": float | None,
        "total_chunks": int,
        "chunk_gaps_read_together": int,
        "tpot_excluded_single_token": int,
        "mean_ttft_ms": float | None,
        "median_ttft_ms": float | None,
        "std_ttft_ms": float | None,
        "p50_ttft_ms": float | None,
        "p90_ttft_ms": float | None,
        "p99_ttft_ms": float | None,
        "p99.9_ttft_ms": float | None,
        "mean_tpot_ms": float | None,
        "median_tpot_ms": float | None,
        "std_tpot_ms": float | None,
        "p50_tpot_ms": float | None,
        "p90_tpot_ms": float | None,
        "p99_tpot_ms": float | None,
        "p99.9_tpot_ms": float | None,
        "mean_itl_ms": float | None,
        "median_itl_ms": float | None,
        "std_itl_ms": float | None,
        "p50_itl_ms": float | None,
        "p90_itl_ms": float | None,
        "p99_itl_ms": float | None,
        "p99.9_itl_ms": float | None,
        "mean_e2el_ms": float | None,
        "median_e2el_ms": float | None,
        "std_e2el_ms": float | None,
        "p50_e2el_ms": float | None,
        "p90_e2el_ms": float | None,
        "p99_e2el_ms": float | None,
        "p99.9_e2el_ms": float | None,
        "mean_itl_per_token_ms": float | None,
        "median_itl_per_token_ms": float | None,
        "std_itl_per_token_ms": float | None,
        "p50_itl_per_token_ms": float | None,
        "p90_itl_per_token_ms": float | None,
        "p99_itl_per_token_ms": float | None,
        "p99.9_itl_per_token_ms": float | None,
        "mean_queue_time_ms": float | None,
        "median_queue_time_ms": float | None,
        "std_queue_time_ms": float | None,
        "p50_queue_time_ms": float | None,
        "p90_queue_time_ms": float | None,
        "p99_queue_time_ms": float | None,
        "p99.9_queue_time_ms": float | None,
        "mean_connect_time_ms": float | None,
        "median_connect_time_ms": float | None,
        "std_connect_time_ms": float | None,
        "p50_connect_time_ms": float | None,
        "p90_connect_time_ms": float | None,
        "p99_connect_time_ms": float | None,
        "p99.9_connect_time_ms": float | None,
        "mean_interactivity_tok_s_user": float | None,
        "median_interactivity_tok_s_user": float | None,
        "std_interactivity_tok_s_user": float | None,
        "p50_interactivity_tok_s_user": float | None,
        "p90_interactivity_tok_s_user": float | None,
        "p99_interactivity_tok_s_user": float | None,
        "p99.9_interactivity_tok_s_user": float | None,
        "max_connect_time_ms": float | None,
        "new_connections": int,
        "request_goodput": float | None,
        "good_requests": int | None,
        "goodput_slos_ms": dict[str, float] | None,
        "errors_by_kind": dict[str, int],
        "error_rate": float,
        "stray_bytes_after_response": int,
        "stray_bytes_before_request": int,
        "prompt_tokens_mismatches": int,
        "prompt_tokens_max_abs_diff": int,
        "prompt_tokens_unreported": int,
        "completion_tokens_vs_max_tokens_mismatches": int,
        "completion_tokens_vs_max_tokens_max_abs_diff": int,
        "chunk_tokens_vs_usage_mismatches": int,
        "chunk_tokens_vs_usage_max_abs_diff": int,
        "completion_tokens_unreported": int,
        "token_count_source": str | None,
        "token_count_sources": dict[str, int],
        "approximate": bool,
        "arrival_stamps": str | None,
        "arrival_stamp_sources": dict[str, int],
        "stream_acceptance_length": float | None,
        "stream_acceptance_rate": float | None,
        "stream_acceptance_per_position": list[float] | None,
        "stream_acceptance_decode_chunks": int | None,
        "stream_acceptance_oversized_chunks": int | None,
        "server_acceptance_length": float | None,
        "server_acceptance_rate": float | None,
        "server_acceptance_per_position": list[float] | None,
        "server_spec_tokens": int | None,
        "server_spec_decode_drafts": int | None,
        "server_spec_decode_draft_tokens": int | None,
        "server_spec_decode_accepted_tokens": int | None,
        "server_mean_ttft_ms": float | None,
        "server_mean_e2el_ms": float | None,
        "server_mean_itl_ms": float | None,
        "server_mean_queue_time_ms": float | None,
        "server_requests": float | None,
        "acceptance_length_diff": float | None,
        "acceptance_rate_diff": float | None,
        "acceptance_per_position_diff": list[float] | None,
        "input_lens": list[int],
        "output_lens": list[int],
        "ttfts": list[float | None],
        "errors": list[str],
    },
)


class SessionFields(TypedDict, total=False):
    """Session runs only (--turns, multi-turn datasets, trace replay): docs/results.md,
    "Sessions and prefix caching". Optional keys: a single-turn point has none of them."""

    session_history: str
    prompt_tokens_sent: int
    theoretical_cached_tokens: int | None
    theoretical_prefix_hit_rate: float | None
    server_prefix_cache_queries: int | None
    server_prefix_cache_hits: int | None
    server_prefix_hit_rate: float | None
    client_cached_tokens: int | None
    client_cached_requests: int
    client_prefix_hit_rate: float | None
    prefix_hit_rate_diff: float | None
    session_ttft_ms: dict[str, float | None]
    session_e2el_ms: dict[str, float | None]
    session_itl_ms: dict[str, float | None]
    session_interactivity_tok_s_user: dict[str, float | None]
    session_e2e_interactivity_tok_s_user: dict[str, float | None]
    ttft_by_context: list[dict[str, Any]]
    session_ids: int
    session_trees: int
    subagent_session_ids: int
    replay_trees_started: int
    replay_trees_completed: int
    replay_sessions_started: int
    replay_subagents_started: int
    replay_max_live_trees: int
    replay_gaps_capped_tree: int
    replay_gaps_cut_system: int
    replay_primers: int
    replay_primers_failed: int
    replay_sessions_cut: int
    replay_turns_skipped: int


class PointResult(PointMetrics, SessionFields):
    """A point's metrics plus what only the runner knows (docs/results.md, last sections)."""

    client_cpu_seconds: float
    client_cpu_per_chunk_us: float | None
    client_loop_lag_p99_ms: float | None
    client_loop_lag_max_ms: float | None
    client_loop_lag_samples: int
    client_processes: list[dict[str, Any]]
    clock_alignment_uncertainty_ms: float | None
    complete: bool
    incomplete_reason: str | None
    shard: str | None
    shards_merged: int
    stop_reason: str | None
    stop_detail: str | None
    target: str
    run_id: str
    model_id: str | None
    endpoint_type: str
    endpoint: str
    base_url: str
    backend: str
    http_client: str
    input_len: int | None
    output_len: int | None
    range_ratio: float
    request_rate: float | str
    burstiness: float
    planned_requests: int
    warmup_requests: int
    warmup_failed: int
    loadgen_version: str
    tokenizer_check: dict[str, Any] | None
    prompt_synthesis: str
    prompt_synthesis_note: str | None
    input_len_approximate: bool | None
    input_len_mismatches: int | None
    input_len_max_abs_diff: int | None
    server_metrics_by_url: list[dict[str, Any]] | None
