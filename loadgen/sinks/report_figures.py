"""The HTML report's figures: matplotlib SVG, returned as data: URIs to inline in the page.

SVG keeps the page sharp at any zoom and, with text drawn as paths (matplotlib's
default), needs no font from the viewer; a data: URI makes no request. Each run has one
colour throughout the report. Everything returns None when matplotlib (the `plot`
extra) is not installed: the report then has its tables only, and says so.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from loadgen.metrics.compare import Comparison
from loadgen.metrics.distributions import Distribution, PointDistributions
from loadgen.metrics.north_star import NorthStar
from loadgen.sinks.report_capacity import CapacityOverlay, draw_overlay

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def _figure(width: float, height: float) -> Figure | None:
    try:
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasSVG(figure)  # no pyplot: no global backend state, headless-safe
    return figure


def _data_uri(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode()


def _frontier_uri(figure: Figure, axes: Axes) -> str:
    """A throughput-against-interactivity plot, finished alike: grid, margins, a legend
    when anything is labelled."""
    axes.grid(True, alpha=0.3)
    axes.margins(x=0.08, y=0.1)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8)
    return _data_uri(figure)


def frontier_figure(
    comparison: Comparison, throughput_label: str, searches: Sequence[CapacityOverlay] = ()
) -> str | None:
    """Throughput against interactivity: every point of every run (labelled with its
    concurrency) and each run's Pareto frontier as a line; a --find-max run's probes
    (pass and fail marked apart) and its answer (sinks/report_capacity.py)."""
    figure = _figure(8.5, 5.5)
    if figure is None:
        return None
    axes = figure.add_subplot()
    for index, name in enumerate(comparison.runs):
        points, frontier = comparison.all_points[name], comparison.frontiers[name]
        if not points:
            continue
        axes.scatter(
            [p.interactivity for p in points],
            [p.throughput for p in points],
            color=colour(index),
            s=22,
            zorder=3,
        )
        axes.plot(
            [p.interactivity for p in frontier],
            [p.throughput for p in frontier],
            color=colour(index),
            label=f"{name} (frontier)",
            linewidth=1.8,
        )
        for p in points:
            axes.annotate(
                str(p.conc),
                (p.interactivity, p.throughput),
                fontsize=7,
                textcoords="offset points",
                xytext=(4, 4),
                color=colour(index),
            )
    axes.set_xlabel("Interactivity (tok/s/user, median)")
    axes.set_ylabel(throughput_label)
    for search in searches:
        draw_overlay(axes, search, colour(comparison.runs.index(search.run)))
    axes.set_title("Throughput vs interactivity (labels: concurrency)")
    return _frontier_uri(figure, axes)


def north_star_figure(star: NorthStar, throughput_label: str) -> str | None:
    """Throughput (per GPU) against p90 E2E normalized interactivity: every point of every
    run (labelled with its concurrency) and the North-Star frontier over all of them."""
    figure = _figure(8.5, 5.5)
    if figure is None:
        return None
    axes = figure.add_subplot()
    runs = list(dict.fromkeys(p.run for p in star.points))
    for index, run in enumerate(runs):
        mine = [p for p in star.points if p.run == run and p.e2e_norm_intvty is not None]
        axes.scatter(
            [p.e2e_norm_intvty or 0.0 for p in mine],
            [p.throughput for p in mine],
            color=colour(index),
            s=22,
            zorder=3,
            label=run,
        )
        for p in mine:
            axes.annotate(
                str(p.conc),
                (p.e2e_norm_intvty or 0.0, p.throughput),
                fontsize=7,
                textcoords="offset points",
                xytext=(4, 4),
                color=colour(index),
            )
    axes.plot(
        [p.e2e_norm_intvty or 0.0 for p in star.canonical],
        [p.throughput for p in star.canonical],
        color="black",
        linewidth=1.8,
        label="North-Star frontier",
    )
    axes.set_xlabel("E2E normalized interactivity (tok/s/user, p90)")
    axes.set_ylabel(throughput_label)
    axes.set_title("North-Star frontier (labels: concurrency)")
    return _frontier_uri(figure, axes)


def energy_figure(comparison: Comparison) -> str | None:
    """Output tokens per joule against interactivity (--gpu-metrics runs): a line per run
    through its points in concurrency order, labelled with the concurrency."""
    figure = _figure(8.5, 5.0)
    if figure is None:
        return None
    axes = figure.add_subplot()
    for index, name in enumerate(comparison.runs):
        points = [
            (row.conc, x, y)
            for row in comparison.rows
            if row.run == name
            and (x := row.values["interactivity"]) is not None
            and (y := row.values["tokens_per_joule"]) is not None
        ]
        if not points:
            continue
        axes.plot(
            [x for _, x, _ in points],
            [y for _, _, y in points],
            marker="o",
            color=colour(index),
            label=name,
            linewidth=1.5,
            markersize=4,
        )
        for conc, x, y in points:
            axes.annotate(
                str(conc),
                (x, y),
                fontsize=7,
                textcoords="offset points",
                xytext=(4, 4),
                color=colour(index),
            )
    axes.set_xlabel("Interactivity (tok/s/user, median)")
    axes.set_ylabel("output tokens per joule (all GPUs)")
    axes.set_title("Energy efficiency vs interactivity (labels: concurrency)")
    axes.grid(True, alpha=0.3)
    axes.margins(x=0.08, y=0.1)
    if axes.lines:
        axes.legend(fontsize=8)
    return _data_uri(figure)


def _cdf(axes: Axes, curve: Distribution, label: str, index: int) -> None:
    if curve.samples:
        axes.plot(
            curve.values, curve.probabilities, color=colour(index), label=label, linewidth=1.5
        )


MAX_LOG_TICKS = 6  # labelled ticks on a log axis: fit a third of the report's width


def log_ticks(low: float, high: float) -> list[float]:
    """Labelled ticks for a log axis over low..high: 1-2-5 per decade when few enough fit,
    else powers of ten (every n-th decade on a very long range). matplotlib's own choice
    labels minor ticks on axes under about two decades (2x10^1, 3x10^1, 4x10^1, ...),
    and those labels overlap in a narrow panel."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for subs in ((1.0, 2.0, 5.0), (1.0,)):
        ticks = [
            m * 10.0**k for k in range(first, last + 1) for m in subs if low <= m * 10.0**k <= high
        ]
        if len(ticks) <= MAX_LOG_TICKS:
            return ticks
    stride = math.ceil(len(ticks) / MAX_LOG_TICKS)
    return ticks[::stride]


