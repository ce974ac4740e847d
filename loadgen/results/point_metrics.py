"""The metric fields of one concurrency point, as `summarize` computes them from records.

A frozen msgspec Struct: every field typed and required, so a producer that forgets one
fails where it builds the object, not in a reader weeks later. Field names are Python
identifiers; the file spelling is vLLM `bench serve` / InferenceX's (`p99.9_ttft_ms`),
produced by `vllm_spelling` only where the Struct meets a file (results/point.py).

Percentiles beyond the default set (`--percentiles 75`) have keys a static schema cannot
name in advance (`p75_ttft_ms`, ...): they live in `extra_percentiles` and are written
flat beside the rest.
"""

from __future__ import annotations

import re

import msgspec

_DECIMAL_PERCENTILE = re.compile(r"^p(\d+)_(\d+)_")
EXTRA_PERCENTILE_KEY = re.compile(r"^p\d+(?:\.\d+)?_[a-z][a-z0-9_]*$")


def vllm_spelling(name: str) -> str | None:
    """`p99_9_ttft_ms` -> `p99.9_ttft_ms` (vLLM's key); None keeps the name as it is."""
    match = _DECIMAL_PERCENTILE.match(name)
    if match is None:
        return None
    return f"p{match[1]}.{match[2]}_{name[match.end() :]}"


class EarlyStop(msgspec.Struct, frozen=True, kw_only=True):
    """MLPerf LoadGen's early-stopping figures of one published latency percentile
    (metrics/early_stopping.py; docs/results.md, "Early stopping")."""

    samples: int
    bound_ms: float | None  # None: no samples
    bound_source: str  # "slo" (--slo) or "percentile" (the published value itself)
    over: int | None  # samples strictly over the bound
    required_samples: int | None  # h(over) + over at confidence 0.99
    enough: bool | None  # samples >= required_samples
    estimate_ms: float | None  # LoadGen's early-stopping estimate; None: too few samples
    min_samples_for_estimate: int  # h(1) + 1: 662 for p99


