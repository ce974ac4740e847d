"""The report's log-scaled latency axes: labelled ticks never overlap. Rendered by
matplotlib's own Agg renderer (the report's SVG draws text as paths, so a browser cannot
read the labels back): each label's drawn extent is compared with its neighbour's.

matplotlib's default labels minor ticks on an axis under about two decades
(2x10^1, 3x10^1, 4x10^1, ...): TTFT from 12 to 400 ms overlapped so in the report.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from loadgen.metrics.distributions import PointDistributions, quantile_curve
from loadgen.sinks.report_figures import MAX_LOG_TICKS, distribution_plot, log_ticks, tick_label

RANGES = [
    (lo, lo * ratio)
    for lo in (0.05, 1.0, 12.0, 40.0, 150.0, 2500.0)
    for ratio in (31, 80, 300, 3000, 1e5)
]


def drawn_labels(low: float, high: float) -> list[list[tuple[str, float, float]]]:
    """Per panel: (text, left, right) of each tick label drawn inside the axis."""
    curve = quantile_curve(np.geomspace(low, high, 400))
    dists = PointDistributions(curve, curve, curve)
    figure = distribution_plot(8, {"a": (0, dists), "b": (1, dists)})
    assert figure is not None
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # type: ignore[no-untyped-call]  # matplotlib ships no hints for it
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    panels = []
    for axes in figure.axes:
        assert axes.get_xscale() == "log"
        left, right = axes.get_xlim()
        boxes = [
            (t.get_text(), t.get_window_extent(renderer))
            for t in axes.get_xticklabels(which="both")
            if t.get_visible() and t.get_text() and left <= t.get_position()[0] <= right
        ]
        panels.append(
            sorted(((text, box.x0, box.x1) for text, box in boxes), key=lambda label: label[1])
        )
    return panels


@pytest.mark.parametrize(("low", "high"), RANGES)
def test_log_axis_tick_labels_never_overlap(low: float, high: float) -> None:
    for labels in drawn_labels(low, high):
        assert 2 <= len(labels) <= MAX_LOG_TICKS, labels
        for (text, _, right), (after, left, _) in itertools.pairwise(labels):
            assert right < left, f"{text!r} overlaps {after!r} on {low:g}..{high:g} ms"


def test_the_range_that_overlapped_gets_1_2_5_ticks() -> None:
    assert log_ticks(12, 400) == [20, 50, 100, 200]
    assert [label for label, *_ in drawn_labels(12, 400)[0]] == ["20", "50", "100", "200"]
    assert log_ticks(1, 1e6) == [1, 100, 10_000, 1_000_000]  # every other decade
    assert [tick_label(v) for v in (0.5, 500, 2000, 200_000, 1e6)] == [
        "0.5",
        "500",
        "2k",
        "200k",
        "1M",
    ]
