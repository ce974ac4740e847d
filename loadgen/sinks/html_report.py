"""`loadgen report`: one self-contained HTML file comparing runs.

Self-contained means no request leaves the page: styles inline, no script, figures as
data: URIs (report_figures), and a Content-Security-Policy that would block anything
else. Every number cell carries the exact value it shows in `data-value` (and its field
in `data-field`), so a reader, or a test, can check the page against the result files.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen import __version__
from loadgen.metrics.compare import Comparison, PointRow
from loadgen.metrics.distributions import PointDistributions
from loadgen.metrics.lossless import LosslessCheck, Verdict
from loadgen.metrics.north_star import NorthStar, StarPoint
from loadgen.metrics.timeline import TimelineBar
from loadgen.results.capacity import CapacityResult
from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult
from loadgen.results.point_metrics import PointMetrics
from loadgen.results.run_record import RunRecord
from loadgen.sinks import report_figures as figures
from loadgen.sinks.compare_files import (
    Warning_,
    accuracy_columns,
    energy_lines,
    has_energy,
    summary_lines,
    throughput_label,
    with_phases,
)
from loadgen.sinks.lossless_text import lossless_lines
from loadgen.sinks.report_capacity import capacity_text, overlay
from loadgen.sinks.report_disagg import disagg_sections
from loadgen.sinks.report_sessions import sessions_section
from loadgen.sinks.report_slices import slices_section
from loadgen.sinks.table import al_mark, sweep_rows

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body{font-family:system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:24px auto;
max-width:1200px;padding:0 16px;color:#1d232a;line-height:1.4}
h1{font-size:1.6em;margin-bottom:4px}h2{margin-top:36px;border-bottom:1px solid #ccd;
padding-bottom:4px}h3{margin:20px 0 6px}.meta{color:#556}nav a{margin-right:12px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #d5d9e0;padding:3px 8px}th{background:#f0f2f6;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.ratio{color:#556}
td.up{color:#17702f;font-weight:600}td.down{color:#a4161a;font-weight:600}
tr.differs th{background:#fff2cc}tr.warn td{background:#fff6f6}
.warnings li{margin:4px 0}.ok{color:#17702f}img{max-width:100%;height:auto}
code{background:#f0f2f6;padding:0 3px}.wide{overflow-x:auto}
"""
# The settings table: label -> its value in a run's run.json (None: not shown).
SETTINGS: tuple[tuple[str, Callable[[RunRecord], object]], ...] = (
    ("target", lambda r: r.target),
    ("base_url", lambda r: r.base_url),
    ("model", lambda r: r.server.model if r.server else None),
    ("version", lambda r: r.server.version if r.server else None),
    ("spec_decoding", lambda r: r.server.spec_decoding if r.server else None),
    ("token_source", lambda r: r.server.token_source if r.server else None),
    ("conc", lambda r: r.settings.load.conc),
    ("isl", lambda r: r.settings.workload.isl),
    ("osl", lambda r: r.settings.workload.osl),
    ("endpoint", lambda r: r.settings.target.endpoint),
    ("encoder", lambda r: r.settings.workload.encoder),
    ("thinking", lambda r: r.settings.workload.thinking),
    ("reasoning_effort", lambda r: r.settings.workload.reasoning_effort),
    ("dataset", lambda r: r.settings.workload.dataset),
    ("range_ratio", lambda r: r.settings.workload.range_ratio),
    ("prompts_per_conc", lambda r: r.settings.load.prompts_per_conc),
    ("warmup_per_conc", lambda r: r.settings.load.warmup_per_conc),
    ("request_rate", lambda r: r.settings.load.request_rate),
    ("num_gpus", lambda r: r.settings.scoring.num_gpus),
    ("spec_tokens", lambda r: r.settings.scoring.spec_tokens),
    ("sim_args", lambda r: r.settings.run.sim_args),
    ("extra_body", lambda r: r.settings.target.extra_body),
    ("temperature", lambda r: r.settings.workload.temperature),
    ("seed", lambda r: r.settings.run.seed),
    ("started", lambda r: _started(r.started_unix)),
    ("loadgen_version", lambda r: r.loadgen_version),
    ("interrupted", lambda r: r.interrupted),
)
# A ratio this far from 1 is coloured (up = the run is better, down = worse).
LOWER_IS_BETTER = frozenset(
    {"ttft_p50_ms", "ttft_p99_ms", "ttfa_p50_ms", "ttfa_p99_ms", "tpot_p50_ms", "tpot_p99_ms"}
)


