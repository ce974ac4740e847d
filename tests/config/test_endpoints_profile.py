"""`--profile mlperf-endpoints`' point placement (config/endpoints_profile.py) against the
rules' own numbers: Appendix B of the Endpoints v1.0 rules (mlcommons/endpoints_policies,
endpoints_rules.md, the quick-reference region table, C_min 32) and the submission
checker's worked value (C_max 1024, C_min 16: Low 17-26), typed in here from the
documents, not from the code under test."""

from __future__ import annotations

import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.endpoints_profile import plan, regions
from loadgen.config.parsers import SpecError
from loadgen.config.sweepfile import SweepFileError, parse_sweep

# C_max: (Low, Medium, High, margin) at C_min 32, Appendix B
APPENDIX_B = {
    64: ((33, 35), (36, 42), (43, 64), (65, 71)),
    128: ((33, 37), (38, 53), (54, 128), (129, 141)),
    256: ((33, 38), (39, 69), (70, 256), (257, 282)),
    512: ((33, 40), (41, 93), (94, 512), (513, 564)),
    1024: ((33, 42), (43, 131), (132, 1024), (1025, 1127)),
    2048: ((33, 45), (46, 192), (193, 2048), (2049, 2253)),
    4096: ((33, 48), (49, 287), (288, 4096), (4097, 4506)),
    8192: ((33, 52), (53, 437), (438, 8192), (8193, 9012)),
    16384: ((33, 57), (58, 676), (677, 16384), (16385, 18023)),
}


@pytest.mark.parametrize("c_max", sorted(APPENDIX_B))
def test_regions_equal_the_rules_table(c_max: int) -> None:
    bounds = regions(32, c_max)
    assert bounds[0].start == 1 and bounds[0].end == 32
    assert tuple((r.start, r.end) for r in bounds[1:]) == APPENDIX_B[c_max]


def test_regions_from_a_lower_c_min() -> None:
    bounds = {r.name: (r.start, r.end) for r in regions(16, 1024)}
    assert bounds["low"] == (17, 26)
    assert bounds["medium"] == (27, 117)


def test_seven_points_one_mandatory_per_region_each_inside_it() -> None:
    chosen = plan([1, 512])
    assert len(chosen.points) == 7
    assert chosen.concs[0] == 1 and chosen.concs[-1] == 512
    assert list(chosen.concs) == sorted(set(chosen.concs))
    by_region: dict[str, list[int]] = {}
    for point in chosen.points:
        assert chosen.region_of(point.conc) == point.region
        by_region.setdefault(point.region, []).append(point.conc)
    assert {k: len(v) for k, v in by_region.items()} == {
        "ultra_low": 1,
        "low": 2,
        "medium": 2,
        "high": 2,
    }
    assert len(chosen.mandatory) == 4
    assert {chosen.region_of(c) for c in chosen.mandatory} == {"ultra_low", "low", "medium", "high"}


def test_a_region_rounded_to_nothing_leaves_fewer_points() -> None:
    chosen = plan([32, 33])
    assert len(chosen.points) < 7  # the summary's point-count rule then says not met


@pytest.mark.parametrize(
    ("concs", "says"),
    [
        ((40, 512), "the lowest --conc is 40"),
        ((1, 32), "the highest --conc is 32"),
    ],
)
def test_a_range_that_cannot_bound_a_curve_is_one_line(concs: tuple[int, int], says: str) -> None:
    with pytest.raises(SpecError, match=says):
        plan(concs)


def test_the_profile_sets_points_accuracy_and_kept_outputs() -> None:
    spec = spec_from_argv(
        [
            "--sim",
            "--profile",
            "mlperf-endpoints",
            "--conc",
            "2,100",
            "--isl",
            "16",
            "--osl",
            "8",
            "--accuracy-data",
            "q.jsonl",
            "--accuracy-shots",
            "s.jsonl",
        ]
    )
    chosen = plan([2, 100])
    assert spec.load.conc == chosen.concs
    assert spec.scoring.accuracy == "gsm8k"
    assert spec.scoring.accuracy_conc == chosen.mandatory
    assert spec.output.record_outputs is True
    assert spec.scoring.profile == "mlperf-endpoints"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--find-max", "conc", "--slo", "ttft:p99=2s"], "not with --find-max"),
        (["--shard", "0/2"], "not with --shard"),
    ],
)
def test_the_profile_refuses_what_would_split_or_replace_its_points(
    extra: list[str], says: str
) -> None:
    argv = ["--base-url", "http://127.0.0.1:9", "--profile", "mlperf-endpoints", "--conc"]
    argv += ["1,64", "--isl", "8", "--osl", "8", "--accuracy-data", "q", "--accuracy-shots", "s"]
    with pytest.raises(SpecError, match=says):
        spec_from_argv([*argv, *extra])


def test_a_sweep_file_lane_cannot_take_the_profile() -> None:
    document = {
        "conc": "1,64",
        "workload": {"isl": 8, "osl": 8},
        "lanes": [{"name": "a", "target": {"sim": True}, "profile": "mlperf-endpoints"}],
    }
    with pytest.raises(SweepFileError, match="profile: not in a sweep file"):
        parse_sweep(document, source="s.yaml")
