"""Sweep files: each key a run flag through the one flag parser; bad files are one line."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.config.args import spec_from_argv, spec_from_options
from loadgen.config.spec import SpecError
from loadgen.config.sweepfile import (
    MAX_DOCUMENT_BYTES,
    SweepFileError,
    SweepPlan,
    check_document,
    load_yaml,
    parse_sweep,
)
from loadgen.workload.bodies import BodyOptions, chat_body, completion_body
from tests.support.hostile_documents import laughs

DOC = """
results: results/ab
conc: 1,4
workload: {isl: 64, osl: 16, encoder: raw}
prompts-per-conc: 3
slo: {ttft: 2s}
lanes:
  - name: a
    target: {base-url: "http://127.0.0.1:9", model: m, header: {X-Session: secret}}
    workload: {extra-body: {min_p: 0.1}, osl: 32}
    num-gpus: 8
  - name: b.2
    target: {sim: true, sim-args: [--spec-tokens, 0]}
    conc: [2, 8]
    api-key: sk-secret
"""


def parse(text: str, **kwargs: Any) -> SweepPlan:
    return parse_sweep(load_yaml(text, source="s.yaml"), source="s.yaml", **kwargs)


def test_lanes_are_the_runs_the_same_flags_would_make() -> None:
    plan = parse(DOC)
    a, b = plan.lanes
    assert plan.results_dir == Path("results/ab")
    assert a.spec == spec_from_argv(
        [
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--header",
            "X-Session:secret",
            "--conc",
            "1,4",
            "--isl",
            "64",
            "--osl",
            "32",
            "--encoder",
            "raw",
            "--prompts-per-conc",
            "3",
            "--slo",
            "ttft=2s",
            "--num-gpus",
            "8",
            "--extra-body",
            '{"min_p": 0.1}',
            "--results",
            "results/ab/a",
        ],
        env={},
    )
    assert b.spec.load.conc == (2, 8) and b.spec.sim and b.spec.sim_args == ("--spec-tokens", "0")
    assert b.spec.workload.osl == 16 and b.spec.output.results_dir == Path("results/ab/b.2")
    assert b.spec.target.api_key == "sk-secret"
    # what is kept with the results never holds a credential
    kept = orjson.dumps([plan.document, a.options, b.options]).decode()
    assert "sk-secret" not in kept and '"api-key":"***"' in kept
    # the one rule (config/redact.py): a header not named like a credential is kept
    assert plan.document["lanes"][0]["target"]["header"] == {"X-Session": "secret"}


def test_the_sweep_document_is_redacted_by_the_one_rule_in_every_form() -> None:
    plan = parse("""
conc: 1
isl: 8
osl: 8
header: {X-Api-Key: sk-top, X-Team: a}
lanes:
  - name: a
    target: {sim: true, header: ["Authorization:Bearer sk-list", "X-Trace:t"]}
  - name: b
    sim: true
    header: {X-Upstream-Auth: sk-lane}
    extra-body: {note: "see http://u:pw@h/x"}