@dataclass(frozen=True, slots=True)
class ReportRun:
    name: str
    path: str
    run: RunRecord | None  # run.json (None: the directory has none)
    results: Mapping[int, PointResult]  # conc -> conc_<N>.json
    distributions: Mapping[int, PointDistributions] = field(default_factory=dict)
    # points run with --slice-duration: one bar per request (report_slices.py)
    timelines: Mapping[int, Sequence[TimelineBar]] = field(default_factory=dict)
    # a --find-max directory: capacity.json and each probe's point (by its load)
    capacity: CapacityResult | None = None
    probe_points: Mapping[float, PointResult] = field(default_factory=dict)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _value(value: Any, joiner: str = ", ") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1 else f"{value:,.2f}"
    if isinstance(value, list | tuple):
        return joiner.join(map(str, value))
    return str(value)


def _num(value: float | None, digits: int, name: str, extra: str = "") -> str:
    shown = "-" if value is None else f"{value:,.{digits}f}"
    data = "" if value is None else f' data-value="{value!r}"'
    return f'<td class="num{extra}" data-field="{_e(name)}"{data}>{shown}</td>'


def _ratio_cell(row: PointRow, key: str, baseline: str) -> str:
    value = row.ratios[key]
    if row.run == baseline or value is None:
        return f'<td class="num ratio" data-field="{key}_ratio"></td>'
    better = value > 1 if key not in LOWER_IS_BETTER else value < 1
    tone = (
        ""
        if abs(value - 1) < 0.05 or key == "acceptance_length"
        else (" up" if better else " down")
    )
    if row.noise.get(key):  # --trials: the intervals overlap
        return (
            f'<td class="num ratio" data-field="{key}_ratio" data-value="{value!r}" '
            f'title="the 95 % CIs over the trials overlap">within noise (x{value:.2f})</td>'
        )
    return (
        f'<td class="num ratio{tone}" data-field="{key}_ratio" data-value="{value!r}">'
        f"x{value:.2f}</td>"
    )


def _started(unix: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix)) if unix else None


def settings_section(runs: Sequence[ReportRun]) -> str:
    head = "".join(f"<th>{_e(r.name)}</th>" for r in runs)
    rows = []
    for label, read in SETTINGS:
        values = [
            _value(read(r.run) if r.run else None, joiner=" " if label == "sim_args" else ", ")
            for r in runs
        ]
        if all(v == "-" for v in values):
            continue
        differs = ' class="differs"' if len(set(values)) > 1 else ""
        cells = "".join(f"<td>{_e(v)}</td>" for v in values)
        rows.append(f"<tr{differs}><th>{_e(label)}</th>{cells}</tr>")
    paths = "".join(f"<td><code>{_e(r.path)}</code></td>" for r in runs)
    return (
        f'<table id="settings"><tr><th>setting</th>{head}</tr>'
        f"<tr><th>results</th>{paths}</tr>{''.join(rows)}</table>"
        "<p class=meta>Highlighted rows differ between runs.</p>"
    )


def _metric_cell(row: PointRow, key: str, digits: int) -> str:
    cell = _num(row.values[key], digits, key)
    if key == "acceptance_length" and al_mark(row.acceptance_source):
        cell = cell.replace("</td>", f"{_e(al_mark(row.acceptance_source))}</td>")  # stream void
    return cell


def _comparison_table(comparison: Comparison, conc: int, warned: set[tuple[str, int]]) -> str:
    columns = {**with_phases(comparison), **accuracy_columns(comparison)}
    heads = "".join(
        f"<th>{_e(throughput_label(comparison) if k == 'throughput' else h)}</th><th>x</th>"
        for k, (h, _) in columns.items()
    )
    body = []
    for row in comparison.rows_at(conc):
        cells = "".join(
            _metric_cell(row, k, d) + _ratio_cell(row, k, comparison.baseline)
            for k, (_, d) in columns.items()
        )
        flag = " warn" if (row.run, conc) in warned else ""
        partial = "" if row.complete else " (partial)"
        body.append(
            f'<tr class="point{flag}" data-run="{_e(row.run)}" data-conc="{conc}">'
            f"<th>{_e(row.run)}{partial}</th>{cells}</tr>"
        )
    return (
        f'<h3 id="conc-{conc}">conc {conc}</h3><table class="compare" data-conc="{conc}">'
        f"<tr><th>run</th>{heads}</tr>{''.join(body)}</table>"
    )


