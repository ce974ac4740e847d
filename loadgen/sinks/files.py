"""Result files and sweep summaries: per-point JSON, console table, CSV, throughput plot.

Files are written atomically (temp file in the same directory, fsync, os.replace), so a
crash or Ctrl-C leaves either the previous file or the new one, never half of one.
The sweep columns use the median for TPOT, ITL, TTFT and interactivity (p50 = median,
numpy's linear method), and p99 beside them for TTFT and ITL.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

# CSV columns (and sweep_rows keys): column -> result field it is taken from.
SWEEP_COLUMNS: Mapping[str, str] = {
    "conc": "max_concurrency",
    "completed": "completed",
    "failed": "failed",
    "duration_s": "duration",
    "request_throughput": "request_throughput",
    "output_throughput": "output_throughput",
    "output_throughput_per_gpu": "output_throughput_per_gpu",
    "total_token_throughput": "total_token_throughput",
    "steady_output_throughput": "steady_output_throughput",
    "interactivity_tok_s_user": "median_interactivity_tok_s_user",
    "ttft_p50_ms": "median_ttft_ms",
    "ttft_p99_ms": "p99_ttft_ms",
    "itl_p50_ms": "median_itl_ms",
    "itl_p99_ms": "p99_itl_ms",
    "itl_per_token_p50_ms": "median_itl_per_token_ms",
    "tpot_p50_ms": "median_tpot_ms",
    "e2el_p50_ms": "median_e2el_ms",
    "stream_acceptance_length": "stream_acceptance_length",
    "server_acceptance_length": "server_acceptance_length",
}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes) -> Path:
    """Readers see the old file or the new one, never a torn one (rename is atomic).

    Readable like any other output (0666 less the umask): mkstemp's 0600 would hide
    results from the rest of a team on a shared volume.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def write_point(results_dir: Path, result: Mapping[str, Any]) -> Path:
    """Write one point's result as results_dir/conc_<N>.json (N = max_concurrency)."""
    data = orjson.dumps(
        dict(result),
        option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE,
    )
    return write_atomic(Path(results_dir) / f"conc_{result['max_concurrency']}.json", data)


def sweep_rows(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per point (keys SWEEP_COLUMNS), ordered by concurrency."""
    rows = [
        {column: result.get(field) for column, field in SWEEP_COLUMNS.items()} for result in results
    ]
    return sorted(rows, key=lambda row: row["conc"])


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Console table, one line per concurrency. Output throughput is per GPU when every row
    has it; the failed column appears only when some point had failures."""
    per_gpu = bool(rows) and all(row.get("output_throughput_per_gpu") is not None for row in rows)
    columns: list[tuple[str, str, int]] = [  # header, row key, decimals
        ("conc", "conc", 0),
        ("req/s", "request_throughput", 2),
        (
            "out tok/s/GPU" if per_gpu else "out tok/s",
            "output_throughput_per_gpu" if per_gpu else "output_throughput",
            1,
        ),
        ("tok/s/user", "interactivity_tok_s_user", 1),
        ("TTFT p50 ms", "ttft_p50_ms", 1),
        ("TTFT p99 ms", "ttft_p99_ms", 1),
        ("ITL p50 ms", "itl_p50_ms", 2),
        ("ITL p99 ms", "itl_p99_ms", 2),
        ("TPOT p50 ms", "tpot_p50_ms", 2),
        ("AL", "stream_acceptance_length", 2),
    ]
    if any(row.get("failed") for row in rows):
        columns.append(("failed", "failed", 0))
    table = [[header for header, _, _ in columns]]
    table += [[_cell(row.get(key), digits) for _, key, digits in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = [
        "  ".join(text.rjust(width) for text, width in zip(line, widths, strict=True))
        for line in table
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """The sweep rows as CSV (header = SWEEP_COLUMNS; unknown values are empty)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(SWEEP_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {column: "" if row.get(column) is None else row.get(column) for column in SWEEP_COLUMNS}
        )
    return write_atomic(Path(path), buffer.getvalue().encode())


def plot_sweep(path: Path, results: Iterable[Mapping[str, Any]]) -> Path | None:
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