class PointMetrics(msgspec.Struct, frozen=True, kw_only=True, rename=vllm_spelling):
    """docs/results.md documents every field (a test holds the two together)."""

    num_prompts: int
    max_concurrency: int
    completed: int
    failed: int
    cancelled: int
    num_gpus: int | None
    spec_tokens: int | None
    benchmark_start_time_unix: float | None
    duration: float | None
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float | None
    output_throughput: float | None
    input_throughput: float | None
    total_token_throughput: float | None
    output_throughput_per_gpu: float | None
    total_token_throughput_per_gpu: float | None
    max_concurrent_requests: int
    max_output_tokens_per_s: float | None
    steady_window_start_s: float | None
    steady_window_duration: float | None
    steady_request_throughput: float | None
    steady_output_throughput: float | None
    steady_input_throughput: float | None
    steady_total_token_throughput: float | None
    steady_output_throughput_per_gpu: float | None
    steady_total_token_throughput_per_gpu: float | None
    total_chunks: int
    chunk_gaps_read_together: int
    tpot_excluded_single_token: int
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    std_ttft_ms: float | None
    p90_ttft_ms: float | None
    p99_ttft_ms: float | None
    p99_9_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    std_tpot_ms: float | None
    p90_tpot_ms: float | None
    p99_tpot_ms: float | None
    p99_9_tpot_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    std_itl_ms: float | None
    p90_itl_ms: float | None
    p99_itl_ms: float | None
    p99_9_itl_ms: float | None
    mean_e2el_ms: float | None
    median_e2el_ms: float | None
    std_e2el_ms: float | None
    p90_e2el_ms: float | None
    p99_e2el_ms: float | None
    p99_9_e2el_ms: float | None
    mean_itl_per_token_ms: float | None
    median_itl_per_token_ms: float | None
    std_itl_per_token_ms: float | None
    p90_itl_per_token_ms: float | None
    p99_itl_per_token_ms: float | None
    p99_9_itl_per_token_ms: float | None
    mean_queue_time_ms: float | None
    median_queue_time_ms: float | None
    std_queue_time_ms: float | None
    p90_queue_time_ms: float | None
    p99_queue_time_ms: float | None
    p99_9_queue_time_ms: float | None
    mean_connect_time_ms: float | None
    median_connect_time_ms: float | None
    std_connect_time_ms: float | None
    p90_connect_time_ms: float | None
    p99_connect_time_ms: float | None
    p99_9_connect_time_ms: float | None
    mean_ttft_from_schedule_ms: float | None
    median_ttft_from_schedule_ms: float | None
    std_ttft_from_schedule_ms: float | None
    p90_ttft_from_schedule_ms: float | None
    p99_ttft_from_schedule_ms: float | None
    p99_9_ttft_from_schedule_ms: float | None
    mean_e2el_from_schedule_ms: float | None
    median_e2el_from_schedule_ms: float | None
    std_e2el_from_schedule_ms: float | None
    p90_e2el_from_schedule_ms: float | None
    p99_e2el_from_schedule_ms: float | None
    p99_9_e2el_from_schedule_ms: float | None
    mean_interactivity_tok_s_user: float | None
    median_interactivity_tok_s_user: float | None
    std_interactivity_tok_s_user: float | None
    p90_interactivity_tok_s_user: float | None
    p99_interactivity_tok_s_user: float | None
    p99_9_interactivity_tok_s_user: float | None
    # InferenceX AgentX's E2E normalized interactivity (metrics/e2e_norm.py), tok/s/user;
    # the defaults read files of an older loadgen
    mean_e2e_norm_intvty: float | None = None
    p50_e2e_norm_intvty: float | None = None
    p75_e2e_norm_intvty: float | None = None
    p90_e2e_norm_intvty: float | None = None
    p95_e2e_norm_intvty: float | None = None
    p99_e2e_norm_intvty: float | None = None
    std_e2e_norm_intvty: float | None = None
    max_connect_time_ms: float | None
    new_connections: int
    request_goodput: float | None
    good_requests: int | None
    goodput_slos_ms: dict[str, float] | None
    request_goodput_from_schedule: float | None
    good_requests_from_schedule: int | None
    errors_by_kind: dict[str, int]
    error_rate: float | None
    stray_bytes_after_response: int
    stray_bytes_before_request: int
    stray_bytes_later: int = 0
    prompt_tokens_mismatches: int
    prompt_tokens_max_abs_diff: int
    prompt_tokens_unreported: int
    completion_tokens_vs_max_tokens_mismatches: int
    completion_tokens_vs_max_tokens_max_abs_diff: int
    chunk_tokens_vs_usage_mismatches: int
    chunk_tokens_vs_usage_max_abs_diff: int
    completion_tokens_unreported: int
    token_count_source: str | None
    token_count_sources: dict[str, int]
    approximate: bool
    arrival_stamps: str | None
    arrival_stamp_sources: dict[str, int]
    stream_acceptance_length: float | None
    stream_acceptance_rate: float | None
    stream_acceptance_per_position: list[float] | None
    stream_acceptance_decode_chunks: int | None
    stream_acceptance_oversized_chunks: int | None
    stream_acceptance_invalid_reason: str | None
    server_acceptance_length: float | None
    server_acceptance_rate: float | None
    server_acceptance_per_position: list[float] | None
    server_spec_tokens: int | None
    server_spec_decode_drafts: int | None
    server_spec_decode_draft_tokens: int | None
    server_spec_decode_accepted_tokens: int | None
    # why the server_acceptance_* figures (or only server_spec_tokens) are null though the
    # counters moved (metrics/acceptance.py); the default reads files of an older loadgen
    server_acceptance_invalid_reason: str | None = None
    server_mean_ttft_ms: float | None
    server_mean_e2el_ms: float | None
    server_mean_itl_ms: float | None
    server_mean_queue_time_ms: float | None
    server_requests: float | None
    # which server_mean_* are null because they exceed the client's largest of the same
    # quantity (metrics/latency_bounds.py); the same for the frontend's below
    server_latency_invalid_reason: str | None = None
    # a Dynamo frontend's own series among --server-metrics (metrics/frontend.py); the
    # defaults read files of an older loadgen
    frontend_mean_ttft_ms: float | None = None
    frontend_mean_itl_per_token_ms: float | None = None
    frontend_mean_e2el_ms: float | None = None
    frontend_requests: int | None = None
    # prefix hits as Dynamo's frontend and KV router see them (metrics/frontend.py)
    router_kv_hit_rate: float | None = None  # mean per routed request, predicted at routing
    router_routed_requests: int | None = None
    frontend_cached_tokens: int | None = None  # the workers' reported cached tokens
    frontend_prefix_hit_rate: float | None = None  # of the input tokens
    frontend_prefix_null_reason: str | None = None
    frontend_latency_invalid_reason: str | None = None
    server_request_acceptance_length: float | None
    server_request_acceptance_rate: float | None
    server_request_acceptance_per_position: list[float] | None
    server_request_spec_requests: int | None
    server_request_spec_steps: int | None
    server_request_al_min: float | None
    server_request_al_p10: float | None
    server_request_al_median: float | None
    server_request_al_p90: float | None
    server_request_al_max: float | None
    server_timing_requests: int
    server_timings_exceed_client: int = 0  # left out of the timing figures (request_stats.py)
    mean_server_request_ttft_ms: float | None
    median_server_request_ttft_ms: float | None
    std_server_request_ttft_ms: float | None
    p90_server_request_ttft_ms: float | None
    p99_server_request_ttft_ms: float | None
    p99_9_server_request_ttft_ms: float | None
    mean_server_request_queue_time_ms: float | None
    median_server_request_queue_time_ms: float | None
    std_server_request_queue_time_ms: float | None
    p90_server_request_queue_time_ms: float | None
    p99_server_request_queue_time_ms: float | None
    p99_9_server_request_queue_time_ms: float | None
    mean_ttft_minus_server_ttft_ms: float | None
    median_ttft_minus_server_ttft_ms: float | None
    std_ttft_minus_server_ttft_ms: float | None
    p90_ttft_minus_server_ttft_ms: float | None
    p99_ttft_minus_server_ttft_ms: float | None
    p99_9_ttft_minus_server_ttft_ms: float | None
    mean_ttft_outside_server_ms: float | None
    median_ttft_outside_server_ms: float | None
    std_ttft_outside_server_ms: float | None
    p90_ttft_outside_server_ms: float | None
    p99_ttft_outside_server_ms: float | None
    p99_9_ttft_outside_server_ms: float | None
    acceptance_length_diff: float | None
    acceptance_rate_diff: float | None
    acceptance_per_position_diff: list[float] | None
    acceptance_length: float | None
    acceptance_length_source: str | None
    itl_chunks_merged_steps: bool | None
    golden_acceptance_curve: str | None = None  # `<model>/<thinking_on|off> in <file>`
    golden_acceptance_length: float | None
    golden_acceptance_drift: float | None
    golden_acceptance_ok: bool | None
    golden_acceptance_tolerance: float | None
    golden_acceptance_note: str | None
    # engine steps reconstructed from the arrivals (metrics/steps.py); None with steps_note
    # saying why; defaults so point files from before them still read
    steps_observed: int | None = None
    steps_engines: int | None = None
    steps_stream_interval: int | None = None
    steps_boundary_us: float | None = None
    steps_time_p50_ms: float | None = None
    steps_time_p90_ms: float | None = None
    steps_time_p99_ms: float | None = None
    steps_decode_time_p50_ms: float | None = None
    steps_decode_time_p90_ms: float | None = None
    steps_decode_time_p99_ms: float | None = None
    steps_prefill_time_p50_ms: float | None = None
    steps_prefill_time_p90_ms: float | None = None
    steps_prefill_time_p99_ms: float | None = None
    steps_prefill_share: float | None = None
    steps_requests_per_step: float | None = None
    steps_tokens_per_request_step: float | None = None
    steps_stall_share: float | None = None
    steps_stamps: str | None = None
    steps_note: str | None = None
    # Thinking phases (metrics/phases.py): reasoning and answer apart; the defaults read
    # point files from before them
    mean_ttfa_ms: float | None = None
    median_ttfa_ms: float | None = None
    std_ttfa_ms: float | None = None
    p90_ttfa_ms: float | None = None
    p99_ttfa_ms: float | None = None
    p99_9_ttfa_ms: float | None = None
    mean_think_ms: float | None = None
    median_think_ms: float | None = None
    std_think_ms: float | None = None
    p90_think_ms: float | None = None
    p99_think_ms: float | None = None
    p99_9_think_ms: float | None = None
    mean_ttfr_ms: float | None = None
    mean_reasoning_tpot_ms: float | None = None
    mean_answer_tpot_ms: float | None = None
    mean_reasoning_itl_ms: float | None = None
    mean_answer_itl_ms: float | None = None
    total_reasoning_tokens: int | None = None
    total_answer_tokens: int | None = None
    reasoning_share: float | None = None
    reasoning_acceptance_length: float | None = None
    answer_acceptance_length: float | None = None
    phase_methods: dict[str, int] | None = None
    phase_separated_requests: int = 0
    phase_unseparated_requests: int = 0
    reasoning_only_requests: int = 0
    phase_anomalies: dict[str, int] | None = None
    input_lens: list[int]
    output_lens: list[int]
    ttfts: list[float | None]
    ttfas: list[float | None] = []
    errors: list[str]
    # MLPerf early stopping per published TTFT/TPOT/E2EL percentile (`p99_ttft_ms` -> its
    # figures); the default reads files of an older loadgen
    early_stopping: dict[str, EarlyStop] = {}
    # `--percentiles X` beyond the default set: `p<X>_<metric>_<unit>` -> value
    extra_percentiles: dict[str, float | None] = {}