def comparison_section(comparison: Comparison, warned: set[tuple[str, int]]) -> str:
    summary = "".join(f"<li>{_e(line)}</li>" for line in summary_lines(comparison))
    tables = "".join(_comparison_table(comparison, c, warned) for c in comparison.concs)
    return (
        f'<ul id="summary">{summary}</ul><p class=meta>x = this run / '
        f"{_e(comparison.baseline)} at the same concurrency; throughput is "
        f"<code>{_e(comparison.throughput_field)}</code>, interactivity and TTFT/TPOT "
        "p50 are medians.</p>" + tables
    )


def matched_section(comparison: Comparison) -> str:
    if not comparison.matched:
        return "<p>No two frontiers share an interactivity range.</p>"
    rows = "".join(
        f'<tr data-run="{_e(m.run)}"><th>{_e(m.run)}</th><td class=num>{m.baseline_conc}</td>'
        + _num(m.interactivity, 1, "interactivity")
        + _num(m.baseline_throughput, 1, "baseline_throughput")
        + _num(m.throughput, 1, "throughput")
        + _num(m.ratio, 2, "ratio")
        + "</tr>"
        for m in comparison.matched
    )
    base = _e(comparison.baseline)
    return (
        f'<table id="matched"><tr><th>run</th><th>{base} conc</th><th>tok/s/user</th>'
        f"<th>{base} throughput</th><th>run throughput</th>"
        f"<th>x</th></tr>{rows}</table><p class=meta>At the interactivity {base} reached "
        "at each concurrency (its Pareto frontier), the run's throughput interpolated "
        "linearly on its own frontier (never extrapolated).</p>"
    )


def warnings_section(warnings: Sequence[Warning_]) -> str:
    if not warnings:
        return (
            '<p class="ok" id="no-warnings">No warnings: client event-loop lag and CPU '
            "were within bounds and every check passed at every point.</p>"
        )
    items = "".join(
        f'<li data-run="{_e(r)}" data-conc="{c}"><b>{_e(r)} conc {c}</b>: {_e(m)}</li>'
        for r, c, m in warnings
    )
    return f'<ul class="warnings" id="warnings-list">{items}</ul>'


def _img(uri: str | None, alt: str) -> str:
    if uri is None:
        return "<p>(figures need matplotlib: <code>pip install 'loadgen[plot]'</code>)</p>"
    return f'<img alt="{_e(alt)}" src="{uri}">'


def distributions_section(runs: Sequence[ReportRun], comparison: Comparison) -> str:
    parts = []
    for conc in comparison.concs:
        by_run = {
            r.name: (i, r.distributions[conc])
            for i, r in enumerate(runs)
            if conc in r.distributions
        }
        if by_run:
            parts.append(
                _img(
                    figures.distribution_figure(conc, by_run),
                    f"TTFT and ITL distributions at conc {conc}",
                )
            )
    return "".join(parts) or "<p>No per-request records (requests_conc_N.jsonl) found.</p>"


def _stream_void_reason(metrics: PointMetrics) -> str:
    oversized = metrics.stream_acceptance_oversized_chunks
    old = f"{oversized} decode chunks carried more than K+1 tokens" if oversized else None
    return str(metrics.stream_acceptance_invalid_reason or old or "no valid stream figures")


