"""--conc-stages: its parsing, what it refuses beside it, and its sweep-file key."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.load import parse_conc_stages
from loadgen.config.spec import SpecError
from loadgen.config.sweepfile import SweepFileError, load_yaml, parse_sweep


def argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--sim", "--isl", "64", "--osl", "8", "--results", str(tmp_path / "r"), *extra]


def test_stages_parse_with_units() -> None:
    assert parse_conc_stages("4@30s, 16@30,2@1m,8@500ms") == (
        (4, 30.0),
        (16, 30.0),
        (2, 60.0),
        (8, 0.5),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4", "each stage is CONCURRENCY@DURATION"),
        ("4@", "each stage is CONCURRENCY@DURATION"),
        ("2.5@3s", "each stage is CONCURRENCY@DURATION"),  # a slot count is whole
        ("0@3s", "needs a concurrency in 1..65536 and a duration > 0"),
        ("70000@3s", "needs a concurrency in 1..65536"),
        ("4@0s", "a duration > 0"),
        ("4@-1s", "a duration > 0"),
        ("4@infs", "a duration > 0"),
    ],
)
def test_bad_stages_say_what_a_stage_is(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=f"--conc-stages {text!r}.*{message}"):
        parse_conc_stages(text)


def test_the_largest_stage_is_the_points_concurrency(tmp_path: Path) -> None:
    spec = spec_from_argv(argv(tmp_path, "--conc-stages", "4@3s,16@2s,2@1s"))
    assert spec.load.conc_stages == ((4, 3.0), (16, 2.0), (2, 1.0))
    assert spec.load.conc == (16,) and not spec.load.open_loop
    assert spec.load.point_duration_s == 6.0
    same = spec_from_argv(argv(tmp_path, "--conc", "16", "--conc-stages", "4@3s,16@2s"))
    assert same.load.conc == (16,)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--conc", "8"], "one point of concurrency 16 .*drop --conc or give --conc 16"),
        (["--conc", "4,16"], "drop --conc or give --conc 16"),
        (["--request-rate", "3"], "a closed loop: drop --request-rate"),
        (["--rate-stages", "2@3s"], "a closed loop: drop --request-rate, --rate-stages"),
        (
            ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2"],
            "a closed loop: drop",
        ),
        (["--duration", "3"], "the stages' sum\\): drop --duration"),
        (["--workers", "2"], "runs in one process: use --workers 1"),
        (["--turns", "3"], "not with --find-max or session runs"),
    ],
)
def test_what_cannot_go_beside_the_stages(tmp_path: Path, extra: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_from_argv(argv(tmp_path, "--conc-stages", "4@3s,16@2s", *extra))


def test_a_sweep_file_gives_the_stages_as_a_list() -> None:
    text = """
workload: {isl: 64, osl: 8}
lanes:
  - name: steps
    target: {sim: true}
    conc-stages: [2@10s, 8@10s, 4@5s]
  - name: flat
    target: {sim: true}
    conc: [4]
"""
    plan = parse_sweep(load_yaml(text, source="s.yaml"), source="s.yaml")
    assert plan.lanes[0].spec.load.conc_stages == ((2, 10.0), (8, 10.0), (4, 5.0))
    assert plan.lanes[0].spec.load.conc == (8,)
    assert plan.lanes[1].spec.load.conc_stages == ()


@pytest.mark.parametrize(
    ("lane", "message"),
    [
        (
            "conc-stages: {a: 1}",
            "lanes[0].conc-stages: expected a list of CONCURRENCY@DURATION stages like .4@30s",
        ),
        ("conc-stages: [4@1s, 0@1s]", "s.yaml: lanes[0].conc-stages: --conc-stages .*'0@1s'"),
        (
            "conc-stages: [4@1s, 8@1s]\n    request-rate: 3",
            "s.yaml: lanes[0].conc-stages: --conc-stages is a closed loop",
        ),
    ],
)
def test_a_bad_sweep_file_stage_is_named_by_its_key(lane: str, message: str) -> None:
    text = f"""
workload: {{isl: 64, osl: 8}}
lanes:
  - name: steps
    target: {{sim: true}}
    {lane}
"""
    with pytest.raises(SweepFileError, match=message.replace("[0]", r"\[0\]")):
        parse_sweep(load_yaml(text, source="s.yaml"), source="s.yaml")