def tick_label(value: float) -> str:
    """Short enough for six to a narrow panel: 500, 2k, 200k, 1M."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _log_x(axes: Axes, curves: Sequence[Distribution]) -> None:
    low = [float(c.values[0]) for c in curves if c.samples and c.values[0] > 0]
    high = [float(c.values[-1]) for c in curves if c.samples]
    if low and high and max(high) / min(low) > 30:  # long tails: a linear axis hides the body
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

        axes.set_xscale("log")
        axes.xaxis.set_major_locator(FixedLocator(log_ticks(min(low), max(high))))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: tick_label(value)))
        axes.xaxis.set_minor_formatter(NullFormatter())  # minor ticks stay, unlabelled


def distribution_figure(
    conc: int, by_run: Mapping[str, tuple[int, PointDistributions]]
) -> str | None:
    """TTFT, ITL per chunk and ITL per token as CDFs at one concurrency, a line per run
    (by_run: name -> (colour index, distributions))."""
    figure = distribution_plot(conc, by_run)
    return None if figure is None else _data_uri(figure)


def distribution_plot(
    conc: int, by_run: Mapping[str, tuple[int, PointDistributions]]
) -> Figure | None:
    figure = _figure(11.0, 3.4)
    if figure is None:
        return None
    panels: list[tuple[str, Any]] = [
        ("TTFT (ms)", lambda d: d.ttft_ms),
        ("ITL per chunk (ms)", lambda d: d.itl_ms),
        ("ITL per token (ms)", lambda d: d.itl_per_token_ms),
    ]
    for number, (title, pick) in enumerate(panels, 1):
        axes = figure.add_subplot(1, 3, number)
        curves = [pick(d) for _, d in by_run.values()]
        for name, (index, dists) in by_run.items():
            _cdf(axes, pick(dists), name, index)
        _log_x(axes, curves)
        axes.set_xlabel(title)
        axes.set_ylabel("fraction of samples" if number == 1 else "")
        axes.set_ylim(0, 1.02)
        axes.grid(True, alpha=0.3, which="both")
        if number == 1 and axes.lines:
            axes.legend(fontsize=8, loc="lower right")
    figure.suptitle(f"conc {conc}: cumulative distributions", fontsize=10)
    return figure


def acceptance_figure(series: Sequence[tuple[str, int, int, Sequence[float]]]) -> str | None:
    """Stream acceptance rate per draft position: one line per (run, concurrency);
    series entries are (run, colour index, conc, per-position rates)."""
    if not series:
        return None
    figure = _figure(7.0, 4.0)
    if figure is None:
        return None
    axes = figure.add_subplot()
    concs = sorted({conc for _, _, conc, _ in series})
    for run, index, conc, rates in series:
        alpha = 0.35 + 0.65 * (concs.index(conc) + 1) / len(concs)
        axes.plot(
            range(1, len(rates) + 1),
            rates,
            marker="o",
            color=colour(index),
            alpha=alpha,
            label=f"{run} conc {conc}",
        )
    axes.set_xlabel("draft position")
    axes.set_ylabel("acceptance rate (stream)")
    axes.set_ylim(0, 1.02)
    axes.set_xticks(range(1, max(len(rates) for *_, rates in series) + 1))
    axes.grid(True, alpha=0.3)
    if len(series) <= 12:
        axes.legend(fontsize=7, ncol=max(1, math.ceil(len(series) / 6)))
    axes.set_title("Acceptance per draft position (darker: higher concurrency)")
    return _data_uri(figure)


StepSeries = tuple[str, int, Sequence[tuple[int, float | None, float | None, float | None]]]


def steps_figure(series: Sequence[StepSeries]) -> str | None:
    """Engine steps reconstructed per point: decode-only and prefill step time p50 by
    concurrency (left), and the share of the ITL gaps above p90 on prefill steps (right);
    series entries are (run, colour index, [(conc, decode ms, prefill ms, stall share)])."""
    if not series:
        return None
    figure = _figure(9.0, 3.6)
    if figure is None:
        return None
    times, stalls = figure.subplots(1, 2)
    for run, index, points in series:
        concs = [p[0] for p in points]
        for column, style, kind in ((1, "-", "decode"), (2, "--", "prefill")):
            values = [p[column] for p in points]
            times.plot(
                concs,
                [math.nan if v is None else v for v in values],
                style,
                marker="o",
                color=colour(index),
                label=f"{run} {kind}",
            )
        stalls.plot(
            concs,
            [math.nan if p[3] is None else 100 * p[3] for p in points],
            marker="o",
            color=colour(index),
            label=run,
        )
    for axes in (times, stalls):
        axes.set_xscale("log", base=2)
        axes.set_xlabel("concurrency")
        axes.grid(True, alpha=0.3)
    times.set_ylabel("step time p50 (ms)")
    times.set_title("Decode-only (solid) and prefill (dashed) steps")
    stalls.set_ylabel("% of ITL gaps > p90")
    stalls.set_ylim(0, 102)
    stalls.set_title("ITL tail on prefill steps")
    times.legend(fontsize=7)
    return _data_uri(figure)