def _acceptance_row(run: str, conc: int, metrics: PointMetrics, stream: Sequence[float]) -> str:
    label = {
        "stream": "stream",
        "server_per_request": "server per-request",
        "server_counters": "server",
    }.get(metrics.acceptance_length_source or "", "-")
    server = metrics.server_acceptance_per_position or []
    cells = "".join(
        _num(v, 3, f"stream_acceptance_per_position[{i}]") for i, v in enumerate(stream)
    )
    cells += "".join(
        _num(v, 3, f"server_acceptance_per_position[{i}]") for i, v in enumerate(server)
    )
    note = (
        (
            f'<td class=note data-field="stream_acceptance_invalid_reason">stream not shown: '
            f"{_e(_stream_void_reason(metrics))}</td>"
        )
        if not stream
        else ""
    )
    return (
        f'<tr data-run="{_e(run)}" data-conc="{conc}"><th>{_e(run)}'
        f"</th><td class=num>{conc}</td>"
        + _num(metrics.acceptance_length, 3, "acceptance_length")
        + f'<td data-field="acceptance_length_source">{label}</td>'
        + _num(metrics.server_acceptance_length, 3, "server_acceptance_length")
        + cells
        + note
        + "</tr>"
    )


def acceptance_section(runs: Sequence[ReportRun]) -> str:
    """The AL shown is the best valid source's; the stream's per-position rates only when
    its chunks are one engine step each (never a merged-steps figure above 1): when the
    stream's AL is the published one."""
    rows, series = [], []
    for index, run in enumerate(runs):
        for conc, point in run.results.items():
            metrics = point.metrics
            valid = metrics.acceptance_length_source == "stream"
            stream = (metrics.stream_acceptance_per_position or []) if valid else []
            server = metrics.server_acceptance_per_position or []
            if not stream and not server:
                continue
            if stream:
                series.append((run.name, index, conc, stream))
            rows.append(_acceptance_row(run.name, conc, metrics, stream))
    if not rows:
        return "<p>No run used speculative decoding (no acceptance figures).</p>"
    return (
        '<table id="acceptance"><tr><th>run</th><th>conc</th><th>AL</th><th>AL from</th>'
        "<th>AL server</th><th colspan=99>per position: stream (when valid), then server"
        "</th></tr>"
        + "".join(rows)
        + "</table>"
        + _img(figures.acceptance_figure(series), "acceptance per draft position")
    )


# (field, title, decimals, its value on a point)
STEP_COLUMNS: tuple[tuple[str, str, int, Callable[[PointMetrics], float | None]], ...] = (
    ("steps_observed", "steps", 0, lambda m: m.steps_observed),
    ("steps_engines", "engines", 0, lambda m: m.steps_engines),
    ("steps_stream_interval", "k", 0, lambda m: m.steps_stream_interval),
    ("steps_decode_time_p50_ms", "decode p50 ms", 2, lambda m: m.steps_decode_time_p50_ms),
    ("steps_prefill_time_p50_ms", "prefill p50 ms", 2, lambda m: m.steps_prefill_time_p50_ms),
    ("steps_time_p99_ms", "step p99 ms", 2, lambda m: m.steps_time_p99_ms),
    ("steps_prefill_share", "prefill steps", 3, lambda m: m.steps_prefill_share),
    ("steps_requests_per_step", "req/step", 1, lambda m: m.steps_requests_per_step),
    ("steps_tokens_per_request_step", "tok/req/step", 2, lambda m: m.steps_tokens_per_request_step),
    ("steps_stall_share", "ITL > p90 on prefill", 3, lambda m: m.steps_stall_share),
)


def steps_section(runs: Sequence[ReportRun]) -> str:
    """The engine steps reconstructed from each point's arrivals (docs/results.md); a
    point file from before them reads as unknown figures (the model's defaults)."""
    rows, series = [], []
    for index, run in enumerate(runs):
        points = []
        for conc, point in sorted(run.results.items()):
            m = point.metrics
            cells = "".join(_num(read(m), d, k) for k, _, d, read in STEP_COLUMNS)
            rows.append(
                f'<tr data-run="{_e(run.name)}"><th>{_e(run.name)}</th>'
                f"<td class=num>{conc}</td>{cells}"
                f'<td data-field="steps_stamps">{_e(m.steps_stamps)}</td>'
                f'<td data-field="steps_note">{_e(m.steps_note or "")}</td></tr>'
            )
            points.append(
                (
                    conc,
                    m.steps_decode_time_p50_ms,
                    m.steps_prefill_time_p50_ms,
                    m.steps_stall_share,
                )
            )
        if points:
            series.append((run.name, index, points))
    if not rows:
        return "<p>No point has engine step figures.</p>"
    head = "".join(f"<th>{_e(title)}</th>" for _, title, _, _ in STEP_COLUMNS)
    return (
        f'<table id="steps"><tr><th>run</th><th>conc</th>{head}<th>stamps</th><th>note</th>'
        "</tr>"
        + "".join(rows)
        + "</table>"
        + _img(figures.steps_figure(series), "engine step time and the ITL tail on prefill steps")
    )


