"""A comparison as console text, CSV and JSON (`loadgen compare`, the end of a sweep file).

Cells show a value and, for every run after the first, its ratio to the first run's value
at the same concurrency (`568.1 x1.75`). The CSV has one row per run and concurrency
with each metric and `<metric>_ratio`; the JSON holds everything, summaries included.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from loadgen.metrics.compare import (
    ACCURACY_METRICS,
    ENERGY_METRICS,
    METRIC_FIELDS,
    PHASE_METRICS,
    STEP_METRICS,
    Comparison,
    Crossover,
    PointRow,
)
from loadgen.metrics.lossless import LosslessCheck
from loadgen.metrics.north_star import NorthStar
from loadgen.results.files import write_atomic
from loadgen.sinks import lossless_text
from loadgen.sinks.compare_disagg_text import disagg_json, disagg_lines
from loadgen.sinks.north_star_text import north_star_json
from loadgen.sinks.table import al_mark, al_notes

Warning_ = tuple[str, int, str]  # run, concurrency, message

# metric key -> (console header, decimals)
COLUMNS: Mapping[str, tuple[str, int]] = {
    "throughput": ("out tok/s", 1),
    "interactivity": ("tok/s/user", 1),
    "ttft_p50_ms": ("TTFT p50 ms", 1),
    "ttft_p99_ms": ("TTFT p99 ms", 1),
    "tpot_p50_ms": ("TPOT p50 ms", 2),
    "tpot_p99_ms": ("TPOT p99 ms", 2),
    "e2e_norm_intvty_p90": ("E2E intvty p90", 1),
    "acceptance_length": ("AL", 2),
}
# Beside TTFT, when some run's thinking phases were told apart (metrics/phases.py)
PHASE_COLUMNS: Mapping[str, tuple[str, int]] = {
    "ttfa_p50_ms": ("TTFA p50 ms", 1),
    "ttfa_p99_ms": ("TTFA p99 ms", 1),
}
# On the console only, and only when some run measured GPU energy (--gpu-metrics).
ENERGY_COLUMNS: Mapping[str, tuple[str, int]] = {"joules_per_token": ("J/tok", 3)}
# Only when some run has an accuracy point (--accuracy gsm8k) at that concurrency.
ACCURACY_COLUMNS: Mapping[str, tuple[str, int]] = {"gsm8k_strict": ("GSM8K strict", 3)}


def accuracy_columns(comparison: Comparison) -> Mapping[str, tuple[str, int]]:
    """The accuracy column beside throughput, when any run measured accuracy."""
    measured = any(
        row.values.get(k) is not None for row in comparison.rows for k in ACCURACY_METRICS
    )
    return ACCURACY_COLUMNS if measured else {}


def throughput_label(comparison: Comparison) -> str:
    return "out tok/s/GPU" if comparison.per_gpu else "out tok/s"


def number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def times(value: float | None) -> str:
    return "" if value is None else f"x{value:.2f}"


def ratio_text(row: PointRow, key: str) -> str:
    """`x1.75`, or `within noise (x1.02)` when both points' trial intervals overlap."""
    text = times(row.ratios[key])
    return f"within noise ({text})" if text and row.noise.get(key) else text


def _cell(row: PointRow, key: str, baseline: str) -> str:
    digits = {**COLUMNS, **PHASE_COLUMNS, **ENERGY_COLUMNS, **ACCURACY_COLUMNS}[key][1]
    half, mean = row.halves.get(key), row.means.get(key)
    if half is not None and mean is not None:  # --trials: the trials' mean ± its CI
        text = f"{number(mean, digits)} ±{half:,.{digits}f}"
    else:
        text = number(row.values[key], digits)
    if key == "acceptance_length":
        text += al_mark(row.acceptance_source)  # the stream's was void: the server's AL
    if row.run != baseline and row.ratios[key] is not None:
        text += f" {ratio_text(row, key)}"
    return text


def has_energy(comparison: Comparison) -> bool:
    return any(row.values[k] is not None for row in comparison.rows for k in ENERGY_METRICS)


def with_phases(comparison: Comparison) -> dict[str, tuple[str, int]]:
    """COLUMNS, with TTFA beside TTFT when any run has it."""
    if not any(row.values[k] is not None for row in comparison.rows for k in PHASE_METRICS):
        return dict(COLUMNS)
    columns: dict[str, tuple[str, int]] = {}
    for key, column in COLUMNS.items():
        columns[key] = column
        if key == "ttft_p99_ms":
            columns.update(PHASE_COLUMNS)
    return columns


