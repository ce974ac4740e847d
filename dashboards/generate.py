"""Writes dashboards/loadgen.json (Grafana 10+ schema) from the panel list below.

The JSON is committed; edit this file and run `python dashboards/generate.py`, then
tests/sinks/test_dashboard.py checks that both agree and that every query returns data from a
real Prometheus scraping loadgen and the simulator.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
# loadgen labels its series with the served model's name as vLLM does (`model_name`), so
# one selector picks both. `instance` is Prometheus' target label: the variable picks the
# servers and loadgen processes to show. Server series are grouped by instance: several
# servers serving one model name are separate lines, never one sum. Client series are
# summed over the loadgen processes selected (the shards of one run are one client).
RUN = 'model_name=~"$model", instance=~"$instance"'  # series of a sweep (no conc label)
POINT = f'{RUN}, conc=~"$conc"'  # series of a concurrency point
SERVER = 'model_name=~"$model", instance=~"$instance"'  # vLLM's series
# who drives / serves a model (the engines whose series carry model_name: ATOM's and
# llama.cpp's have no labels, so their servers are picked by "All" only)
BOTH = (
    "loadgen_target_concurrency|vllm:num_requests_running|sglang:num_running_reqs"
    "|trtllm_num_requests_running"
)
UNLABELLED = 'instance=~"$instance"'  # ATOM's and llama.cpp's series (no model_name)
RATE = "[$__rate_interval]"
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def quantiles(metric: str, selector: str, prefix: str = "") -> list[tuple[str, str]]:
    return [
        (
            f"{prefix}{name}",
            f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{selector}}}{RATE})))",
        )
        for name, q in QUANTILES
    ]


def rate_sum(metric: str, selector: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{{{selector}}}{RATE}))"


def server_rate(metric: str, by: str = "") -> str:
    """A vLLM counter's rate per server (instance), never summed over servers."""
    return rate_sum(metric, SERVER, ", ".join(["instance", *filter(None, [by])]))


def server_quantile(q: float, metric: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le, instance) (rate({metric}_bucket{{{SERVER}}}{RATE})))"
    )


def engine_rate(metric: str, selector: str = SERVER) -> str:
    return rate_sum(metric, selector, "instance")