def points_section(runs: Sequence[ReportRun]) -> str:
    parts = []
    for run in runs:
        rows = sweep_rows(run.results.values())
        if not rows:
            continue
        keys = list(rows[0])
        head = "".join(f"<th>{_e(k)}</th>" for k in keys)
        body = "".join(
            "<tr>"
            + "".join(
                _num(row[k], 2, k)
                if isinstance(row[k], float) or row[k] is None
                else f'<td class=num data-field="{_e(k)}">{_e(_value(row[k]))}</td>'
                for k in keys
            )
            + "</tr>"
            for row in rows
        )
        parts.append(
            f'<h3>{_e(run.name)}</h3><div class="wide"><table class="points" '
            f'data-run="{_e(run.name)}"><tr>{head}</tr>{body}</table></div>'
        )
    return "".join(parts)


def energy_sections(comparison: Comparison) -> list[tuple[str, str, str]]:
    """With --gpu-metrics runs: tokens per joule vs interactivity and the crossover."""
    if not has_energy(comparison):
        return []
    lines = [line for run in comparison.runs[1:] for line in energy_lines(comparison, run)]
    text = "".join(f"<p>{_e(line)}</p>" for line in lines)
    return [
        (
            "energy",
            "Energy: tokens per joule vs interactivity",
            _img(figures.energy_figure(comparison), "tokens per joule vs interactivity") + text,
        )
    ]


def frontier_section(runs: Sequence[ReportRun], comparison: Comparison) -> str:
    """The figure, with every --find-max run's probes and answer, and their lines."""
    searches = [(r.name, r.capacity) for r in runs if r.capacity is not None]
    overlays = [
        overlay(name, capacity, run.probe_points, comparison.throughput_field)
        for run in runs
        for name, capacity in [(run.name, run.capacity)]
        if capacity is not None
    ]
    alt = "throughput vs interactivity" + (
        " with the capacity search's probes and answer" if searches else ""
    )
    figure = figures.frontier_figure(comparison, throughput_label(comparison), overlays)
    return _img(figure, alt) + capacity_text(searches)


def north_star_section(star: NorthStar, comparison: Comparison) -> str:
    """--frontier north-star: the figure, the canonical frontier and the gated one."""

    def table(points: Sequence[StarPoint]) -> str:
        if not points:
            return "<p>None.</p>"
        rows = "".join(
            f"<tr><td>{_e(p.run)}</td><td>{p.conc}</td><td>{_e(_num1(p.e2e_norm_intvty))}</td>"
            f"<td>{_e(_num1(p.interactivity))}</td><td>{_e(_num1(p.throughput))}</td></tr>"
            for p in points
        )
        return (
            "<table><tr><th>run</th><th>conc</th><th>E2E norm. intvty p90</th>"
            f"<th>interactivity</th><th>{_e(throughput_label(comparison))}</th></tr>"
            f"{rows}</table>"
        )

    label = throughput_label(comparison)
    missing = ", ".join(f"{p.run} conc {p.conc}" for p in star.without_metric)
    return (
        _img(figures.north_star_figure(star, label), "throughput vs E2E normalized interactivity")
        + "<p>InferenceX AgentX's rule: a point is on a published frontier only if it is on "
        f"the frontier of {_e(label)} against p90 E2E normalized interactivity (every "
        "run's points as one group).</p><h3>North-Star frontier</h3>"
        + table(star.canonical)
        + "<h3>Throughput vs interactivity, gated</h3>"
        + table(star.gated)
        + (
            "<p>Left off (on the interactivity frontier, not North-Star winners):</p>"
            + table(star.dropped)
            if star.dropped
            else ""
        )
        + (f"<p class=meta>Without the metric: {_e(missing)}</p>" if missing else "")
    )