def _block(comparison: Comparison, conc: int) -> list[str]:
    rows = comparison.rows_at(conc)
    columns = {
        **with_phases(comparison),
        **(ENERGY_COLUMNS if has_energy(comparison) else {}),
        **accuracy_columns(comparison),
    }
    headers = ["run"] + [
        throughput_label(comparison) if k == "throughput" else h for k, (h, _) in columns.items()
    ]
    table = [headers] + [
        [row.run + ("" if row.complete else " (partial)")]
        + [_cell(row, k, comparison.baseline) for k in columns]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    lines = [
        "  ".join(
            text.ljust(w) if i == 0 else text.rjust(w)
            for i, (text, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in table
    ]
    return [f"conc {conc}", *lines, *step_lines(comparison, conc), ""]


def _step_text(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if key == "stall_share" else f"{value:.1f}"


def step_lines(comparison: Comparison, conc: int) -> list[str]:
    """`steps run / base: decode step 12.1 -> 10.4 ms, prefill steps 31.0 -> 22.0 ms,
    stall share 84% -> 41%` per run after the baseline, when either has step figures."""
    rows = comparison.rows_at(conc)
    base = next((row for row in rows if row.run == comparison.baseline), None)
    if base is None:
        return []
    lines = []
    for row in rows:
        if row is base or all(
            row.values[k] is None and base.values[k] is None for k in STEP_METRICS
        ):
            continue
        parts = [
            f"{label} {_step_text(k, base.values[k])} -> {_step_text(k, row.values[k])}{unit}"
            for k, label, unit in (
                ("decode_step_ms", "decode step", " ms"),
                ("prefill_step_ms", "prefill steps", " ms"),
                ("stall_share", "stall share", ""),
            )
        ]
        lines.append(f"steps {base.run} -> {row.run}: {', '.join(parts)}")
    return lines


def crossover_sentence(c: Crossover) -> str:
    return (
        f"{c.ahead_below} is ahead up to conc {c.low_conc}, {c.ahead_above} from conc "
        f"{c.high_conc} on ({c.quantity} {c.run} / {c.baseline} crosses 1 near conc "
        f"{c.estimate:.0f})"
    )


def energy_lines(comparison: Comparison, run: str) -> list[str]:
    """Tokens per joule at matched concurrency and where its ratio crosses 1."""
    base = comparison.baseline
    ratios = [
        f"{row.conc} {times(row.ratios['tokens_per_joule'])}"
        for row in comparison.rows
        if row.run == run and row.ratios["tokens_per_joule"] is not None
    ]
    if not ratios:
        return []
    lines = [f"{run} / {base} output tokens per joule at matched concurrency: {', '.join(ratios)}"]
    found = [c for c in comparison.energy_crossovers if c.run == run]
    lines += [f"energy crossover: {crossover_sentence(c)}" for c in found]
    if not found:
        ahead = all(
            (row.ratios["tokens_per_joule"] or 1) >= 1 for row in comparison.rows if row.run == run
        )
        lines.append(
            f"no energy crossover: {run if ahead else base} uses fewer joules per "
            "token at every common concurrency"
        )
    return lines


def summary_lines(comparison: Comparison) -> list[str]:
    """Matched-concurrency speedups, matched-interactivity speedups and crossovers."""
    lines = []
    base = comparison.baseline
    for run in comparison.runs[1:]:
        speedups = [
            f"{row.conc} {ratio_text(row, 'throughput')}"
            for row in comparison.rows
            if row.run == run and row.ratios["throughput"] is not None
        ]
        lines.append(
            f"{run} / {base} throughput at matched concurrency: "
            f"{', '.join(speedups) or 'no common concurrency'}"
        )
        matched = [m for m in comparison.matched if m.run == run]
        lines.append(
            f"{run} / {base} throughput at {base}'s interactivity: "
            + (
                ", ".join(
                    f"{m.interactivity:,.1f} tok/s/user (conc {m.baseline_conc}) {times(m.ratio)}"
                    for m in matched
                )
                or "the frontiers share no interactivity range"
            )
        )
        found = [c for c in comparison.crossovers if c.run == run]
        for c in found:
            lines.append(f"crossover: {crossover_sentence(c)}")
        if not found and speedups:
            ahead = all(
                (row.ratios["throughput"] or 1) >= 1 for row in comparison.rows if row.run == run
            )
            lines.append(
                f"no crossover: {run if ahead else base} is ahead at every common concurrency"
            )
        lines += energy_lines(comparison, run)
    return lines


def format_comparison(
    comparison: Comparison,
    warnings: Sequence[Warning_] = (),
    workload_mismatch: str | None = None,
    lossless: LosslessCheck | None = None,
) -> str:
    head = f"baseline: {comparison.baseline} (ratios x are run / baseline at the same concurrency)"
    if any(row.halves.get(k) is not None for row in comparison.rows for k in COLUMNS):
        head += (
            "\nwith --trials: the trials' mean ± its 95 % CI half-width (ratios of the "
            "means; the pooled figures are in conc_<N>.json); 'within noise': the "
            "run's and the baseline's intervals overlap"
        )
    lines = [head, *([f"WARNING: {workload_mismatch}"] if workload_mismatch else []), ""]
    for conc in comparison.concs:
        lines += _block(comparison, conc)
    notes = al_notes(row.acceptance_source for row in comparison.rows)
    if notes:
        lines += [*notes, ""]
    lines += disagg_lines(comparison.disagg)
    lines += summary_lines(comparison)
    outputs = lossless_text.lossless_lines(lossless)
    if outputs:
        lines += ["", *outputs]
    if warnings:
        lines += ["", "warnings (numbers to check before publishing):"]
        lines += [f"  {run} conc {conc}: {message}" for run, conc, message in warnings]
    return "\n".join(lines)


def csv_rows(
    comparison: Comparison, paths: Mapping[str, str], lossless: LosslessCheck | None = None
) -> list[dict[str, Any]]:
    outputs = lossless_text.columns_by_row(lossless)
    empty = dict.fromkeys(lossless_text.COLUMNS) if lossless is not None else {}
    rows = []
    for row in comparison.rows:
        line: dict[str, Any] = {
            "conc": row.conc,
            "run": row.run,
            "path": paths.get(row.run, ""),
            "complete": row.complete,
        }
        for key in METRIC_FIELDS:
            line[key] = row.values[key]
            line[f"{key}_ratio"] = row.ratios[key]
            line[f"{key}_ci95_half"] = row.halves.get(key)
            line[f"{key}_within_noise"] = row.noise.get(key)
            line[f"{key}_trial_mean"] = row.means.get(key)
        line["acceptance_length_source"] = row.acceptance_source
        line.update(outputs.get((row.run, row.conc), empty))
        rows.append(line)
    return rows


def write_comparison_csv(
    path: Path,
    comparison: Comparison,
    paths: Mapping[str, str],
    lossless: LosslessCheck | None = None,
) -> Path:
    columns = (
        ["conc", "run", "path", "complete"]
        + [
            name
            for key in METRIC_FIELDS
            for name in (
                key,
                f"{key}_ratio",
                f"{key}_ci95_half",
                f"{key}_within_noise",
                f"{key}_trial_mean",
            )
        ]
        + ["acceptance_length_source"]
        + (list(lossless_text.COLUMNS) if lossless is not None else [])
    )
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in csv_rows(comparison, paths, lossless):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return write_atomic(path, buffer.getvalue().encode())


def comparison_json(
    comparison: Comparison,
    paths: Mapping[str, str],
    warnings: Sequence[Warning_] = (),
    workload_mismatch: str | None = None,
    lossless: LosslessCheck | None = None,
    star: NorthStar | None = None,
) -> dict[str, Any]:
    return {
        "baseline": comparison.baseline,
        "runs": [{"name": name, "path": paths.get(name, "")} for name in comparison.runs],
        "throughput_field": comparison.throughput_field,
        "metric_fields": {k: v or comparison.throughput_field for k, v in METRIC_FIELDS.items()},
        "rows": csv_rows(comparison, paths, lossless),
        "frontiers": {
            name: [asdict(p) for p in points] for name, points in comparison.frontiers.items()
        },
        "matched_interactivity": [asdict(m) for m in comparison.matched],
        "crossovers": [
            {**asdict(c), "sentence": crossover_sentence(c)} for c in comparison.crossovers
        ],
        "energy_crossovers": [
            {**asdict(c), "sentence": crossover_sentence(c)} for c in comparison.energy_crossovers
        ],
        "summary": summary_lines(comparison),
        "disaggregated": disagg_json(comparison.disagg),
        "warnings": [{"run": r, "conc": c, "message": m} for r, c, m in warnings],
        "workload_mismatch": workload_mismatch,
        "lossless": lossless_text.lossless_json(lossless),
        # --frontier north-star only
        **({"north_star": north_star_json(star)} if star is not None else {}),
    }


def write_comparison_json(
    path: Path,
    comparison: Comparison,
    paths: Mapping[str, str],
    warnings: Sequence[Warning_] = (),
    workload_mismatch: str | None = None,
    lossless: LosslessCheck | None = None,
    star: NorthStar | None = None,
) -> Path:
    data = orjson.dumps(
        comparison_json(comparison, paths, warnings, workload_mismatch, lossless, star),
        option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE,
    )
    return write_atomic(path, data)
