"""The report's time slices and request timelines (points run with `--slice-duration`).

Per concurrency: the slices of every run that has them on one figure (output throughput,
TTFT p50/p99, requests in flight, server KV usage, against time into the point), then a
request timeline per run (one bar per request: TTFT and decode in two colours, failed
requests in grey, as vLLM's `--plot-timeline`), then each run's slice figures as a table
whose cells carry their exact values (`data-field`/`data-value`), as the other tables do.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from loadgen.metrics.timeline import TimelineBar
from loadgen.results.point import PointResult, SliceMetrics
from loadgen.sinks.report_figures import _data_uri, _figure, colour
from loadgen.wording import counted

TTFT_COLOUR, DECODE_COLOUR, FAILED_COLOUR = "#ff7f0e", "#1f77b4", "#9a9a9a"
COLUMNS = (
    ("start_s", 2),
    ("output_throughput", 1),
    ("request_throughput", 2),
    ("p50_ttft_ms", 1),
    ("p99_ttft_ms", 1),
    ("p50_itl_ms", 2),
    ("p99_itl_ms", 2),
    ("in_flight_mean", 2),
    ("in_flight_max", 0),
    ("kv_cache_usage_mean", 3),
)


class SlicedRun(Protocol):
    """What the section reads of a report run (html_report.ReportRun)."""

    @property
    def name(self) -> str: ...
    @property
    def results(self) -> Mapping[int, PointResult]: ...
    @property
    def timelines(self) -> Mapping[int, Sequence[TimelineBar]]: ...


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def slices_figure(
    conc: int, by_run: Mapping[str, tuple[int, Sequence[SliceMetrics]]]
) -> str | None:
    figure = _figure(11.0, 6.0)
    if figure is None:
        return None
    panels = (
        ("output tok/s", ("output_throughput",)),
        ("TTFT ms (p50 solid, p99 dashed)", ("p50_ttft_ms", "p99_ttft_ms")),
        ("requests in flight (mean)", ("in_flight_mean",)),
        ("server KV-cache usage", ("kv_cache_usage_mean",)),
    )
    for number, (title, names) in enumerate(panels, 1):
        axes = figure.add_subplot(2, 2, number)
        for run, (index, slices) in by_run.items():
            x = [s.start_s + s.duration_s / 2 for s in slices]
            for name, style in zip(names, ("-", "--"), strict=False):
                y = [getattr(s, name) for s in slices]
                y = [float("nan") if v is None else v for v in y]
                axes.plot(
                    x,
                    y,
                    style,
                    color=colour(index),
                    marker=".",
                    label=run if style == "-" else None,
                )
        axes.set_title(title, fontsize=9)
        axes.set_xlabel("seconds into the point (slice middle)", fontsize=8)
        axes.grid(True, alpha=0.3)
        if number == 1 and axes.lines:
            axes.legend(fontsize=8)
    figure.suptitle(f"conc {conc}: time slices", fontsize=10)
    return _data_uri(figure)


def timeline_figure(run: str, conc: int, bars: Sequence[TimelineBar]) -> str | None:
    figure = _figure(11.0, 4.0)
    if figure is None or not bars:
        return None
    axes = figure.add_subplot()
    done = [
        (i, b.start_s, b.first_token_s, b.end_s)
        for i, b in enumerate(bars)
        if b.ok and b.first_token_s is not None
    ]
    failed = [(i, b) for i, b in enumerate(bars) if not b.ok]
    # rasterized: thousands of bars stay a small image inside the SVG
    if done:
        rows, starts, firsts, ends = zip(*done, strict=True)
        axes.barh(
            rows,
            [f - s for s, f in zip(starts, firsts, strict=True)],
            left=starts,
            height=1.0,
            color=TTFT_COLOUR,
            label="TTFT",
            rasterized=True,
        )
        axes.barh(
            rows,
            [e - f for f, e in zip(firsts, ends, strict=True)],
            left=firsts,
            height=1.0,
            color=DECODE_COLOUR,
            label="decode",
            rasterized=True,
        )
    if failed:
        axes.barh(
            [i for i, _ in failed],
            [b.end_s - b.start_s for _, b in failed],
            left=[b.start_s for _, b in failed],
            height=1.0,
            color=FAILED_COLOUR,
            label="failed",
            rasterized=True,
        )
    axes.set_xlabel("seconds into the point")
    axes.set_ylabel("request (send order)")
    axes.invert_yaxis()  # the first request on top: the bars run down to the right
    axes.legend(fontsize=8, loc="upper right")
    axes.set_title(
        f"{run}, conc {conc}: request timeline ({counted(len(bars), 'request')})", fontsize=10
    )
    return _data_uri(figure)


def _img(uri: str | None, alt: str) -> str:
    if uri is None:
        return "<p>(figures need matplotlib)</p>"
    return f'<img alt="{_e(alt)}" src="{uri}">'


def _cell(name: str, value: float | int | None, digits: int) -> str:
    if value is None:
        return f'<td class="num" data-field="{name}">-</td>'
    return f'<td class="num" data-field="{name}" data-value="{value!r}">{value:,.{digits}f}</td>'


def _table(run: str, conc: int, slices: Sequence[SliceMetrics]) -> str:
    head = "".join(f"<th>{_e(name)}</th>" for name, _ in COLUMNS)
    rows = "".join(
        f'<tr data-slice="{k}">' + "".join(_cell(n, getattr(s, n), d) for n, d in COLUMNS) + "</tr>"
        for k, s in enumerate(slices)
    )
    return (
        f'<div class="wide"><table class="slices" data-run="{_e(run)}" '
        f'data-conc="{conc}"><tr>{head}</tr>{rows}</table></div>'
    )


def slices_section(runs: Sequence[SlicedRun]) -> str:
    concs = sorted({c for r in runs for c, p in r.results.items() if p.slices})
    if not concs:
        return (
            "<p>No point has time slices: run with <code>--slice-duration S</code> for "
            "per-slice figures and a request timeline.</p>"
        )
    parts = []
    for conc in concs:
        by_run = {
            r.name: (i, r.results[conc].slices or [])
            for i, r in enumerate(runs)
            if conc in r.results and r.results[conc].slices
        }
        parts.append(
            f'<h3 id="slices-{conc}">conc {conc}</h3>'
            + _img(slices_figure(conc, by_run), f"time slices at conc {conc}")
        )
        for run in runs:
            if run.name not in by_run:
                continue
            bars = run.timelines.get(conc, ())
            if bars:
                parts.append(
                    _img(
                        timeline_figure(run.name, conc, bars),
                        f"request timeline of {run.name} at conc {conc}",
                    )
                )
            parts.append(_table(run.name, conc, by_run[run.name][1]))
    return "".join(parts)
