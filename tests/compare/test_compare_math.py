"""The comparison's arithmetic on hand-made points: frontier, interpolation, crossover,
trust warnings, and the reading of result directories and trees."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.compare.inputs import expand, load_runs
from loadgen.errors import UsageError
from loadgen.metrics.compare import (
    FrontierPoint,
    RunInput,
    compare,
    crossovers,
    interpolate,
    pareto_frontier,
)
from loadgen.metrics.trust import point_warnings, stamp_warnings
from loadgen.results.point import PointResult, point_from_json
from tests.support.fake_records import point_file


def result(conc: int, throughput: float, interactivity: float, **extra: Any) -> dict[str, Any]:
    return {
        "max_concurrency": conc,
        "output_throughput": throughput,
        "median_interactivity_tok_s_user": interactivity,
        "median_ttft_ms": 10.0 * conc,
        "p99_ttft_ms": 20.0 * conc,
        "median_tpot_ms": 1000 / interactivity,
        "p99_tpot_ms": 1100 / interactivity,
        "stream_acceptance_length": None,
        **extra,
    }


def typed(fields: dict[str, Any]) -> PointResult:
    """A whole point (point_file's) with `fields`, read as compare reads a file."""
    return point_from_json(point_file(fields), "test")


def point(conc: int, throughput: float, interactivity: float, **extra: Any) -> PointResult:
    return typed(result(conc, throughput, interactivity, **extra))


# --gpu-metrics: the energy group's fields (a point with them has the group)
ENERGY: dict[str, Any] = {
    "power_valid": True,
    "power_invalid_reasons": [],
    "energy_source": "counter",
    "gpu_metrics_interval_s": 1.0,
    "power_num_gpus": 1,
    "avg_power_w": None,
    "avg_total_gpu_power_w": None,
    "total_gpu_energy_j": None,
    "joules_per_input_token": None,
    "joules_per_total_token": None,
    "joules_per_request": None,
    "gpu_energy": [],
}


def test_pareto_frontier_drops_dominated_points() -> None:
    points = [
        FrontierPoint(1, 100, 100),
        FrontierPoint(2, 90, 180),
        FrontierPoint(4, 80, 170),
        FrontierPoint(8, 50, 300),
        FrontierPoint(16, 20, 290),
    ]
    assert [p.conc for p in pareto_frontier(points)] == [8, 2, 1]


def test_interpolation_is_linear_between_frontier_points_and_never_extrapolates() -> None:
    frontier = pareto_frontier([FrontierPoint(8, 50, 300), FrontierPoint(2, 90, 180)])
    assert interpolate(frontier, 50) == 300 and interpolate(frontier, 90) == 180
    assert interpolate(frontier, 70) == pytest.approx(240)
    assert interpolate(frontier, 49.9) is None and interpolate(frontier, 90.1) is None


def test_crossover_is_found_and_placed_in_log_space() -> None:
    [found] = crossovers("mtp", "base", [(1, 1.75), (8, 1.38), (32, 0.63)])
    assert (found.low_conc, found.high_conc) == (8, 32)
    assert (found.ahead_below, found.ahead_above) == ("mtp", "base")
    t = math.log(1.38) / (math.log(1.38) - math.log(0.63))
    assert found.estimate == pytest.approx(math.exp(math.log(8) + t * math.log(4)))
    assert crossovers("mtp", "base", [(1, 1.2), (4, 1.1)]) == []
    back = crossovers("x", "base", [(1, 0.5), (4, 1.0), (16, 2.0)])  # 1.0 is nobody's lead
    assert [(c.low_conc, c.high_conc, c.ahead_below) for c in back] == [(1, 16, "base")]


def test_compare_ratios_matched_interactivity_and_per_gpu() -> None:
    base = RunInput("base", {1: point(1, 100, 100), 8: point(8, 600, 75), 32: point(32, 1600, 50)})
    mtp = RunInput(
        "mtp",
        {
            1: point(1, 175, 175),
            8: point(8, 900, 112.5),
            32: point(32, 1000, 31.25),
            64: point(64, 1200, 18.75),
        },
    )
    comparison = compare([base, mtp])
    assert comparison.concs == (1, 8, 32, 64) and comparison.throughput_field == "output_throughput"
    rows = {(r.run, r.conc): r for r in comparison.rows}
    assert rows[("mtp", 1)].ratios["throughput"] == 1.75
    assert rows[("mtp", 8)].ratios["interactivity"] == 1.5
    assert rows[("mtp", 64)].ratios["throughput"] is None  # the baseline has no conc 64
    assert rows[("base", 8)].ratios["ttft_p50_ms"] == 1.0
    [cross] = comparison.crossovers
    assert (cross.low_conc, cross.high_conc) == (8, 32)
    # at 75 tok/s/user: base measured 600; mtp between (31.25, 1000) and (112.5, 900)
    at_75 = next(m for m in comparison.matched if m.interactivity == 75)
    expected = 1000 + (75 - 31.25) / (112.5 - 31.25) * (900 - 1000)
    assert at_75.throughput == pytest.approx(expected) and at_75.baseline_throughput == 600
    assert at_75.ratio == pytest.approx(expected / 600) and at_75.baseline_conc == 8
    # at the baseline's other levels: 50 is inside mtp's frontier, 100 too (up to 175)
    assert [m.baseline_conc for m in comparison.matched] == [32, 8, 1]
    with_gpus = compare(
        [
            RunInput("a", {1: point(1, 80, 10, output_throughput_per_gpu=10)}),
            RunInput("b", {1: point(1, 80, 10, output_throughput_per_gpu=20)}),
        ]
    )
    assert with_gpus.per_gpu and with_gpus.rows[1].ratios["throughput"] == 2.0


def test_trust_warnings_flag_a_lagging_or_busy_client_and_failed_checks() -> None:
    clean: dict[str, Any] = {
        "client_loop_lag_p99_ms": 0.4,
        "median_itl_ms": 20.0,
        "client_cpu_seconds": 1.0,
        "duration": 10.0,
        "complete": True,
        "failed": 0,
    }
    assert point_warnings(typed(clean)) == []
    lagging = point_warnings(typed({**clean, "client_loop_lag_p99_ms": 6.0}))
    assert len(lagging) == 1 and "loop lag p99 6.00 ms (30% of the median ITL" in lagging[0]
    # Kernel stamps are not moved by the loop: no lag warning unless some were read stamps.
    kernel = {**clean, "client_loop_lag_p99_ms": 6.0, "arrival_stamp_sources": {"kernel": 9}}
    assert point_warnings(typed(kernel)) == []
    mixed = {**kernel, "arrival_stamp_sources": {"kernel": 9, "read": 1}}
    assert len(point_warnings(typed(mixed))) == 1
    busy = point_warnings(typed({**clean, "client_cpu_seconds": 9.5}))
    assert len(busy) == 1 and "95% of a CPU core" in busy[0]
    broken = point_warnings(
        typed(
            {
                **clean,
                "complete": False,
                "failed": 2,
                "num_prompts": 10,
                "errors_by_kind": {"http": 2, "timeout": 0},
                "approximate": True,
                "stream_acceptance_oversized_chunks": 3,
            }
        )
    )
    assert [w.split(" ")[0] for w in broken] == ["point", "2", "token", "3"]
    assert "http 2" in broken[1] and "timeout" not in broken[1]


def test_read_stamps_beside_kernel_stamps_are_flagged_per_point() -> None:
    kernel = typed({"arrival_stamp_sources": {"kernel": 4}})
    read = typed({"arrival_stamp_sources": {"read": 4}})
    old = typed({"arrival_stamp_sources": {"read": 2}})  # e.g. an https run's
    assert stamp_warnings({"a": {4: kernel}, "b": {4: kernel}}) == []
    assert stamp_warnings({"a": {4: read}, "b": {4: old}}) == []  # alike: nothing to say
    flagged = stamp_warnings(
        {
            "new": {4: kernel, 8: kernel},
            "old": {4: old, 8: read},
            "tls": {4: typed({"arrival_stamp_sources": {"kernel": 3, "read": 1}})},
        }
    )
    assert [(run, conc) for run, conc, _ in flagged] == [("old", 4), ("old", 8), ("tls", 4)]
    assert "kernel-stamped new" in flagged[0][2]
    # no request completed: nothing was stamped
    empty = typed({"arrival_stamp_sources": {}})
    assert stamp_warnings({"new": {4: kernel}, "failed": {4: empty}}) == []


def write_run(path: Path, *points: dict[str, Any]) -> None:
    path.mkdir(parents=True)
    for point in points:
        (path / f"conc_{point['max_concurrency']}.json").write_bytes(
            orjson.dumps(point_file(point))
        )


def test_trees_expand_to_their_lanes_in_the_files_order(tmp_path: Path) -> None:
    write_run(tmp_path / "tree" / "zeta", result(1, 10, 10))
    write_run(tmp_path / "tree" / "alpha", result(1, 20, 10))
    (tmp_path / "tree" / "lanes.json").write_bytes(
        orjson.dumps(
            {
                "lanes": [
                    {"name": "zeta", "dir": "zeta"},
                    {"name": "alpha", "dir": "alpha"},
                    {"name": "never-ran", "dir": "never-ran"},
                ]
            }
        )
    )
    assert [name for name, _ in expand([tmp_path / "tree"])] == ["zeta", "alpha"]
    (tmp_path / "tree" / "lanes.json").unlink()
    assert [name for name, _ in expand([tmp_path / "tree"])] == ["alpha", "zeta"]
    write_run(tmp_path / "other" / "zeta", result(1, 30, 10))
    runs = load_runs([tmp_path / "tree" / "zeta", tmp_path / "other" / "zeta"])
    assert [r.name for r in runs] == [
        str(tmp_path / "tree" / "zeta"),
        str(tmp_path / "other" / "zeta"),
    ]
    assert runs[1].results[1].metrics.output_throughput == 30


def test_unreadable_inputs_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        expand([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no results here"):
        expand([tmp_path / "empty"])
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "conc_4.json").write_text('{"max_concurrency": 4,')
    with pytest.raises(UsageError, match=r"conc_4\.json: not valid JSON"):
        load_runs([tmp_path / "torn"])
    (tmp_path / "torn" / "conc_4.json").write_text('{"max_concurrency": 4}')  # minimal
    with pytest.raises(UsageError, match=r"conc_4\.json: missing field `num_prompts`"):
        load_runs([tmp_path / "torn"])
    (tmp_path / "torn" / "conc_4.json").write_bytes(orjson.dumps([point_file({})]))
    with pytest.raises(UsageError, match=r"conc_4\.json: not a loadgen point result \(a JSON list"):
        load_runs([tmp_path / "torn"])
    wrong = point_file({"max_concurrency": 4, "completed": "3"})
    (tmp_path / "torn" / "conc_4.json").write_bytes(orjson.dumps(wrong))
    with pytest.raises(UsageError, match=r"field 'completed': Expected `int`, got `str`"):
        load_runs([tmp_path / "torn"])


def test_compare_and_report_commands_exit_2_on_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loadgen.cli import main

    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert main(["report"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "missing: no such directory" in lines[0]
    assert "the following arguments are required: RUN" in lines[1]
    write_run(tmp_path / "one", result(1, 10, 10))
    assert main(["compare", str(tmp_path / "one")]) == 0
    assert "conc 1" in capsys.readouterr().out


def test_al_is_the_published_source_of_each_point() -> None:
    # A point whose merged-steps stream AL (27.1 at K=6) was void, so the server's is
    # published, and one whose stream AL is.
    merged = point(
        1,
        100,
        100,
        spec_tokens=6,
        stream_acceptance_length=27.1,
        stream_acceptance_oversized_chunks=28,
        server_acceptance_length=2.76,
        acceptance_length=2.76,
        acceptance_length_source="server_counters",
    )
    new = result(
        1,
        120,
        110,
        spec_tokens=6,
        stream_acceptance_length=2.5,
        stream_acceptance_oversized_chunks=0,
        server_acceptance_length=2.4,
        acceptance_length=2.5,
        acceptance_length_source="stream",
    )
    comparison = compare([RunInput("merged", {1: merged}), RunInput("new", {1: typed(new)})])
    rows = {row.run: row for row in comparison.rows}
    assert rows["merged"].values["acceptance_length"] == 2.76
    assert rows["merged"].acceptance_source == "server_counters"
    assert rows["new"].values["acceptance_length"] == 2.5
    assert rows["new"].acceptance_source == "stream"
    assert rows["new"].ratios["acceptance_length"] == pytest.approx(2.5 / 2.76)
    # a file from before the reason was recorded: the oversized chunks say it
    [warning] = point_warnings(merged)
    assert warning.startswith("28 decode chunks carry more than K+1 tokens")
    assert "itl_chunks_merged_steps" in warning
    reason = "3 of 9 decode chunks carried more than K+1=3 tokens: merged"
    [named] = point_warnings(typed({**new, "stream_acceptance_invalid_reason": reason}))
    assert named.startswith(reason + "; so no stream AL is published")
    assert point_warnings(typed(new)) == []


def test_energy_ratios_and_the_energy_crossover() -> None:
    """MTP spends joules on verified drafts: ahead in tokens per joule at low concurrency
    (its speed shortens the idle-power share), behind at high; the crossover is where the
    tokens-per-joule ratio crosses 1, printed next to the throughput one."""
    from loadgen.sinks.compare_files import format_comparison

    def energy(conc: int, tput: float, tok_per_j: float) -> PointResult:
        return point(
            conc,
            tput,
            100.0,
            **ENERGY,
            output_tokens_per_joule=tok_per_j,
            joules_per_output_token=1 / tok_per_j,
        )

    base = RunInput(
        "no-spec", {4: energy(4, 100, 1.0), 16: energy(16, 300, 2.0), 64: energy(64, 600, 3.0)}
    )
    mtp = RunInput(
        "mtp", {4: energy(4, 170, 1.5), 16: energy(16, 330, 1.8), 64: energy(64, 560, 2.4)}
    )
    comparison = compare([base, mtp])
    [crossing] = comparison.energy_crossovers
    assert (crossing.low_conc, crossing.high_conc, crossing.ahead_below) == (4, 16, "mtp")
    t = math.log(1.5) / (math.log(1.5) - math.log(0.9))
    assert crossing.estimate == pytest.approx(math.exp(math.log(4) + t * math.log(4)))
    assert crossing.quantity == "tokens per joule"
    [throughput_crossing] = comparison.crossovers
    assert throughput_crossing.low_conc == 16  # throughput flips later than energy
    text = format_comparison(comparison)
    assert "mtp / no-spec output tokens per joule at matched concurrency: 4 x1.50" in text
    assert (
        "energy crossover: mtp is ahead up to conc 4, no-spec from conc 16 on "
        f"(tokens per joule mtp / no-spec crosses 1 near conc {crossing.estimate:.0f})" in text
    )
    assert "J/tok" in text.splitlines()[3] and "0.667 x0.67" in text


def test_no_energy_columns_without_gpu_metrics() -> None:
    from loadgen.sinks.compare_files import format_comparison

    comparison = compare(
        [RunInput("a", {4: point(4, 100, 50)}), RunInput("b", {4: point(4, 120, 40)})]
    )
    assert comparison.energy_crossovers == ()
    text = format_comparison(comparison)
    assert "J/tok" not in text and "joule" not in text


def test_report_energy_section_has_the_figure_and_the_crossover() -> None:
    from loadgen.sinks.html_report import energy_sections

    def energy(conc: int, tok_per_j: float, interactivity: float) -> PointResult:
        return point(
            conc,
            100.0 * conc,
            interactivity,
            **ENERGY,
            output_tokens_per_joule=tok_per_j,
            joules_per_output_token=1 / tok_per_j,
        )

    comparison = compare(
        [
            RunInput("no-spec", {4: energy(4, 1.0, 300), 16: energy(16, 2.0, 200)}),
            RunInput("mtp", {4: energy(4, 1.5, 500), 16: energy(16, 1.8, 300)}),
        ]
    )
    [(key, title, html)] = energy_sections(comparison)
    assert key == "energy" and "tokens per joule" in title
    assert html.startswith("<img") and "data:image/svg+xml;base64," in html
    assert "energy crossover: mtp is ahead up to conc 4, no-spec from conc 16 on" in html
    assert energy_sections(compare([RunInput("a", {4: point(4, 100, 50)})])) == []