def engine_rows() -> list[Panel]:
    """Other engines' own series (docs/measuring.md's engine table; loadgen/metrics/engines.py reads
    the same ones): one panel per figure, one line per engine and server."""
    trt_steps = engine_rate(
        "trtllm_spec_decode_drafted_tokens_total", f'{SERVER}, token_position="0"'
    )
    return [
        (
            "Engine acceptance length",
            "TensorRT-LLM: 1 + accepted / draft steps (drafted tokens at position 0). ATOM: "
            "1 + accepted / decode steps. SGLang exports only a gauge, its last logging "
            "interval's batch, shown as such (loadgen never publishes it).",
            "short",
            8,
            [
                (
                    "TensorRT-LLM {{instance}}",
                    f"1 + {engine_rate('trtllm_spec_decode_accepted_tokens_total')} / {trt_steps}",
                ),
                (
                    "ATOM {{instance}}",
                    f"1 + {engine_rate('atom:mtp_accepted_tokens_total', UNLABELLED)}"
                    f" / {engine_rate('atom:mtp_decode_steps_total', UNLABELLED)}",
                ),
                (
                    "SGLang {{instance}} (gauge: last interval's batch)",
                    f"max by (instance) (sglang:spec_accept_length{{{SERVER}}})",
                ),
            ],
            "timeseries",
        ),
        (
            "Engine requests running / waiting",
            "Each engine's scheduler queue (llama.cpp: processing / deferred).",
            "short",
            8,
            [
                (f"{engine} {{{{instance}}}} {what}", f"sum by (instance) ({metric}{{{sel}}})")
                for engine, sel, pairs in (
                    ("SGLang", SERVER, (("sglang:num_running_reqs", "sglang:num_queue_reqs"))),
                    (
                        "TensorRT-LLM",
                        SERVER,
                        ("trtllm_num_requests_running", "trtllm_num_requests_waiting"),
                    ),
                    ("ATOM", UNLABELLED, ("atom:requests_running", "atom:requests_waiting")),
                    (
                        "llama.cpp",
                        UNLABELLED,
                        ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
                    ),
                )
                for what, metric in zip(("running", "waiting"), pairs, strict=True)
            ],
            "timeseries",
        ),
        (
            "Engine KV-cache usage",
            "SGLang token_usage, TensorRT-LLM kv_cache_utilization, ATOM kv_cache_usage_ratio "
            "(llama.cpp exports none).",
            "percentunit",
            8,
            [
                ("SGLang {{instance}}", f"max by (instance) (sglang:token_usage{{{SERVER}}})"),
                (
                    "TensorRT-LLM {{instance}}",
                    f"max by (instance) (trtllm_kv_cache_utilization{{{SERVER}}})",
                ),
                (
                    "ATOM {{instance}}",
                    f"max by (instance) (atom:kv_cache_usage_ratio{{{UNLABELLED}}})",
                ),
            ],
            "timeseries",
        ),
        (
            "Engine server TTFT",
            "From each engine's own TTFT histogram (ATOM and llama.cpp export none).",
            "s",
            12,
            server_quantiles(
                [
                    ("SGLang", "sglang:time_to_first_token_seconds"),
                    ("TensorRT-LLM", "trtllm_time_to_first_token_seconds"),
                ]
            ),
            "timeseries",
        ),
        (
            "Engine prefix-cache hit rate",
            "Prompt tokens served from the prefix cache / prompt tokens: SGLang cached_tokens "
            "/ prompt_tokens, TensorRT-LLM prompt_cached_tokens / prompt_tokens, ATOM "
            "prefix_cache_cached_tokens / full_tokens.",
            "percentunit",
            12,
            [
                (
                    "SGLang {{instance}}",
                    f"{engine_rate('sglang:cached_tokens_total')} / "
                    f"{engine_rate('sglang:prompt_tokens_total')}",
                ),
                (
                    "TensorRT-LLM {{instance}}",
                    f"{engine_rate('trtllm_prompt_cached_tokens_total')} / "
                    f"{engine_rate('trtllm_prompt_tokens_total')}",
                ),
                (
                    "ATOM {{instance}}",
                    f"{engine_rate('atom:prefix_cache_cached_tokens_total', UNLABELLED)} / "
                    f"{engine_rate('atom:prefix_cache_full_tokens_total', UNLABELLED)}",
                ),
            ],
            "timeseries",
        ),
    ]


def client_vs_server(client: str, server: str) -> list[tuple[str, str]]:
    """p50/p99 of one latency from loadgen's histogram and the same from vLLM's."""
    picked = (("p50", 0.5), ("p99", 0.99))
    return [
        *[
            (
                f"loadgen {n}",
                f"histogram_quantile({q}, sum by (le) (rate({client}_bucket{{{POINT}}}{RATE})))",
            )
            for n, q in picked
        ],
        *[(f"vLLM {{{{instance}}}} {n}", server_quantile(q, server)) for n, q in picked],
    ]


def role_figure(figure: str, what: str = "") -> tuple[str, str]:
    """A figure of every role over each finished point (loadgen_server_role_figure)."""
    legend = "{{role}}" + (f" {what}" if what else "") + " conc {{conc}}"
    selector = f'{POINT}, figure="{figure}"'
    return legend, f"avg by (conc, role) (loadgen_server_role_figure{{{selector}}})"


