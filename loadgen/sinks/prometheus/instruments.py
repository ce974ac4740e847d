"""loadgen's live instruments (series, labels, buckets), registered on a registry passed in.

Everything lives on a `CollectorRegistry` passed in (never the global one), so a test,
the CLI and the sidecar each own theirs. The runner calls a `MetricsObserver` (the
`RunObserver` protocol) once per point and once per request; all per-chunk work is
done per finished record with numpy, never per chunk from the transport.

Series and labels (model_name, endpoint, conc = the concurrency point; never per request;
`model_name` is vLLM's name for the served model label, so one selector matches both):
  loadgen_requests_total{outcome="ok"|"error"}, loadgen_request_errors_total{kind}
  loadgen_{prompt,output}_tokens_total, loadgen_decode_{chunks,tokens}_total,
  loadgen_decode_accepted_tokens_per_position_total{position}
  histograms (seconds): loadgen_time_to_first_token_seconds,
  loadgen_inter_chunk_latency_seconds, loadgen_inter_token_latency_seconds,
  loadgen_time_per_output_token_seconds, loadgen_e2e_request_latency_seconds,
  loadgen_queue_time_seconds; loadgen_decode_chunk_tokens (tokens per decode chunk)
  gauges: loadgen_requests_in_flight, loadgen_target_concurrency, loadgen_sweep_points,
  loadgen_sweep_points_completed, loadgen_sweep_progress_ratio, loadgen_point_requests,
  loadgen_{server_spec_decode,stream}_acceptance_{length,rate} (stream: only when its
  chunks are one engine step each), loadgen_acceptance_length{source} (the AL to publish),
  loadgen_server_spec_decode_acceptance_rate_per_position{position}
  loadgen_gpu_power_watts, loadgen_joules_per_output_token (--gpu-metrics, per point)
  loadgen_engine_step_seconds{kind="all"|"decode"|"prefill", percentile="50"|"90"|"99"},
  loadgen_engine_steps,
  loadgen_engines, loadgen_prefill_stall_share (steps reconstructed per point; unset: null)
  loadgen_event_loop_lag_seconds (no labels: the client process itself), loadgen_build_info
  session runs (sessions.py): gauges loadgen_sessions_live, loadgen_session_trees_live;
  loadgen_session_{turns,prompt_tokens,cached_tokens,cache_reported_prompt_tokens,
  theoretical_cached_tokens}_total; loadgen_session_time_to_first_token_seconds{context_bin}
Definitions are the result files' (loadgen.metrics.summary): a request is completed when it ended
without error and carried a token (else it failed, kind `no_tokens` when no error was
set); prompt tokens are loadgen's own input lengths (`total_input_tokens`); latency
histograms and token counters count completed requests only; decode chunks follow
`PointArrays.decode_chunk_mask` (same K), so the counters agree with the result files.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Info

from loadgen import __version__
from loadgen.histogram import BulkHistogram
from loadgen.sinks.prometheus.buckets import (
    CHUNK_TOKEN_BUCKETS,
    E2E_BUCKETS,
    ITL_BUCKETS,
    LOOP_LAG_BUCKETS,
    POINT_LABELS,
    QUEUE_BUCKETS,
    RUN_LABELS,
    TTFT_BUCKETS,
)
from loadgen.sinks.prometheus.sessions import SessionMetrics


class LoadgenMetrics:
    """All of loadgen's instruments, registered on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        pl, rl = POINT_LABELS, RUN_LABELS

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*pl, *extra], registry=registry)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> BulkHistogram:
            return BulkHistogram(name, doc, pl, buckets, registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...]) -> Gauge:
            return Gauge(name, doc, list(labels), registry=registry)

        self.requests = counter(
            "loadgen_requests", "Finished requests by outcome (ok or error).", ("outcome",)
        )
        self.request_errors = counter(
            "loadgen_request_errors", "Failed requests by error kind.", ("kind",)
        )
        self.prompt_tokens = counter(
            "loadgen_prompt_tokens", "Prompt tokens of completed requests."
        )
        self.output_tokens = counter(
            "loadgen_output_tokens", "Output tokens (server usage) of completed requests."
        )
        self.decode_chunks = counter(
            "loadgen_decode_chunks",
            "Decode chunks: every chunk after the first, except a last chunk cut by max_tokens.",
        )
        self.decode_tokens = counter(
            "loadgen_decode_tokens",
            "Tokens carried by decode chunks; "
            "rate(tokens)/rate(chunks) is the stream acceptance length.",
        )
        self.decode_accepted = counter(
            "loadgen_decode_accepted_tokens_per_position",
            "Decode chunks with more than "
            "`position` tokens beyond the first (accepted draft at that position).",
            ("position",),
        )
        self.ttft = hist(
            "loadgen_time_to_first_token_seconds",
            "Time to first token (first chunk - send).",
            TTFT_BUCKETS,
        )
        self.ttfa = hist(
            "loadgen_ttfa_seconds",
            "Time to first answer token (first chunk carrying answer tokens - send), per "
            "request whose reasoning and answer were told apart and that reached its answer.",
            TTFT_BUCKETS,
        )
        self.phase_tokens = counter(
            "loadgen_phase_output_tokens",
            "Output tokens of completed requests whose phases were told apart, by phase "
            "(reasoning or answer).",
            ("phase",),
        )
        self.itl_chunk = hist(
            "loadgen_inter_chunk_latency_seconds",
            "Gap between consecutive chunks (ITL per chunk).",
            ITL_BUCKETS,
        )
        self.itl_token = hist(
            "loadgen_inter_token_latency_seconds",
            "Chunk gap / tokens of the later chunk, once per token (ITL per token).",
            ITL_BUCKETS,
        )
        self.tpot = hist(
            "loadgen_time_per_output_token_seconds",
            "(E2E - TTFT) / (output tokens - 1) per request.",
            ITL_BUCKETS,
        )
        self.e2e = hist(
            "loadgen_e2e_request_latency_seconds", "Last chunk - send, per request.", E2E_BUCKETS
        )
        self.queue = hist(
            "loadgen_queue_time_seconds",
            "Wait between being due and being sent (concurrency slot).",
            QUEUE_BUCKETS,
        )
        self.chunk_tokens = hist(
            "loadgen_decode_chunk_tokens",
            "Tokens per decode chunk (1 + accepted draft tokens).",
            tuple(float(b) for b in CHUNK_TOKEN_BUCKETS),
        )
        self.in_flight = gauge("loadgen_requests_in_flight", "Requests sent, not finished.", rl)
        self.target_concurrency = gauge(
            "loadgen_target_concurrency", "Concurrency of the current sweep point.", rl
        )
        self.sweep_points = gauge("loadgen_sweep_points", "Points planned in the sweep.", rl)
        self.sweep_points_completed = gauge(
            "loadgen_sweep_points_completed", "Points finished in the sweep.", rl
        )
        self.sweep_progress = gauge(
            "loadgen_sweep_progress_ratio", "Fraction of the sweep's requests finished.", rl
        )
        self.point_requests = gauge(
            "loadgen_point_requests", "Requests planned at the concurrency point.", pl
        )
        # --server-metrics ROLE=URL: each role's figures over the point (results'
        # server_metrics_by_role), and a disaggregated point's TTFT parts
        self.server_role = gauge(
            "loadgen_server_role_figure",
            "A server role's figure over the point (frontend, prefill, decode, worker): "
            "requests seen, mean TTFT/ITL ms, requests running/waiting, KV-cache usage.",
            (*pl, "role", "figure"),
        )
        self.ttft_part = gauge(
            "loadgen_ttft_part_milliseconds",
            "A disaggregated point's mean TTFT part (frontend, prefill_queue, prefill, "
            "kv_transfer, decode_first, unexplained), from the servers' histograms.",
            (*pl, "part"),
        )
        self.server_al = gauge(
            "loadgen_server_spec_decode_acceptance_length",
            "Acceptance length from the server's spec-decode counters over the point.",
            pl,
        )
        self.server_rate = gauge(
            "loadgen_server_spec_decode_acceptance_rate",
            "Acceptance rate from the server's counters over the point.",
            pl,
        )
        self.server_rate_pos = gauge(
            "loadgen_server_spec_decode_acceptance_rate_per_position",
            "Per-position acceptance rate from the server's counters.",
            (*pl, "position"),
        )
        self.stream_al = gauge(
            "loadgen_stream_acceptance_length",
            "Acceptance length from the stream over the point.",
            pl,
        )
        self.stream_rate = gauge(
            "loadgen_stream_acceptance_rate", "Acceptance rate from the stream over the point.", pl
        )
        self.best_al = gauge(
            "loadgen_acceptance_length",
            "The point's acceptance length to publish: the stream's when its "
            "chunks are one engine step each, else the server counters' "
            "(label source).",
            (*pl, "source"),
        )
        self.gpu_power = gauge(
            "loadgen_gpu_power_watts",
            "Mean power per GPU over the point's window (--gpu-metrics; "
            "set only when the point's power samples are valid).",
            pl,
        )
        self.joules_per_token = gauge(
            "loadgen_joules_per_output_token",
            "GPU energy per output token over the point (--gpu-metrics, valid points).",
            pl,
        )
        self.accuracy = gauge(
            "loadgen_accuracy_exact_match",
            "Exact match of the accuracy point at `conc` (--accuracy gsm8k), per task and "
            "filter (strict-match: the gated one, flexible-extract).",
            (*pl, "task", "filter"),
        )
        self.step_time = gauge(
            "loadgen_engine_step_seconds",
            "Engine step time reconstructed from the point's arrivals (steps_*_time_p*_ms): "
            "all steps, decode-only, or steps that carried a prefill completion.",
            # Not `quantile`: Prometheus reserves it for summaries (promtool rejects it on
            # a gauge), and a summary would claim a _sum/_count of observations these
            # per-point percentiles do not have. One family with a plain label keeps a
            # panel one selector (`by (percentile)`), spelled as the result files' p50.
            (*pl, "kind", "percentile"),
        )
        self.e2e_norm_intvty = gauge(
            "loadgen_e2e_norm_intvty",
            "E2E normalized interactivity over the point, tok/s/user (InferenceX AgentX's "
            "metric of record, <stat>_e2e_norm_intvty): stat mean, or the percentile of "
            "E2EL/OSL per request it inverts (50, 75, 90, 95, 99).",
            (*pl, "stat"),
        )
        self.steps = gauge(
            "loadgen_engine_steps", "Engine steps observed over the point (steps_observed).", pl
        )
        self.engines = gauge(
            "loadgen_engines", "Engines detected behind the frontend (steps_engines).", pl
        )
        self.stall_share = gauge(
            "loadgen_prefill_stall_share",
            "Share of the ITL gaps above the point's p90 that span a prefill step "
            "(steps_stall_share).",
            pl,
        )
        self.loop_lag = BulkHistogram(
            "loadgen_event_loop_lag_seconds",
            "Client event-loop backlog during measured phases: time for a posted callback to "
            "run (the same samples as the result files' client_loop_lag_*).",
            (),
            LOOP_LAG_BUCKETS,
            registry,
        )
        self.loop_lag.labels()  # unlabelled: exposed (empty) from the start
        self.sessions = SessionMetrics(registry)
        Info("loadgen_build", "loadgen version.", registry=registry).info({"version": __version__})
