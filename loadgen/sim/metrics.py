"""The simulator's /metrics: vLLM 0.32 names, labels and buckets on an injected registry.

Names, help texts and buckets are copied from fixtures/vllm_0.32_cpu/metrics.txt.
prometheus-client sorts labels when it renders, which is also what the capture shows.
The spec-decode counters count what the engine drew, exactly as vLLM does: a step cut
short by max_tokens (or EOS) still counts all the drafts it accepted.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from loadgen.histogram import BulkHistogram, HistogramSeries

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_TIME_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
LABELS = ("model_name", "engine")


def one_two_five_buckets(max_value: int) -> list[float]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(float(value))
        exponent += 1


# As captured (vLLM derives them from its cudagraph capture sizes).
ITERATION_BUCKETS = (
    1.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    256.0,
    512.0,
    1024.0,
    2048.0,
    4096.0,
    8192.0,
    16384.0,
)


class SimMetrics:
    """All instruments, bound to one registry and one (model_name, engine) label pair."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        model_name: str,
        max_model_len: int,
        spec_tokens: int,
        engines: int = 1,
    ) -> None:
        self._registry = registry
        self._labels = {"model_name": model_name, "engine": "0"}
        self._engines = engines
        self.spec_tokens = spec_tokens
        if spec_tokens > 0:
            self._spec_decode_counters()
        self._gauges_and_counters()
        self._histograms(one_two_five_buckets(max_model_len))

    def _counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, LABELS, registry=self._registry)

    def _histogram(self, name: str, doc: str, buckets: Sequence[float]) -> HistogramSeries:
        family = BulkHistogram(name, doc, list(self._labels), buckets, self._registry)
        return family.labels(*self._labels.values())

    def _spec_decode_counters(self) -> None:
        labels = self._labels
        self.drafts = self._counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts."
        ).labels(**labels)
        self.draft_tokens = self._counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."
        ).labels(**labels)
        self.accepted = self._counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."
        ).labels(**labels)
        per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            (*LABELS, "position"),
            registry=self._registry,
        )
        self.accepted_per_pos = [
            per_pos.labels(**labels, position=str(i)) for i in range(self.spec_tokens)
        ]

    def _gauges_and_counters(self) -> None:
        labels = self._labels

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=self._registry).labels(**labels)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.preemptions = self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        ).labels(**labels)
        self.prompt_tokens = self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed."
        ).labels(**labels)
        self.generation_tokens = self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(**labels)
        self.prefix_cache_queries = self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        ).labels(**labels)
        self.prefix_cache_hits = self._counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        ).labels(**labels)
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ("model_name", "engine", "finished_reason"),
            registry=self._registry,
        )
        self.success = {r: success.labels(**labels, finished_reason=r) for r in FINISHED_REASONS}

    def _histograms(self, token_buckets: list[float]) -> None:
        h = self._histogram
        self.req_prompt_tokens = h(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.req_generation_tokens = h(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
        )
        # one series per data-parallel engine, as vLLM's frontend labels each engine's
        # steps (engine="<index>"): the step count a client checks its estimate against,
        # and the engines it runs
        steps = BulkHistogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            list(self._labels),
            ITERATION_BUCKETS,
            self._registry,
        )
        model = self._labels["model_name"]
        self.iteration_tokens = [steps.labels(model, str(i)) for i in range(self._engines)]
        self.max_generation_tokens = h(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            token_buckets,
        )
        self.params_n = h(
            "vllm:request_params_n", "Histogram of the n request parameter.", [1, 2, 5, 10, 20]
        )
        self.params_max_tokens = h(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            token_buckets,
        )
        self.ttft = h(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = h(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.tpot = h(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )

        def request_time(phase: str, doc: str) -> HistogramSeries:
            return h(f"vllm:{phase}_seconds", f"Histogram of {doc}", REQUEST_TIME_BUCKETS)

        self.e2e = request_time("e2e_request_latency", "e2e request latency in seconds.")
        self.queue = request_time("request_queue_time", "time spent in WAITING phase for request.")
        self.inference = request_time(
            "request_inference_time", "time spent in RUNNING phase for request."
        )
        self.prefill = request_time(
            "request_prefill_time", "time spent in PREFILL phase for request."
        )
        self.decode = request_time("request_decode_time", "time spent in DECODE phase for request.")

    def record_drafts(self, drafts: int, accepted_histogram: list[int]) -> None:
        """One step's MTP verifications: `accepted_histogram[a]` requests accepted `a` drafts.

        Counted once per step, not per request: a counter increment takes a lock.
        """
        if not drafts:
            return
        self.drafts.inc(drafts)
        self.draft_tokens.inc(drafts * self.spec_tokens)
        accepted = sum(a * n for a, n in enumerate(accepted_histogram))
        if accepted:
            self.accepted.inc(accepted)
        at_least = 0
        for position in range(self.spec_tokens, 0, -1):
            at_least += accepted_histogram[position]  # requests that accepted > position-1
            if at_least:
                self.accepted_per_pos[position - 1].inc(at_least)