def server_quantiles(metrics: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [
        (f"{name} {{{{instance}}}} {q_name}", server_quantile(q, metric))
        for name, metric in metrics
        for q_name, q in (("p50", 0.5), ("p99", 0.99))
    ]


# (title, description, unit, width, [(legend, expr)], panel type)
Panel = tuple[str, str, str, int, list[tuple[str, str]], str]
ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Sweep",
        [
            (
                "Sweep progress",
                "Share of the sweep's requests finished (with shards: the slowest shard's).",
                "percentunit",
                4,
                [("{{endpoint}}", f"min by (endpoint) (loadgen_sweep_progress_ratio{{{RUN}}})")],
                "gauge",
            ),
            (
                "Points done",
                "Concurrency points finished (by every shard) / planned.",
                "none",
                4,
                [
                    ("done", f"min(loadgen_sweep_points_completed{{{RUN}}})"),
                    ("planned", f"max(loadgen_sweep_points{{{RUN}}})"),
                ],
                "stat",
            ),
            (
                "Requests in flight vs target concurrency",
                "In flight should sit at the target during a point: less means the client or the "
                "queue could not keep the slots busy.",
                "short",
                8,
                [
                    ("in flight", f"sum(loadgen_requests_in_flight{{{RUN}}})"),
                    ("target concurrency", f"max(loadgen_target_concurrency{{{RUN}}})"),
                    (
                        "vLLM {{instance}} running",
                        f"sum by (instance) (vllm:num_requests_running{{{SERVER}}})",
                    ),
                ],
                "timeseries",
            ),
            (
                "Requests by outcome",
                "Finished requests per second.",
                "reqps",
                4,
                [("{{outcome}}", rate_sum("loadgen_requests_total", POINT, "outcome"))],
                "timeseries",
            ),
            (
                "Errors by kind",
                "Failed requests per second by kind (transport boundary).",
                "reqps",
                4,
                [("{{kind}}", rate_sum("loadgen_request_errors_total", POINT, "kind"))],
                "timeseries",
            ),
        ],
    ),
    (
        "Client latency",
        [
            (
                "TTFT",
                "Time to first token (send to first chunk).",
                "s",
                8,
                quantiles("loadgen_time_to_first_token_seconds", POINT),
                "timeseries",
            ),
            (
                "TTFA",
                "Time to first answer token: a thinking model's first token after its "
                "reasoning (send to the first chunk carrying answer tokens); TTFT without "
                "thinking. Requests whose phases were not told apart have none.",
                "s",
                8,
                quantiles("loadgen_ttfa_seconds", POINT),
                "timeseries",
            ),
            (
                "Output tokens by phase",
                "Reasoning and answer tokens per second, of the requests whose phases "
                "were told apart (docs/thinking.md).",
                "short",
                8,
                [("{{phase}}", rate_sum("loadgen_phase_output_tokens_total", POINT, "phase"))],
                "timeseries",
            ),
            (
                "ITL per chunk",
                "Gap between consecutive chunks (vLLM's ITL).",
                "s",
                8,
                quantiles("loadgen_inter_chunk_latency_seconds", POINT),
                "timeseries",
            ),
            (
                "ITL per token",
                "Chunk gap divided by its tokens: what a user feels under MTP.",
                "s",
                8,
                quantiles("loadgen_inter_token_latency_seconds", POINT),
                "timeseries",
            ),
            (
                "TPOT",
                "(E2E - TTFT) / (output tokens - 1).",
                "s",
                8,
                quantiles("loadgen_time_per_output_token_seconds", POINT),
                "timeseries",
            ),
            (
                "E2E latency",
                "Send to last chunk.",
                "s",
                8,
                quantiles("loadgen_e2e_request_latency_seconds", POINT),
                "timeseries",
            ),
            (
                "Queue time",
                "Wait for a concurrency slot before sending (never inside TTFT).",
                "s",
                8,
                quantiles("loadgen_queue_time_seconds", POINT),
                "timeseries",
            ),
            (
                "TTFT p50 by concurrency",
                "Median TTFT of each concurrency point.",
                "s",
                12,
                [
                    (
                        "conc {{conc}}",
                        "histogram_quantile(0.5, sum by (le, conc) "
                        f"(rate(loadgen_time_to_first_token_seconds_bucket{{{POINT}}}{RATE})))",
                    )
                ],
                "timeseries",
            ),
            (
                "TPOT p50 by concurrency",
                "Median TPOT of each concurrency point.",
                "s",
                12,
                [
                    (
                        "conc {{conc}}",
                        "histogram_quantile(0.5, sum by (le, conc) "
                        f"(rate(loadgen_time_per_output_token_seconds_bucket{{{POINT}}}{RATE})))",
                    )
                ],
                "timeseries",
            ),
        ],
    ),
    (
        "Throughput",
        [
            (
                "Token throughput",
                "Client output and total (prompt + output) tokens/s of "
                "completed requests, beside the server's generation rate.",
                "suffix:tok/s",
                8,
                [
                    ("output (loadgen)", rate_sum("loadgen_output_tokens_total", POINT)),
                    (
                        "total (loadgen)",
                        f"{rate_sum('loadgen_output_tokens_total', POINT)} + "
                        f"{rate_sum('loadgen_prompt_tokens_total', POINT)}",
                    ),
                    ("generation (vLLM {{instance}})", server_rate("vllm:generation_tokens_total")),
                ],
                "timeseries",
            ),
            (
                "Prompt tokens/s",
                "Prompt tokens of the requests loadgen completed, beside the "
                "prefill tokens vLLM processed (cache hits included).",
                "suffix:tok/s",
                8,
                [
                    ("loadgen", rate_sum("loadgen_prompt_tokens_total", POINT)),
                    ("vLLM {{instance}}", server_rate("vllm:prompt_tokens_total")),
                ],
                "timeseries",
            ),
            (
                "Request throughput",
                "Completed requests/s: loadgen vs vLLM's successes.",
                "reqps",
                8,
                [
                    ("loadgen", rate_sum("loadgen_requests_total", f'{POINT}, outcome="ok"')),
                    ("vLLM {{instance}}", server_rate("vllm:request_success_total")),
                ],
                "timeseries",
            ),
        ],
    ),
    (
        "Sessions",
        [
            (
                "Live sessions and trees",
                "Session runs: sessions (roots and subagents) and "
                "session trees being played; trees never exceed the lanes (target concurrency), "
                "sessions may while subagents fan out.",
                "short",
                6,
                [
                    ("sessions", f"sum(loadgen_sessions_live{{{RUN}}})"),
                    ("trees", f"sum(loadgen_session_trees_live{{{RUN}}})"),
                    ("lanes", f"max(loadgen_target_concurrency{{{RUN}}})"),
                ],
                "timeseries",
            ),
            (
                "Turns/s",
                "Session turns finished per second (any outcome).",
                "reqps",
                6,
                [("turns", rate_sum("loadgen_session_turns_total", POINT))],
                "timeseries",
            ),
            (
                "Prefix-cache hit rate: client vs server",
                "Client: cached tokens the server "
                "reported per request (usage.prompt_tokens_details.cached_tokens; vLLM "
                "--enable-prompt-tokens-details) over those requests' prompt tokens. Theoretical: "
                "what an unbounded cache would hit per the trace's hash_ids. Server: vLLM's "
                "prefix_cache_hits / queries.",
                "percentunit",
                12,
                [
                    (
                        "client-reported",
                        f"{rate_sum('loadgen_session_cached_tokens_total', POINT)} / "
                        f"{rate_sum('loadgen_session_cache_reported_prompt_tokens_total', POINT)}",
                    ),
                    (
                        "theoretical (trace)",
                        f"{rate_sum('loadgen_session_theoretical_cached_tokens_total', POINT)} / "
                        f"{rate_sum('loadgen_session_prompt_tokens_total', POINT)}",
                    ),
                    (
                        "vLLM {{instance}}",
                        f"{server_rate('vllm:prefix_cache_hits_total')} / "
                        f"{server_rate('vllm:prefix_cache_queries_total')}",
                    ),
                ],
                "timeseries",
            ),
            (
                "TTFT by context length",
                "p50 and p99 TTFT of session turns by prompt length, in "
                "the result files' ttft_by_context bins (tokens).",
                "s",
                24,
                [
                    (
                        f"{name} {{{{context_bin}}}}",
                        f"histogram_quantile({q}, sum by (le, context_bin) "
                        f"(rate(loadgen_session_time_to_first_token_seconds_bucket{{{POINT}}}{RATE})))",
                    )
                    for name, q in (("p50", 0.5), ("p99", 0.99))
                ],
                "timeseries",
            ),
        ],
    ),
    (
        "Speculative decoding (MTP)",
        [
            (
                "Acceptance length",
                "Stream: tokens per decode chunk. Server: 1 + accepted / "
                "drafts from vllm:spec_decode_*. They should agree with stream interval 1.",
                "short",
                8,
                [
                    (
                        "stream (loadgen)",
                        f"{rate_sum('loadgen_decode_tokens_total', POINT)} / "
                        f"{rate_sum('loadgen_decode_chunks_total', POINT)}",
                    ),
                    (
                        "server (vLLM {{instance}})",
                        f"1 + {server_rate('vllm:spec_decode_num_accepted_tokens_total')}"
                        f" / {server_rate('vllm:spec_decode_num_drafts_total')}",
                    ),
                ],
                "timeseries",
            ),
            (
                "Per-position acceptance rate",
                "Share of decode steps whose draft at position i "
                "was accepted: from the stream and from the server.",
                "percentunit",
                8,
                [
                    (
                        "stream pos {{position}}",
                        rate_sum(
                            "loadgen_decode_accepted_tokens_per_position_total", POINT, "position"
                        )
                        + f" / on() group_left {rate_sum('loadgen_decode_chunks_total', POINT)}",
                    ),
                    (
                        "server {{instance}} pos {{position}}",
                        server_rate(
                            "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position"
                        )
                        + " / on(instance) group_left "
                        + server_rate("vllm:spec_decode_num_drafts_total"),
                    ),
                ],
                "timeseries",
            ),
            (
                "Acceptance length per point",
                "Per finished point: server-side (counter deltas "
                "loadgen scraped around the point) and stream-side (with shards: their average; "
                "`loadgen merge` gives the exact figure).",
                "short",
                8,
                [
                    (
                        "server conc {{conc}}",
                        f"avg by (conc) (loadgen_server_spec_decode_acceptance_length{{{POINT}}})",
                    ),
                    (
                        "stream conc {{conc}}",
                        f"avg by (conc) (loadgen_stream_acceptance_length{{{POINT}}})",
                    ),
                ],
                "timeseries",
            ),
            (
                "Tokens per decode chunk",
                "Distribution of 1 + accepted draft tokens per step.",
                "short",
                24,
                [
                    (
                        "{{le}}",
                        "sum by (le) (increase(loadgen_decode_chunk_tokens_bucket"
                        f"{{{POINT}}}[$__range]))",
                    )
                ],
                "bargauge",
            ),
        ],
    ),
    (
        "Server (vLLM)",
        [
            (
                "vLLM requests running / waiting",
                "The server's scheduler queue.",
                "short",
                8,
                [
                    (
                        "{{instance}} running",
                        f"sum by (instance) (vllm:num_requests_running{{{SERVER}}})",
                    ),
                    (
                        "{{instance}} waiting",
                        f"sum by (instance) (vllm:num_requests_waiting{{{SERVER}}})",
                    ),
                ],
                "timeseries",
            ),
            (
                "vLLM KV cache usage",
                "Fraction of KV-cache blocks in use.",
                "percentunit",
                8,
                [("{{instance}} engine {{engine}}", f"vllm:kv_cache_usage_perc{{{SERVER}}}")],
                "timeseries",
            ),
            (
                "vLLM prefix-cache hit rate",
                "Prompt tokens found in the prefix cache / tokens "
                "looked up. loadgen's synthetic prompts share no prefix beyond the template, so a "
                "high rate means the prompts are not what a run should measure.",
                "percentunit",
                8,
                [
                    (
                        "{{instance}}",
                        f"{server_rate('vllm:prefix_cache_hits_total')} / "
                        f"{server_rate('vllm:prefix_cache_queries_total')}",
                    )
                ],
                "timeseries",
            ),
            (
                "vLLM preemptions",
                "Requests the scheduler preempted per second (KV cache full): "
                "their latency includes a recompute.",
                "short",
                8,
                [("{{instance}}", server_rate("vllm:num_preemptions_total"))],
                "timeseries",
            ),
            (
                "Queue time: loadgen vs vLLM",
                "loadgen: wait for a concurrency slot before "
                "sending. vLLM: time in the server's WAITING queue, inside the client's TTFT.",
                "s",
                8,
                client_vs_server("loadgen_queue_time_seconds", "vllm:request_queue_time_seconds"),
                "timeseries",
            ),
            (
                "vLLM prefill / decode time",
                "Per request, in the server: first scheduled to "
                "first token (prefill), first to last token (decode).",
                "s",
                8,
                server_quantiles(
                    [
                        ("prefill", "vllm:request_prefill_time_seconds"),
                        ("decode", "vllm:request_decode_time_seconds"),
                    ]
                ),
                "timeseries",
            ),
            (
                "TTFT: loadgen vs vLLM",
                "The client's TTFT includes the network and HTTP "
                "stack; the server's starts at arrival.",
                "s",
                8,
                client_vs_server(
                    "loadgen_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"
                ),
                "timeseries",
            ),
            (
                "ITL: loadgen vs vLLM",
                "Per-chunk gaps seen by the client vs vLLM's inter-token latency histogram.",
                "s",
                8,
                client_vs_server(
                    "loadgen_inter_chunk_latency_seconds", "vllm:inter_token_latency_seconds"
                ),
                "timeseries",
            ),
            (
                "E2E: loadgen vs vLLM",
                "Request latency at the client and in the server.",
                "s",
                8,
                client_vs_server(
                    "loadgen_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"
                ),
                "timeseries",
            ),
        ],
    ),
    ("Server (SGLang, TensorRT-LLM, ATOM, llama.cpp)", engine_rows()),
    # Per finished point, from `--server-metrics ROLE=URL` (a Dynamo deployment's frontend,
    # prefill and decode workers): the result files' server_metrics_by_role and ttft_parts.
    # Gauges of a point: with shards, their average (each shard reads the same servers).
    (
        "Disaggregated serving (--server-metrics ROLE=URL)",
        [
            (
                "Server TTFT per role",
                "Each role's mean TTFT over each finished point, from its URLs' own histograms "
                "(server_metrics_by_role): the frontend's from its handler, a decode worker's "
                "from its engine (the KV transfer not inside).",
                "ms",
                8,
                [role_figure("ttft_ms")],
                "timeseries",
            ),
            (
                "Requests running / waiting per role",
                "Each role's requests running and waiting, summed over its URLs and averaged "
                "over each finished point.",
                "short",
                8,
                [role_figure("running", "running"), role_figure("waiting", "waiting")],
                "timeseries",
            ),
            (
                "KV-cache usage per role",
                "The mean of each role's URLs' mean KV-cache usage over each finished point.",
                "percentunit",
                8,
                [role_figure("kv_usage")],
                "timeseries",
            ),
            (
                "TTFT taken apart",
                "A disaggregated point's mean TTFT parts (ttft_parts: frontend, prefill queue, "
                "prefill, KV transfer, decode admission + first step, and what no server timed), "
                "one bar each per concurrency: they add up to the client's mean TTFT when the "
                "point's verdict (ttft_parts.adds_up in the result file) says so.",
                "ms",
                24,
                [
                    (
                        "{{part}} conc {{conc}}",
                        f"avg by (conc, part) (loadgen_ttft_part_milliseconds{{{POINT}}})",
                    )
                ],
                "bargauge",
            ),
        ],
    ),
    (
        "Client health",
        [
            (
                "Event-loop lag",
                "How late loadgen's event loop wakes up: chunk timestamps can be "
                "late by up to this much.",
                "s",
                24,
                quantiles("loadgen_event_loop_lag_seconds", 'instance=~"$instance"'),
                "timeseries",
            ),
        ],
    ),
    # Per finished point, from the --gpu-metrics exporters loadgen sampled over the point's
    # window: the result files' avg_power_w and joules_per_output_token.
    (
        "Energy (--gpu-metrics)",
        [
            (
                "GPU power per point",
                "Mean board power per GPU over each finished point's window "
                "(first send to last completion), from the --gpu-metrics exporters; set only when "
                "the point's power samples are valid (power_valid). With shards: their average.",
                "watt",
                12,
                [("conc {{conc}}", f"avg by (conc) (loadgen_gpu_power_watts{{{POINT}}})")],
                "timeseries",
            ),
            (
                "Energy per output token",
                "GPU energy of all sampled GPUs over each finished "
                "point's window per output token (joules_per_output_token; valid points only). "
                "With shards: their average; `loadgen merge` gives the exact figure.",
                "suffix:J/tok",
                12,
                [("conc {{conc}}", f"avg by (conc) (loadgen_joules_per_output_token{{{POINT}}})")],
                "timeseries",
            ),
        ],
    ),
]


