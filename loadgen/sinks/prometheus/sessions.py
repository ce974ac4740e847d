"""The session view of the live metrics: live sessions and trees, turns, prompt and cached
tokens, TTFT by context length.

Every per-request figure comes from metrics/agentic.py's rules on the finished record
(`cache_tokens`, `has_ttft`, `context_bin`), the very ones behind the result file's
prefix-cache fields and `ttft_by_context`, so a counter summed over a point equals its
result field. Series exist only once a session run uses them (a single-turn run shows
none). Live sessions and trees come from the replay's session_started/session_finished
hooks: a session is live from its first turn being due until it and every subagent it
spawned have ended; a root session lives exactly as long as its tree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from loadgen.histogram import BulkHistogram, HistogramSeries
from loadgen.metrics.agentic import cache_tokens, context_bin, context_bin_label, has_ttft
from loadgen.records import RequestRecord
from loadgen.sinks.prometheus.buckets import POINT_LABELS, RUN_LABELS, TTFT_BUCKETS


class SessionMetrics:
    """The session instruments, registered on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        pl = POINT_LABELS

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, pl, registry=registry)

        self.sessions_live = Gauge(
            "loadgen_sessions_live",
            "Sessions (roots and subagents) being played: from "
            "their first turn being due until they and their subagents ended.",
            RUN_LABELS,
            registry=registry,
        )
        self.trees_live = Gauge(
            "loadgen_session_trees_live",
            "Session trees (a root and its subagents) being played: the lanes in use.",
            RUN_LABELS,
            registry=registry,
        )
        self.turns = counter(
            "loadgen_session_turns",
            "Session turns finished (any outcome; failures also "
            'count in loadgen_requests_total{outcome="error"}).',
        )
        self.prompt_tokens = counter(
            "loadgen_session_prompt_tokens",
            "Prompt tokens of the session turns sent "
            "(failed ones included): the results' prompt_tokens_sent.",
        )
        self.cached_tokens = counter(
            "loadgen_session_cached_tokens",
            "Cached prompt tokens the server reported "
            "(usage.prompt_tokens_details.cached_tokens): the results' client_cached_tokens.",
        )
        self.cache_reported_prompt_tokens = counter(
            "loadgen_session_cache_reported_prompt_tokens",
            "Prompt tokens of the turns "
            "whose usage reported cached tokens: rate(cached) / rate(this) is the results' "
            "client_prefix_hit_rate.",
        )
        self.theoretical_cached_tokens = counter(
            "loadgen_session_theoretical_cached_tokens",
            "Prompt tokens an unbounded "
            "prefix cache would hit per the trace's hash_ids: the results' "
            "theoretical_cached_tokens.",
        )
        self.ttft = BulkHistogram(
            "loadgen_session_time_to_first_token_seconds",
            "TTFT of completed session turns "
            "by prompt length (`context_bin`: the results' ttft_by_context bins).",
            (*pl, "context_bin"),
            TTFT_BUCKETS,
            registry,
        )


@dataclass(slots=True)
class _PointSessionSeries:
    turns: Any
    prompt_tokens: Any
    cached_tokens: Any
    cache_reported_prompt_tokens: Any
    theoretical_cached_tokens: Any
    ttft: Callable[[int], HistogramSeries]  # context bin index -> child, made on first use


class SessionObserver:
    """The session part of MetricsObserver: the same label values, its own series."""

    def __init__(self, metrics: SessionMetrics, run: tuple[str, str]) -> None:
        self.metrics = metrics
        self._run = run
        self._points: dict[int, _PointSessionSeries] = {}
        self._live: tuple[Any, Any] | None = None  # (sessions, trees), from the first session

    def _series(self, conc: int) -> _PointSessionSeries:
        series = self._points.get(conc)
        if series is None:
            m, key = self.metrics, (*self._run, str(conc))
            series = self._points[conc] = _PointSessionSeries(
                turns=m.turns.labels(*key),
                prompt_tokens=m.prompt_tokens.labels(*key),
                cached_tokens=m.cached_tokens.labels(*key),
                cache_reported_prompt_tokens=m.cache_reported_prompt_tokens.labels(*key),
                theoretical_cached_tokens=m.theoretical_cached_tokens.labels(*key),
                ttft=functools.cache(lambda index: m.ttft.labels(*key, context_bin_label(index))),
            )
        return series

    def _live_gauges(self) -> tuple[Any, Any]:
        if self._live is None:
            self._live = (
                self.metrics.sessions_live.labels(*self._run),
                self.metrics.trees_live.labels(*self._run),
            )
        return self._live

    def session_started(self, root: bool) -> None:
        sessions, trees = self._live_gauges()
        sessions.inc()
        if root:
            trees.inc()

    def session_finished(self, root: bool) -> None:
        sessions, trees = self._live_gauges()
        sessions.dec()
        if root:
            trees.dec()

    def request_finished(self, record: RequestRecord) -> None:
        """One measured turn of a session (any outcome)."""
        series = self._series(record.conc)
        series.turns.inc()
        tokens = cache_tokens(record)
        if tokens is not None:
            series.prompt_tokens.inc(tokens.prompt_sent)
            if tokens.cached is not None:
                series.cached_tokens.inc(tokens.cached)
                series.cache_reported_prompt_tokens.inc(tokens.cached_prompt)
            if tokens.theoretical is not None:
                series.theoretical_cached_tokens.inc(tokens.theoretical)
        if has_ttft(record):
            series.ttft(context_bin(record.input_len)).observe((record.ttft_ns or 0) / 1e9)

    def finished(self) -> None:
        """The sweep is over: nothing is live any more (also after a cancel)."""
        if self._live is not None:
            for gauge in self._live:
                gauge.set(0)