def _num1(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def lossless_section(check: LosslessCheck | None) -> str:
    """Each lane's outputs against the baseline's (metrics/lossless.py), one row per lane
    and concurrency; a flagged, unverified or unjudged (too few pairs) lane's verdict in
    bold."""
    if check is None:
        return "<p>No run kept its outputs (<code>--record-outputs</code>).</p>"
    head, *_ = lossless_lines(check)
    rows = "".join(
        f"<tr><td>{_e(lane.run)}</td><td>{lane.conc}</td><td>{_e(_pct(lane.share.value))}</td>"
        f"<td>{lane.share.pairs}</td><td>{_e(_pct(lane.floor.value if lane.floor else None))}</td>"
        f"<td>{_e(_plain(lane.divergence_median))}</td><td>{_e(_plain(lane.divergence_p10))}</td>"
        + (
            f"<td><strong>{_e(lane.label)}</strong></td></tr>"
            if lane.verdict in (Verdict.DIFFERS, Verdict.UNVERIFIED, Verdict.TOO_FEW)
            else f"<td>{_e(lane.label)}</td></tr>"
        )
        for lane in check.lanes
    )
    return (
        f"<p>{_e(head)}</p><table><tr><th>run</th><th>conc</th><th>identical</th>"
        "<th>pairs</th><th>noise floor</th><th>first divergence p50</th>"
        f"<th>p10</th><th>verdict</th></tr>{rows}</table>"
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _plain(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def render_report(
    runs: Sequence[ReportRun],
    comparison: Comparison,
    warnings: Sequence[Warning_],
    *,
    generated_unix: float,
    lossless: LosslessCheck | None = None,
    north_star: NorthStar | None = None,
) -> str:
    warned = {(r, c) for r, c, _ in warnings}
    names = ", ".join(r.name for r in runs)
    generated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(generated_unix))
    sections = [
        ("comparison", "Comparison by concurrency", comparison_section(comparison, warned)),
        ("frontier", "Throughput vs interactivity", frontier_section(runs, comparison)),
        *(
            [("north-star", "North-Star frontier", north_star_section(north_star, comparison))]
            if north_star is not None
            else []
        ),
        ("matched", "Throughput at matched interactivity", matched_section(comparison)),
        *disagg_sections(comparison.disagg),
        *energy_sections(comparison),
        ("outputs", "Outputs against the baseline", lossless_section(lossless)),
        ("warnings", "Client health and checks", warnings_section(warnings)),
        ("settings", "Run settings", settings_section(runs)),
        ("distributions", "TTFT and ITL distributions", distributions_section(runs, comparison)),
        ("acceptance", "Speculative decoding acceptance", acceptance_section(runs)),
        ("steps", "Engine steps (from the arrivals)", steps_section(runs)),
        ("slices", "Time slices and request timeline", slices_section(runs)),
        (
            "sessions",
            "Sessions and prefix caching",
            sessions_section([(r.name, r.results) for r in runs]),
        ),
        ("points", "Every point", points_section(runs)),
    ]
    nav = "".join(f'<a href="#{key}">{_e(title)}</a>' for key, title, _ in sections)
    body = "".join(
        f'<section id="s-{key}"><h2 id="{key}">{_e(title)}</h2>{content}</section>'
        for key, title, content in sections
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>loadgen report: {_e(names)}</title>'
        f"<style>{STYLE}</style></head><body><h1>loadgen report</h1>"
        f'<p class="meta">{_e(names)} &middot; baseline {_e(comparison.baseline)} &middot; '
        f"generated {_e(generated)} by loadgen {_e(__version__)}</p><nav>{nav}</nav>"
        f"{body}</body></html>\n"
    )


def write_report(
    path: Path,
    runs: Sequence[ReportRun],
    comparison: Comparison,
    warnings: Sequence[Warning_],
    *,
    generated_unix: float,
    lossless: LosslessCheck | None = None,
    north_star: NorthStar | None = None,
) -> Path:
    return write_atomic(
        path,
        render_report(
            runs,
            comparison,
            warnings,
            generated_unix=generated_unix,
            lossless=lossless,
            north_star=north_star,
        ).encode(),
    )
