"""The sweep table: one row per point, as console text and as sweep.csv.

The columns use the median for TPOT, ITL, TTFT and interactivity (p50 = median, numpy's
linear method), and p99 beside them for TTFT and ITL. With --trials a figure is shown
`mean ±h`: its trials' mean and the half-width of that mean's 95 % interval (a pooled p99
is over all trials' requests and need not lie inside it, so it is not shown with ±).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult


def _spread_field(figure: str, name: str) -> Callable[[PointResult], float | None]:
    def read(result: PointResult) -> float | None:
        spread = result.trials.trial_spread.get(figure) if result.trials else None
        value = getattr(spread, name) if spread else None
        return value if isinstance(value, float) else None

    return read


# --trials: the headline columns whose trials' mean and CI half-width are kept beside them
_SPREAD_COLUMNS = (
    ("request_throughput", "request_throughput"),
    ("output_throughput", "output_throughput"),
    ("output_throughput_per_gpu", "output_throughput_per_gpu"),
    ("interactivity_tok_s_user", "median_interactivity_tok_s_user"),
    ("ttft_p50_ms", "median_ttft_ms"),
    ("ttft_p99_ms", "p99_ttft_ms"),
    ("itl_p50_ms", "median_itl_ms"),
    ("itl_p99_ms", "p99_itl_ms"),
    ("tpot_p50_ms", "median_tpot_ms"),
)


# CSV columns (and sweep_rows keys), each with the result field it is read from.
SWEEP_COLUMNS: tuple[tuple[str, Callable[[PointResult], Any]], ...] = (
    ("conc", lambda r: r.metrics.max_concurrency),
    ("completed", lambda r: r.metrics.completed),
    ("failed", lambda r: r.metrics.failed),
    ("duration_s", lambda r: r.metrics.duration),
    ("request_throughput", lambda r: r.metrics.request_throughput),
    ("output_throughput", lambda r: r.metrics.output_throughput),
    ("output_throughput_per_gpu", lambda r: r.metrics.output_throughput_per_gpu),
    ("total_token_throughput", lambda r: r.metrics.total_token_throughput),
    ("steady_output_throughput", lambda r: r.metrics.steady_output_throughput),
    ("interactivity_tok_s_user", lambda r: r.metrics.median_interactivity_tok_s_user),
    ("ttft_p50_ms", lambda r: r.metrics.median_ttft_ms),
    ("ttft_p99_ms", lambda r: r.metrics.p99_ttft_ms),
    # thinking phases (metrics/phases.py): null when no request's phases were told apart
    ("ttfa_p50_ms", lambda r: r.metrics.median_ttfa_ms),
    ("ttfa_p99_ms", lambda r: r.metrics.p99_ttfa_ms),
    ("reasoning_share", lambda r: r.metrics.reasoning_share),
    ("itl_p50_ms", lambda r: r.metrics.median_itl_ms),
    ("itl_p99_ms", lambda r: r.metrics.p99_itl_ms),
    ("itl_per_token_p50_ms", lambda r: r.metrics.median_itl_per_token_ms),
    ("tpot_p50_ms", lambda r: r.metrics.median_tpot_ms),
    ("e2el_p50_ms", lambda r: r.metrics.median_e2el_ms),
    ("acceptance_length", lambda r: r.metrics.acceptance_length),
    ("acceptance_length_source", lambda r: r.metrics.acceptance_length_source),
    ("golden_acceptance_curve", lambda r: r.metrics.golden_acceptance_curve),
    ("golden_acceptance_length", lambda r: r.metrics.golden_acceptance_length),
    ("golden_acceptance_drift", lambda r: r.metrics.golden_acceptance_drift),
    ("golden_acceptance_ok", lambda r: r.metrics.golden_acceptance_ok),
    # null when void (the stream's chunks merged engine steps)
    ("stream_acceptance_length", lambda r: r.metrics.stream_acceptance_length),
    ("server_acceptance_length", lambda r: r.metrics.server_acceptance_length),
    # --gpu-metrics: null without it, or when the point's power is not valid
    ("avg_power_w", lambda r: r.energy.avg_power_w if r.energy else None),
    ("joules_per_output_token", lambda r: r.energy.joules_per_output_token if r.energy else None),
    ("output_tokens_per_joule", lambda r: r.energy.output_tokens_per_joule if r.energy else None),
    ("power_valid", lambda r: r.energy.power_valid if r.energy else None),
    # --trials: how many, and for the headline figures the trials' mean and its 95 % CI
    # half-width (empty without trials; the columns above are pooled)
    ("trials", lambda r: r.trials.trials if r.trials else None),
    *(
        (f"{column}_trial_mean", _spread_field(figure, "mean"))
        for column, figure in _SPREAD_COLUMNS
    ),
    *(
        (f"{column}_ci95_half", _spread_field(figure, "ci_half_width"))
        for column, figure in _SPREAD_COLUMNS
    ),
)
# The AL cell's mark when it is the server's (the stream's merged steps, or was not
# measured), explained under the table.
SERVER_AL_MARK = " (server)"
SERVER_AL_NOTE = (
    "AL (server): from the server's spec-decode counters over the point (all "
    "its traffic); the stream's AL was not valid (or not measured), see "
    "stream_acceptance_invalid_reason in conc_<N>.json"
)
PER_REQUEST_AL_NOTE = (
    "AL (per-request): from the server's per-request stats of this point's "
    "requests (vLLM metrics.speculative_decoding); the stream's AL was not "
    "valid (or not measured), see stream_acceptance_invalid_reason"
)
# acceptance_length_source -> the mark after a server-sourced AL, and the note that explains it
AL_MARKS = {"server_per_request": " (per-request)", "server_counters": SERVER_AL_MARK}
AL_NOTES = {"server_per_request": PER_REQUEST_AL_NOTE, "server_counters": SERVER_AL_NOTE}


POWER_INVALID_NOTE = (
    "J/tok -: the point's GPU power samples are not valid (a gap over 3 s, "
    "an exporter that stopped answering...), see power_invalid_reasons in "
    "conc_<N>.json"
)


def al_mark(source: str | None) -> str:
    return AL_MARKS.get(source or "", "")


def al_notes(sources: Iterable[str | None]) -> list[str]:
    """The notes of the server sources that appear, in AL_NOTES order."""
    seen = set(sources)
    return [note for source, note in AL_NOTES.items() if source in seen]


TRIALS_NOTE = (
    "±: with --trials a cell is the trials' mean ± the half-width of its 95 % "
    "Student-t interval; the pooled figures (all trials' requests) are in "
    "conc_<N>.json and sweep.csv"
)
COLUMN_NAMES = tuple(name for name, _ in SWEEP_COLUMNS)


def sweep_rows(results: Iterable[PointResult]) -> list[dict[str, Any]]:
    """One row per point (keys SWEEP_COLUMNS), ordered by concurrency."""
    rows = [{column: read(result) for column, read in SWEEP_COLUMNS} for result in results]
    return sorted(rows, key=lambda row: row["conc"])


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Console table, one line per concurrency. Output throughput is per GPU when every row
    has it; the failed column appears only when some point had failures, J/tok (GPU
    energy per output token) only with --gpu-metrics."""
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
    ]
    if any(row.get("ttfa_p50_ms") is not None for row in rows):  # thinking phases told apart
        columns += [("TTFA p50 ms", "ttfa_p50_ms", 1), ("TTFA p99 ms", "ttfa_p99_ms", 1)]
    columns += [
        ("ITL p50 ms", "itl_p50_ms", 2),
        ("ITL p99 ms", "itl_p99_ms", 2),
        ("TPOT p50 ms", "tpot_p50_ms", 2),
        ("AL", "acceptance_length", 2),
    ]
    if any(row.get("power_valid") is not None for row in rows):  # --gpu-metrics
        columns.append(("J/tok", "joules_per_output_token", 3))
    if any(row.get("golden_acceptance_ok") is not None for row in rows):
        columns.append(("golden AL", "golden_acceptance_ok", 2))
    if any(row.get("failed") for row in rows):
        columns.append(("failed", "failed", 0))
    if any(row.get("trials") for row in rows):  # --trials: ± the 95 % CI half-width
        columns.append(("trials", "trials", 0))
    table = [[header for header, _, _ in columns]]
    table += [[_row_cell(row, key, digits) for _, key, digits in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = [
        "  ".join(text.rjust(width) for text, width in zip(line, widths, strict=True))
        for line in table
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines += al_notes(row.get("acceptance_length_source") for row in rows)
    curves = dict.fromkeys(
        row["golden_acceptance_curve"] for row in rows if row.get("golden_acceptance_curve")
    )
    lines += [f"golden AL: held to the curve {curve}" for curve in curves]
    if any(row.get("power_valid") is False for row in rows):
        lines.append(POWER_INVALID_NOTE)
    if any(row.get("trials") for row in rows):
        lines.append(TRIALS_NOTE)
    return "\n".join(lines)


def _row_cell(row: Mapping[str, Any], key: str, digits: int) -> str:
    if key == "golden_acceptance_ok":
        return _golden_cell(row)
    half, mean = row.get(f"{key}_ci95_half"), row.get(f"{key}_trial_mean")
    if half is not None and mean is not None:  # --trials: the trials' mean ± its CI
        text = f"{_cell(mean, digits)} ±{half:,.{digits}f}"
    else:
        text = _cell(row.get(key), digits)
    if key == "acceptance_length":
        return text + al_mark(row.get("acceptance_length_source"))
    return text


def _golden_cell(row: Mapping[str, Any]) -> str:
    """`2.27 ok +0.4%`, `2.27 FAIL -11.9%`, or `FAIL` when nothing could be checked."""
    verdict = "ok" if row.get("golden_acceptance_ok") else "FAIL"
    golden, drift = row.get("golden_acceptance_length"), row.get("golden_acceptance_drift")
    if golden is None:
        return verdict
    return f"{golden:.2f} {verdict}" + ("" if drift is None else f" {drift:+.1%}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def step_line(result: PointResult) -> str:
    """One line per point: the engine steps reconstructed from its arrivals."""
    m = result.metrics
    head = f"conc {result.conc} steps:"
    if m.steps_observed is None:
        return f"{head} not reconstructed ({m.steps_note or 'no figures'})"
    engines = "?" if m.steps_engines is None else str(m.steps_engines)
    share = "-" if m.steps_prefill_share is None else f"{m.steps_prefill_share:.0%}"
    stall = "-" if m.steps_stall_share is None else f"{m.steps_stall_share:.0%}"
    per_step = "-" if m.steps_requests_per_step is None else f"{m.steps_requests_per_step:.1f}"
    tokens = (
        "-" if m.steps_tokens_per_request_step is None else f"{m.steps_tokens_per_request_step:.2f}"
    )
    text = (
        f"{head} {m.steps_observed} on {engines} engine(s), k={m.steps_stream_interval}; "
        f"step p50 {_ms(m.steps_time_p50_ms)} ms (decode {_ms(m.steps_decode_time_p50_ms)}, "
        f"prefill {_ms(m.steps_prefill_time_p50_ms)}), p99 {_ms(m.steps_time_p99_ms)} ms; "
        f"{share} prefill steps; {per_step} req/step, {tokens} tok/req/step; "
        f"ITL > p90 on prefill steps: {stall} [{m.steps_stamps}]"
    )
    return text + (f" ({m.steps_note})" if m.steps_note else "")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _counts(counts: Mapping[str, int] | None) -> str:
    return ", ".join(f"{name} {n}" for name, n in (counts or {}).items()) or "none"


def phase_line(result: PointResult) -> str | None:
    """One line per point whose requests reasoned or whose phases could not be told apart
    (metrics/phases.py); None for a point with neither."""
    m = result.metrics
    if not m.phase_unseparated_requests and not m.total_reasoning_tokens:
        return None
    ttfa = f"TTFA p50 {_ms(m.median_ttfa_ms)} p99 {_ms(m.p99_ttfa_ms)} ms"
    tokens = f"reasoning {m.total_reasoning_tokens or 0} / answer {m.total_answer_tokens or 0}"
    tpot = f"{_ms(m.mean_reasoning_tpot_ms)} / {_ms(m.mean_answer_tpot_ms)}"
    al = f"{_ms(m.reasoning_acceptance_length)} / {_ms(m.answer_acceptance_length)}"
    return (
        f"conc {result.conc} thinking: TTFT p50 {_ms(m.median_ttft_ms)} ms, {ttfa}, think "
        f"mean {_ms(m.mean_think_ms)} ms; {tokens} tokens ({_share(m.reasoning_share)} "
        f"reasoning); TPOT reasoning / answer {tpot} ms; AL reasoning / answer {al}; "
        f"methods: {_counts(m.phase_methods)}; never answered {m.reasoning_only_requests}, "
        f"not told apart {m.phase_unseparated_requests}; anomalies: {_counts(m.phase_anomalies)}"
    )


def role_lines(result: PointResult) -> list[str]:
    """--server-metrics ROLE=URL: one line per point with each role's server figures, and
    one with its TTFT parts when it has them."""
    lines = []
    roles = result.server_metrics_by_role
    if roles:
        said = "; ".join(
            f"{role.role} "
            + ", ".join(
                f"{name} {'-' if value is None else f'{value:,.3g}'}"
                for name, value in role.figures().items()
            )
            for role in roles
        )
        lines.append(f"conc {result.conc} server roles: {said}")
    parts = result.ttft_parts
    if parts is not None:
        sum_ = " + ".join(f"{name} {_ms(value)}" for name, value in parts.means().items())
        lines.append(
            f"conc {result.conc} TTFT parts (ms): {sum_} = client {_ms(parts.client_mean_ttft_ms)}"
            f"; {parts.verdict}"
        )
    return lines


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """The sweep rows as CSV (header = SWEEP_COLUMNS; unknown values are empty)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMN_NAMES), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {column: "" if row.get(column) is None else row.get(column) for column in COLUMN_NAMES}
        )
    return write_atomic(Path(path), buffer.getvalue().encode())
