"""report: atomic per-point JSON, sweep rows, console table, CSV and the sweep plot."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import msgspec
import pytest

from loadgen.metrics.summary import PointContext
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.point import PointResult
from loadgen.results.store import ResultsDir
from loadgen.sinks.plot import plot_sweep
from loadgen.sinks.table import (
    COLUMN_NAMES,
    SERVER_AL_NOTE,
    SWEEP_COLUMNS,
    format_table,
    sweep_rows,
    write_csv,
)
from tests.support.fake_records import MS, failed_record, full_point, make_record


def point(conc: int, *, num_gpus: int | None = None, failures: int = 0) -> PointResult:
    """A summarized point whose step time grows with concurrency."""
    step = (2 + conc) * MS
    records: list[RequestRecord] = [
        make_record(
            i,
            start_ns=i * MS,
            offsets_ns=[step * (j + 1) for j in range(4)],
            tokens=(1, 2, 2, 3),
        )
        for i in range(conc)
    ]
    records += [failed_record(conc + i, ErrorKind.DISCONNECT) for i in range(failures)]
    ctx = PointContext(conc=conc, input_len=100, output_len=8, spec_tokens=2, num_gpus=num_gpus)
    return full_point(records, ctx)  # type: ignore[no-any-return]


def test_write_point_is_complete_json_and_leaves_no_temp(tmp_path: Path) -> None:
    result = point(4)
    path = ResultsDir(tmp_path / "results").write_point(result)
    assert path == tmp_path / "results" / "conc_4.json"
    loaded = json.loads(path.read_text())
    assert loaded.keys() == result.to_json().keys()
    assert loaded["mean_ttft_ms"] == pytest.approx(result.metrics.mean_ttft_ms)
    assert loaded["ttfts"] == pytest.approx(result.metrics.ttfts)
    assert ResultsDir(tmp_path / "results").read_point(4) == result
    assert [p.name for p in path.parent.iterdir()] == ["conc_4.json"]


def test_write_point_failure_keeps_previous_file(tmp_path: Path) -> None:
    path = ResultsDir(tmp_path).write_point(point(2))
    before = path.read_bytes()
    broken = point(2)
    broken = msgspec.structs.replace(
        broken,
        identity=msgspec.structs.replace(
            broken.identity, tokenizer_check={"unserializable": object()}
        ),
    )
    with pytest.raises(TypeError):
        ResultsDir(tmp_path).write_point(broken)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["conc_2.json"]


def test_sweep_rows_ordered_and_taken_from_results() -> None:
    results = [point(8), point(2), point(4)]
    rows = sweep_rows(results)
    assert [row["conc"] for row in rows] == [2, 4, 8]
    by_conc = {r.conc: r for r in results}
    for row in rows:
        source = by_conc[row["conc"]]
        for column, read in SWEEP_COLUMNS:
            assert row[column] == read(source), column


def test_table_one_line_per_conc_with_labelled_columns() -> None:
    rows = sweep_rows([point(2), point(4)])
    lines = format_table(rows).splitlines()
    header = lines[0]
    for label in (
        "conc",
        "req/s",
        "out tok/s",
        "tok/s/user",
        "TTFT p50 ms",
        "ITL p99 ms",
        "TPOT p50 ms",
        "AL",
    ):
        assert label in header
    assert "failed" not in header and "GPU" not in header
    assert len(lines) == 2 + len(rows)
    for line, row in zip(lines[2:], rows, strict=True):
        cells = line.split()
        assert cells[0] == str(row["conc"])
        assert cells[3] == f"{row['interactivity_tok_s_user']:,.1f}"
        assert cells[-1] == f"{row['stream_acceptance_length']:,.2f}"


def test_table_per_gpu_and_failed_columns_when_relevant() -> None:
    rows = sweep_rows([point(2, num_gpus=2), point(4, num_gpus=2, failures=3)])
    text = format_table(rows)
    assert "out tok/s/GPU" in text.splitlines()[0]
    assert text.splitlines()[0].split()[-1] == "failed"
    assert [line.split()[-1] for line in text.splitlines()[2:]] == ["0", "3"]
    assert f"{rows[0]['output_throughput_per_gpu']:,.1f}" in text.splitlines()[2]


def test_table_shows_unknown_as_dash() -> None:
    ctx = PointContext(conc=1, input_len=100, output_len=8)
    rows = sweep_rows([full_point([failed_record(0, ErrorKind.HTTP)], ctx)])
    cells = format_table(rows).splitlines()[2].split()
    # no completed request: every latency, interactivity and acceptance cell is unknown
    assert cells[3:10] == ["-"] * 7 and cells[-1] == "1"


def test_csv_round_trip(tmp_path: Path) -> None:
    rows = sweep_rows([point(2), point(4)])
    path = write_csv(tmp_path / "sweep.csv", rows)
    with path.open(newline="") as fh:
        read = list(csv.DictReader(fh))
    assert list(read[0]) == list(COLUMN_NAMES)
    for got, row in zip(read, rows, strict=True):
        assert int(got["conc"]) == row["conc"]
        assert float(got["ttft_p99_ms"]) == pytest.approx(row["ttft_p99_ms"])
        assert got["output_throughput_per_gpu"] == ""  # unknown without --num-gpus


def test_plot_writes_png(tmp_path: Path) -> None:
    path = plot_sweep(
        tmp_path / "plots" / "sweep.png", [point(2, num_gpus=8), point(4, num_gpus=8)]
    )
    assert path is not None
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000


def test_plot_without_plottable_points_is_none(tmp_path: Path) -> None:
    failed_only = full_point(
        [failed_record(0, ErrorKind.HTTP)], PointContext(conc=1, input_len=100, output_len=8)
    )
    assert plot_sweep(tmp_path / "x.png", [failed_only]) is None
    assert not (tmp_path / "x.png").exists()


def test_plot_without_matplotlib_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulates the package being absent (the optional `plot` extra not installed).
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert plot_sweep(tmp_path / "sweep.png", [point(2)]) is None
    assert not (tmp_path / "sweep.png").exists()


def test_table_marks_the_server_al_and_explains_it_once() -> None:
    def with_al(result: PointResult, length: float, source: str) -> PointResult:
        return msgspec.structs.replace(
            result,
            metrics=msgspec.structs.replace(
                result.metrics, acceptance_length=length, acceptance_length_source=source
            ),
        )

    stream = with_al(point(2), 2.5, "stream")
    server = with_al(point(4), 2.76, "server_counters")
    lines = format_table(sweep_rows([stream, server])).splitlines()
    assert lines[2].endswith(" 2.50") and lines[3].endswith(" 2.76 (server)")
    assert lines[-1] == SERVER_AL_NOTE and len(lines) == 5
    only_stream = format_table(sweep_rows([stream]))
    assert SERVER_AL_NOTE not in only_stream and "(server)" not in only_stream
