"""The RunObserver that feeds LoadgenMetrics: series looked up once per point, every
per-request quantity computed by metrics/ on the finished record (never per chunk)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.histogram import HistogramSeries
from loadgen.metrics.acceptance import accepted_at_position
from loadgen.metrics.arrays import PointArrays
from loadgen.metrics.checks import NO_TOKENS, failure_kind
from loadgen.metrics.phases import request_phases
from loadgen.metrics.summary import latency_samples
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.accuracy import AccuracyResult
from loadgen.results.point import PointResult
from loadgen.sinks.prometheus.buckets import MAX_POSITIONS
from loadgen.sinks.prometheus.instruments import LoadgenMetrics
from loadgen.sinks.prometheus.sessions import SessionObserver


@dataclass(slots=True)
class _PointSeries:
    """The children of one (model_name, endpoint, conc): looked up once per point, not per
    record."""

    ok: Any
    error: Any
    errors: dict[str, Any]  # failure kind (ErrorKind values + no_tokens) -> child
    prompt_tokens: Any
    output_tokens: Any
    decode_chunks: Any
    decode_tokens: Any
    accepted: Callable[[int], Any]  # position -> child, created on first use
    ttft: HistogramSeries
    ttfa: HistogramSeries
    reasoning_tokens: Any
    answer_tokens: Any
    itl_chunk: HistogramSeries
    itl_token: HistogramSeries
    tpot: HistogramSeries
    e2e: HistogramSeries
    queue: HistogramSeries
    chunk_tokens: HistogramSeries


class MetricsObserver:
    """Feeds LoadgenMetrics from the runner's callbacks (all sync and cheap)."""

    def __init__(
        self,
        metrics: LoadgenMetrics,
        *,
        model: str,
        endpoint: str,
        points: int | None = None,
        spec_tokens: int | None = None,
        thinking: bool = False,
    ) -> None:
        """A RunObserver for one sweep of `points` concurrency points; `spec_tokens` (K)
        decides which truncated final chunks count as decode chunks, as in the results;
        `thinking`: the requests asked the model to think (metrics/phases.py)."""
        self.metrics = metrics
        self.spec_tokens = spec_tokens
        self.thinking = thinking
        self._run = (model, endpoint)
        self._points: dict[int, _PointSeries] = {}
        self._planned_points = points
        self._point_requests = 0
        self._point_finished = 0
        self._completed_points = 0
        self._loop_lag = metrics.loop_lag.labels()
        self._sessions = SessionObserver(metrics.sessions, self._run)
        self._in_flight = metrics.in_flight.labels(*self._run)
        self._in_flight.set(0)
        metrics.sweep_points.labels(*self._run).set(points or 0)
        metrics.sweep_points_completed.labels(*self._run).set(0)
        metrics.sweep_progress.labels(*self._run).set(0)

    def _series(self, conc: int) -> _PointSeries:
        series = self._points.get(conc)
        if series is None:
            series = self._points[conc] = self._make_series(conc)
        return series

    def _make_series(self, conc: int) -> _PointSeries:
        m, key = self.metrics, (*self._run, str(conc))
        return _PointSeries(
            ok=m.requests.labels(*key, "ok"),
            error=m.requests.labels(*key, "error"),
            # Every kind exists from the start, so "errors by kind" reads 0, not "no data".
            errors={
                kind: m.request_errors.labels(*key, kind)
                for kind in [*(k.value for k in ErrorKind), NO_TOKENS]
            },
            prompt_tokens=m.prompt_tokens.labels(*key),
            output_tokens=m.output_tokens.labels(*key),
            decode_chunks=m.decode_chunks.labels(*key),
            decode_tokens=m.decode_tokens.labels(*key),
            # Positions appear only once a draft was accepted there (no 16 zero series
            # on a server without speculative decoding).
            accepted=functools.cache(lambda p: m.decode_accepted.labels(*key, str(p))),
            ttft=m.ttft.labels(*key),
            ttfa=m.ttfa.labels(*key),
            reasoning_tokens=m.phase_tokens.labels(*key, "reasoning"),
            answer_tokens=m.phase_tokens.labels(*key, "answer"),
            itl_chunk=m.itl_chunk.labels(*key),
            itl_token=m.itl_token.labels(*key),
            tpot=m.tpot.labels(*key),
            e2e=m.e2e.labels(*key),
            queue=m.queue.labels(*key),
            chunk_tokens=m.chunk_tokens.labels(*key),
        )

    def point_started(self, conc: int, num_requests: int) -> None:
        self._series(conc)
        self._point_requests, self._point_finished = num_requests, 0
        self.metrics.target_concurrency.labels(*self._run).set(conc)
        self.metrics.point_requests.labels(*self._run, str(conc)).set(num_requests)

    def request_started(self, conc: int) -> None:
        self._in_flight.inc()

    def request_finished(self, record: RequestRecord) -> None:
        self._in_flight.dec()
        series = self._series(record.conc)
        self._point_finished += 1
        self._set_progress()
        if record.session_id is not None:
            self._sessions.request_finished(record)
        kind = failure_kind(record)
        if kind is not None:
            series.error.inc()
            series.errors[kind].inc()
            return
        series.ok.inc()
        observe_completed(series, record, self.spec_tokens)
        observe_phases(series, record, self.thinking)

    def finished(self) -> None:
        """The sweep is over (done, failed or cancelled): no target, nothing in flight."""
        self.metrics.target_concurrency.labels(*self._run).set(0)
        self._in_flight.set(0)
        self._sessions.finished()

    def session_started(self, conc: int, root: bool) -> None:
        self._sessions.session_started(root)

    def session_finished(self, conc: int, root: bool) -> None:
        self._sessions.session_finished(root)

    def _set_progress(self) -> None:
        if not self._planned_points:
            return
        within = (
            min(1.0, self._point_finished / self._point_requests) if self._point_requests else 0.0
        )
        done = min(1.0, (self._completed_points + within) / self._planned_points)
        self.metrics.sweep_progress.labels(*self._run).set(done)

    def loop_lag(self, seconds: float) -> None:
        self._loop_lag.observe(seconds)

    def point_finished(self, conc: int, result: PointResult) -> None:
        m, key = self.metrics, (*self._run, str(conc))
        if self.spec_tokens is None and result.metrics.spec_tokens is not None:
            # K found from the server's /metrics by the first point: later points then
            # count decode chunks exactly as their result files do.
            self.spec_tokens = result.metrics.spec_tokens
        self._completed_points += 1
        self._point_requests = self._point_finished = 0
        m.sweep_points_completed.labels(*self._run).set(self._completed_points)
        self._set_progress()
        for gauge, value in (
            (m.server_al, result.metrics.server_acceptance_length),
            (m.server_rate, result.metrics.server_acceptance_rate),
            (m.stream_al, result.metrics.stream_acceptance_length),
            (m.stream_rate, result.metrics.stream_acceptance_rate),
        ):
            if value is not None:  # the stream's is None when its chunks merged steps
                gauge.labels(*key).set(value)
        if result.metrics.acceptance_length is not None:
            source = result.metrics.acceptance_length_source or ""
            m.best_al.labels(*key, source).set(result.metrics.acceptance_length)
        for position, rate in enumerate(result.metrics.server_acceptance_per_position or ()):
            m.server_rate_pos.labels(*key, str(position)).set(rate)
        self._steps(key, result)
        self._roles(key, result)
        for stat in ("mean", "p50", "p75", "p90", "p95", "p99"):
            intvty = getattr(result.metrics, f"{stat}_e2e_norm_intvty")
            if intvty is not None:  # no completed request: no gauge
                m.e2e_norm_intvty.labels(*key, stat.removeprefix("p")).set(intvty)
        energy = result.energy
        if energy is not None and energy.power_valid:  # null figures set no gauge
            for gauge, value in (
                (m.gpu_power, energy.avg_power_w),
                (m.joules_per_token, energy.joules_per_output_token),
            ):
                if value is not None:
                    gauge.labels(*key).set(value)

    def _roles(self, key: tuple[str, ...], result: PointResult) -> None:
        """Each role's figures and the TTFT parts; a null figure sets no gauge."""
        m = self.metrics
        for role in result.server_metrics_by_role or ():
            for figure, value in role.figures().items():
                if value is not None:
                    m.server_role.labels(*key, role.role, figure).set(value)
        parts = result.ttft_parts
        for name, part in parts.means().items() if parts is not None else ():
            if part is not None:
                m.ttft_part.labels(*key, name).set(part)

    def accuracy_scored(self, result: AccuracyResult) -> None:
        """An accuracy point's score (orchestrate/accuracy.py), once it is written."""
        key = (*self._run, str(result.conc), result.task)
        for name, figure in (
            ("strict-match", result.strict_match),
            ("flexible-extract", result.flexible_extract),
        ):
            if figure.n:  # no questions: no figure (NaN is not a measurement)
                self.metrics.accuracy.labels(*key, name).set(figure.exact_match)

    def _steps(self, key: tuple[str, ...], result: PointResult) -> None:
        """The point's reconstructed engine steps; a null figure sets no gauge."""
        m, r = self.metrics, result.metrics
        for kind, prefix in (
            ("all", "steps_time"),
            ("decode", "steps_decode_time"),
            ("prefill", "steps_prefill_time"),
        ):
            for percentile in ("50", "90", "99"):
                ms = getattr(r, f"{prefix}_p{percentile}_ms")
                if ms is not None:
                    m.step_time.labels(*key, kind, percentile).set(ms / 1000.0)
        for gauge, value in (
            (m.steps, r.steps_observed),
            (m.engines, r.steps_engines),
            (m.stall_share, r.steps_stall_share),
        ):
            if value is not None:
                gauge.labels(*key).set(value)