""")
    kept = orjson.dumps([plan.document, *(lane.options for lane in plan.lanes)]).decode()
    assert "sk-" not in kept and ":pw@" not in kept and "<redacted>" not in kept
    assert plan.document["header"] == {"X-Api-Key": "***", "X-Team": "a"}
    assert plan.document["lanes"][0]["target"]["header"] == ["Authorization:***", "X-Trace:t"]
    assert plan.document["lanes"][1]["header"] == {"X-Upstream-Auth": "***"}
    assert plan.lanes[1].options["header"] == {"X-Upstream-Auth": "***"}  # a lane's wins
    # the requests carry the real values
    assert plan.lanes[0].spec.target.headers == (
        ("Authorization", "Bearer sk-list"),
        ("X-Trace", "t"),
    )
    assert plan.lanes[1].spec.target.headers == (("X-Upstream-Auth", "sk-lane"),)


def test_argv_flags_override_every_lane_and_the_tree() -> None:
    plan = parse(
        DOC, overrides=["--prompts-per-conc", "1", "--conc", "16"], results_dir=Path("elsewhere")
    )
    assert [(lane.spec.load.prompts_per_conc, lane.spec.load.conc) for lane in plan.lanes] == [
        (1, (16,)),
        (1, (16,)),
    ]
    assert [lane.spec.output.results_dir for lane in plan.lanes] == [
        Path("elsewhere/a"),
        Path("elsewhere/b.2"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lanes: []", "s.yaml: lanes: empty"),
        ("conc: 4", "s.yaml: lanes: missing"),
        ("- a", "expected a mapping with a `lanes` list"),
        (
            "lanes: [{name: a, isll: 3}]",
            "lanes[0].isll: unknown setting 'isll'; did you mean 'isl'?",
        ),
        (
            "lanes: [{name: a, workload: {sim: true}}]",
            "lanes[0].workload.sim: unknown workload setting 'sim'; it is a target setting",
        ),
        ("lanes: [{name: a, isl: twelve}]", "lanes[0].isl: expected an integer, got 'twelve'"),
        ("lanes: [{name: a, sim: 1}]", "lanes[0].sim: expected true or false"),
        ("lanes: [{name: a, conc: [4, x]}]", "lanes[0].conc: --conc '4,x': expected"),
        ("lanes: [{name: a, conc: {x: 1}}]", "lanes[0].conc: expected a list of numbers"),
        ("lanes: [{name: a, conc: 9..3}]", "lanes[0].conc: --conc 9..3: need 1 <= A <= B"),
        ("lanes: [{name: a, endpoint: rest}]", "lanes[0].endpoint: --endpoint 'rest': allowed"),
        (
            "workload: {isl: 0}\nlanes: [{name: a, osl: 1, conc: 1, sim: true}]",
            "workload.isl: --isl 0: must be >= 1 token",
        ),
        ("lanes: [{name: a, sim: true}]", "lanes[0] (a): --conc is required"),
        (
            "lanes: [{name: a, sim: true, conc: 1, isl: 8, osl: 2}, {name: a}]",
            "lanes[1].name: 'a' is used by another lane",
        ),
        ("lanes: [{name: ../up}]", "lanes[0].name: '../up' must be"),
        ("lanes: [{sim: true}]", "lanes[0].name: required"),
        ("lanes: [{name: a, results: x}]", "lanes[0].results: set once for the whole tree"),
        ("lanes: [{name: a, metrics-port: 9}]", "lanes[0].metrics-port: not available"),
        (
            "lanes: [{name: a, extra-body: {stream: false}}]",
            "lanes[0].extra-body: --extra-body: 'stream' is set by loadgen",
        ),
        (
            "lanes: [{name: a, isl: 1, isl: 2}]",
            "not valid YAML (line 1, column 27): key 'isl' appears twice",
        ),
        ("lanes: [{name: a, target: [sim]}]", "lanes[0].target: expected a mapping"),
        (
            "lanes: [{name: a, sim: true, base-url: 'http://x', conc: 1, isl: 1, osl: 1}]",
            "lanes[0].sim: --sim and --base-url exclude each other",
        ),
    ],
)
def test_bad_files_name_the_key_path(text: str, message: str) -> None:
    with pytest.raises(SweepFileError) as caught:
        parse(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("s.yaml: ")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("lanes: [{name: a, sim: true, conc: 1, isl: 8, osl: 2, bogus: 1}]", "lanes[0].bogus"),
        ("conc: 1\nisl: 8\nosl: two\nlanes: [{name: a, sim: true}]", "osl: expected an integer"),
        ("lanes: []\n", "lanes: empty"),
    ],
)
def test_the_cli_exits_2_with_one_line(tmp_path: Path, text: str, path: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", "--config", str(tmp_path / "bad.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loadgen: error: ") and path in lines[0], lines
    assert not (tmp_path / "results").exists()


def test_repeatable_flags_take_a_list_one_flag_per_item() -> None:
    """--gpu-metrics, one exporter per node: a YAML list is the flag given once per URL."""
    plan = parse(
        "conc: 1\nworkload: {isl: 8, osl: 2}\n"
        "gpu-metrics: [http://node0:9400/metrics, http://node1:9400/metrics]\n"
        "lanes: [{name: a, base-url: 'http://127.0.0.1:9', server-metrics: "
        "[http://127.0.0.1:9/metrics, http://127.0.0.1:10/metrics]}]"
    )
    [lane] = plan.lanes
    assert lane.spec.telemetry.gpu_metrics == (
        "http://node0:9400/metrics",
        "http://node1:9400/metrics",
    )
    assert lane.spec.telemetry.server_metrics == (
        "http://127.0.0.1:9/metrics",
        "http://127.0.0.1:10/metrics",
    )
    with pytest.raises(SweepFileError, match="gpu-metrics: expected a value or a list"):
        parse("gpu-metrics: {a: 1}\nlanes: [{name: a, sim: true, conc: 1, isl: 8, osl: 2}]")


def test_missing_config_file_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", "--config", str(tmp_path / "no.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "cannot read it" in done.stderr


def test_extra_body_reaches_every_body_but_never_overrides_loadgen() -> None:
    spec = spec_from_options(
        {
            "base-url": "http://127.0.0.1:9",
            "conc": 1,
            "isl": 8,
            "osl": 4,
            "extra_body": {"min_p": 0.1, "top_k": 5},
        }
    )
    assert spec.target.extra_body == {"min_p": 0.1, "top_k": 5}
    options = BodyOptions(endpoint="completions", model="m", extra_body=spec.target.extra_body)
    body: Mapping[str, object] = completion_body(options, "hi", 4)
    assert body["max_tokens"] == 4 and body["stream"] is True
    assert {k: body[k] for k in ("min_p", "top_k")} == {"min_p": 0.1, "top_k": 5}
    chat_options = BodyOptions(endpoint="chat", model="m", extra_body={"min_p": 0.2})
    chat: Mapping[str, object] = chat_body(chat_options, [], 4)
    assert chat["min_p"] == 0.2
    for reserved in ("max_tokens", "ignore_eos", "stream_options", "n"):
        with pytest.raises(SpecError, match=f"'{reserved}' is set by loadgen"):
            spec_from_argv(
                [
                    "--sim",
                    "--conc",
                    "1",
                    "--isl",
                    "8",
                    "--osl",
                    "4",
                    "--extra-body",
                    orjson.dumps({reserved: 1}).decode(),
                ],
                env={},
            )
    with pytest.raises(SpecError, match="not JSON"):
        spec_from_argv(
            ["--sim", "--conc", "1", "--isl", "8", "--osl", "4", "--extra-body", "{min_p"], env={}
        )


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (9, "s.yaml: extra-body.a4[0]: more than 10,000 values, each alias (*name) counted"),
        (7, "s.yaml: extra-body.a4[0]: more than 10,000 values, each alias (*name) counted"),
    ],
)
def test_a_billion_laughs_document_is_refused_at_once(levels: int, message: str) -> None:
    text = laughs(levels)
    assert len(text) < 600
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # CPU time: the bound is on the work done, which other processes' load does not change
    started = time.process_time()
    with pytest.raises(SweepFileError) as caught:
        parse(text)
    assert time.process_time() - started < 2.0
    assert str(caught.value).startswith(message)
    # the peak did not move by more than 50 MiB (before: 608 MiB for levels=7)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 50 << 10


def test_a_few_aliases_still_work() -> None:
    plan = parse(
        "conc: 1\nworkload: &w {isl: 8, osl: 4}\nslo: &s {ttft: 2s}\n"
        "lanes: [{name: a, sim: true}, {name: b, sim: true, workload: *w, slo: *s}]"
    )
    assert [(lane.spec.workload.osl, lane.spec.scoring.slos_ms) for lane in plan.lanes] == [
        (4, {"ttft": 2000.0})
    ] * 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x: &x 1\ny: [" + "*x," * 65 + "]", "s.yaml: y[64]: more than 64 aliases (*name)"),
        ("a: &a [*a]\nlanes: []", "s.yaml: a[0]: an alias (*name) inside its own anchor"),
        (
            "lanes: [{name: a, workload: " + "[" * 40 + "]" * 40 + "}]",
            # the 33rd collection: the document, lanes, lanes[0], workload and 29 more lists
            "s.yaml: lanes[0].workload" + "[0]" * 29 + ": nested more than 32 levels deep",
        ),
        ("x: " + "[" * 5000 + "]" * 5000, "s.yaml: x" + "[0]" * 31 + ": nested more than 32"),
        (
            "lanes: [{name: a, isl: " + "9" * 5000 + "}]",
            "s.yaml: lanes[0].isl: integer of 5,000 characters; integers here fit in 64 bits",
        ),
        (
            "lanes: [{name: a, seed: 0x1" + "0" * 16 + "}]",
            "s.yaml: lanes[0].seed: 18446744073709551616 does not fit in 64 bits",
        ),
        (
            "lanes: [{name: a, workload: {1: 2}}]",
            "s.yaml: lanes[0].workload: key 1 is not a string",
        ),
        (
            "lanes: [{name: a, extra-body: {[x]: 2}}]",
            "s.yaml: lanes[0].extra-body: key a list is not a string",
        ),
        ("lanes: [{name: a}]\n" + "#" * MAX_DOCUMENT_BYTES, "s.yaml: over 1 MiB"),
        # no alias at all: refused at the 10,001st value (the key x is one), not after parsing
        ("x: [" + "1," * 500_000 + "]", "s.yaml: x[9999]: more than 10,000 values"),
    ],
)
def test_documents_past_the_bounds_are_one_line(text: str, message: str) -> None:
    started = time.process_time()  # the work done (CPU), not the machine's load
    with pytest.raises(SweepFileError) as caught:
        parse(text)
    assert time.process_time() - started < 2.0
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_json_document_gets_the_same_bounds() -> None:
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    with pytest.raises(SweepFileError, match=r"^body: lanes\[0\]\.x(\[0\]){29}: nested"):
        check_document({"lanes": [{"x": deep}]}, source="body")
    with pytest.raises(SweepFileError, match=r"^body: isl: 18446744073709551616 does not"):
        check_document({"isl": 1 << 64}, source="body")
    check_document({"lanes": [{"name": "a", "x": [[1]]}], "seed": (1 << 64) - 1}, source="b")


def test_the_cli_refuses_a_billion_laughs_file_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "laughs.yaml").write_text(laughs(9))
    done = subprocess.run(
        [sys.executable, "-m", "loadgen", "--config", str(tmp_path / "laughs.yaml")],
        capture_output=True,
        text=True,
        timeout=30,  # a hang guard: the interpreter's start-up, not the file's expansion
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"loadgen: error: {tmp_path / 'laughs.yaml'}: extra-body.a4[0]: more than 10,000 "
        "values, each alias (*name) counted as the copy it becomes; a sweep document "
        "needs a few hundred"
    ]
