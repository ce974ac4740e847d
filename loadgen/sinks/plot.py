"""sweep.png: output throughput against interactivity, one marker per concurrency."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult
from loadgen.sinks.table import sweep_rows


def plot_sweep(path: Path, results: Iterable[PointResult]) -> Path | None:
    """PNG of output throughput (per GPU when known) against interactivity (median
    tok/s/user), one labelled marker per concurrency. None when matplotlib is not
    installed (it is the optional `plot` extra) or no point has both values."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    rows = sweep_rows(results)
    per_gpu = all(row["output_throughput_per_gpu"] is not None for row in rows)
    y_key = "output_throughput_per_gpu" if per_gpu else "output_throughput"
    points = [
        (row["interactivity_tok_s_user"], row[y_key], row["conc"])
        for row in rows
        if row["interactivity_tok_s_user"] is not None and row[y_key] is not None
    ]
    if not points:
        return None
    figure = Figure(figsize=(8, 5.5), layout="constrained")
    FigureCanvasAgg(figure)  # Agg without pyplot: no global backend state, headless-safe
    axes = figure.add_subplot()
    xs, ys, _ = zip(*points, strict=True)
    axes.plot(xs, ys, marker="o", linestyle="-")
    for x, y, conc in points:
        axes.annotate(f"conc {conc}", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    axes.set_xlabel("Interactivity (tok/s/user, median)")
    axes.set_ylabel(
        "Output throughput per GPU (tok/s/GPU)" if per_gpu else "Output throughput (tok/s)"
    )
    axes.set_title("Throughput vs interactivity, one marker per concurrency")
    axes.grid(True, alpha=0.3)
    axes.margins(x=0.1, y=0.1)  # room for the labels of the outermost markers
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=120)
    return write_atomic(Path(path), image.getvalue())