def observe_phases(series: _PointSeries, record: RequestRecord, thinking: bool) -> None:
    """TTFA and the tokens of each phase of one completed request, as the results have them."""
    phases = request_phases(record, thinking)
    if not phases.separated:
        return
    if phases.ttfa_ms is not None:
        series.ttfa.observe(phases.ttfa_ms / 1e3)
    series.reasoning_tokens.inc(phases.reasoning_tokens or 0)
    series.answer_tokens.inc(phases.answer_tokens or 0)


def observe_completed(series: _PointSeries, record: RequestRecord, spec_tokens: int | None) -> None:
    """All instruments of one completed request (at least one chunk).

    Every quantity comes from the same definitions the result files use (metrics/), on
    this one record: a live series and its result field can never disagree on meaning.
    """
    arrays = PointArrays.build([record])
    samples = latency_samples(arrays)
    series.prompt_tokens.inc(record.input_len)
    series.output_tokens.inc(record.output_tokens)
    series.queue.observe(max(0, record.queue_ns) / 1e9)
    series.ttft.observe(float(samples["ttft"][0]) / 1e3)
    series.e2e.observe(float(samples["e2el"][0]) / 1e3)
    if samples["tpot"].size:
        series.tpot.observe(float(samples["tpot"][0]) / 1e3)
    gaps_ms, later = arrays.itl_per_chunk_ms()
    if gaps_ms.size == 0:
        return
    series.itl_chunk.observe_many(gaps_ms / 1e3)
    positive = later > 0
    series.itl_token.observe_many(gaps_ms[positive] / later[positive] / 1e3, later[positive])
    decode = arrays.chunk_tokens[arrays.decode_chunk_mask(spec_tokens)]
    if decode.size == 0:
        return
    series.decode_chunks.inc(int(decode.size))
    series.decode_tokens.inc(int(decode.sum()))
    series.chunk_tokens.observe_many(decode.astype(np.float64))
    for position, count in enumerate(accepted_at_position(decode, MAX_POSITIONS)):
        if count == 0:
            break
        series.accepted(position).inc(count)