def panel(panel_id: int, spec: Panel, x: int, y: int) -> dict[str, Any]:
    title, description, unit, width, queries, kind = spec
    targets = [
        {
            "refId": chr(ord("A") + i),
            "datasource": DS,
            "expr": expr,
            "legendFormat": legend,
            "range": True,
            **(
                {"format": "heatmap", "instant": True, "range": False} if kind == "bargauge" else {}
            ),
        }
        for i, (legend, expr) in enumerate(queries)
    ]
    options: dict[str, Any] = {
        "tooltip": {"mode": "multi", "sort": "desc"},
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
    }
    if kind in ("stat", "gauge", "bargauge"):
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return {
        "id": panel_id,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"h": 8, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
        "options": options,
        "targets": targets,
    }


def variable(name: str, label: str, query: str, *, multi: bool) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "allValue": ".*",
        "multi": multi,
        "sort": 3 if name == "conc" else 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    next_id, y = 1, 0
    for row_title, specs in ROWS:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id, y, x = next_id + 1, y + 1, 0
        for spec in specs:
            if x + spec[3] > 24:
                x, y = 0, y + 8
            panels.append(panel(next_id, spec, x, y))
            next_id, x = next_id + 1, x + spec[3]
        y += 8
    templating = [
        {
            "name": "datasource",
            "label": "Datasource",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
        },
        variable(
            "model", "Model", f'label_values({{__name__=~"{BOTH}"}}, model_name)', multi=False
        ),
        variable(
            "instance",
            "Instance",
            f'label_values({{__name__=~"{BOTH}", model_name=~"$model"}}, instance)',
            multi=True,
        ),
        variable(
            "conc",
            "Concurrency",
            f"label_values(loadgen_point_requests{{{RUN}}}, conc)",
            multi=True,
        ),
    ]
    return {
        "uid": "loadgen",
        "title": "loadgen",
        "tags": ["loadgen", "vllm", "llm-serving"],
        "description": "loadgen sweep live: client latencies (TTFT, ITL per chunk and per "
        "token, TPOT, E2E), throughput, sessions, MTP acceptance, GPU power and energy per "
        "token, beside vLLM's own metrics.",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {"list": templating},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    target = Path(__file__).with_name("loadgen.json")
    target.write_text(render())
    sys.stdout.write(f"wrote {target}\n")
