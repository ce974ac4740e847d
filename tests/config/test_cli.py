"""RunSpec parsing and validation, argv and sidecar options through one parser."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.config.args import build_parser, spec_from_argv, spec_from_options
from loadgen.config.objectives import parse_slo_flag
from loadgen.config.parsers import parse_conc, parse_header
from loadgen.config.spec import RunSpec, SpecError

BASE = ["--base-url", "http://127.0.0.1:9", "--isl", "64", "--osl", "16"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4..512", (4, 8, 16, 32, 64, 128, 256, 512)),
        ("1..1", (1,)),
        ("8,16,64", (8, 16, 64)),
        ("64,8", (64, 8)),
        ("10..40:+10", (10, 20, 30, 40)),
        ("3..10:+4", (3, 7)),
    ],
)
def test_parse_conc(text: str, expected: tuple[int, ...]) -> None:
    assert parse_conc(text) == expected


@pytest.mark.parametrize("text", ["", "0..4", "8..4", "3..12", "4,x", "4,4", "0", "4..8:+0"])
def test_parse_conc_rejects(text: str) -> None:
    with pytest.raises(SpecError, match="--conc"):
        parse_conc(text)


def test_parse_slos_units() -> None:
    assert parse_slo_flag("ttft=2s,tpot=50ms,itl=250us,e2el=1.5") == {
        "ttft": 2000.0,
        "tpot": 50.0,
        "itl": 0.25,
        "e2el": 1.5,
    }
    with pytest.raises(SpecError, match="METRIC"):
        parse_slo_flag("latency=2s")
    with pytest.raises(SpecError, match="duration"):
        parse_slo_flag("ttft=fast")


def test_parse_header() -> None:
    assert parse_header("X-Session-Affinity: abc:1") == ("X-Session-Affinity", "abc:1")
    with pytest.raises(SpecError, match="NAME:VALUE"):
        parse_header("novalue")
    with pytest.raises(SpecError, match="CR, LF"):  # would smuggle a second request
        parse_header("X-A: b\r\nX-B: c")


def test_defaults_from_argv(tmp_path: Path) -> None:
    spec = spec_from_argv([*BASE, "--conc", "4..16", "--results", str(tmp_path)], env={})
    assert spec.load.conc == (4, 8, 16)
    assert (spec.target.endpoint, spec.workload.encoder, spec.workload.thinking) == (
        "completions",
        "dsv4",
        "thinking",
    )
    assert (spec.load.prompts_per_conc, spec.load.warmup_per_conc, spec.workload.temperature) == (
        10,
        2,
        0.0,
    )
    assert spec.scoring.percentiles == (50.0, 90.0, 99.0, 99.9)
    assert spec.deadlines.max_error_rate == 0.05
    assert spec.output.results_dir == tmp_path
    assert spec.target.api_key is None
    assert spec.target.http_client == "native"
    # an earlier script's `--http-client native` still runs: it names the one client
    spec = spec_from_argv([*BASE, "--conc", "4", "--http-client", "native"], env={})
    assert spec.target.http_client == "native"


def test_http_client_aiohttp_says_where_it_went() -> None:
    """The aiohttp streams client left the product for bench/: one line saying so."""
    with pytest.raises(SpecError) as caught:
        spec_from_argv([*BASE, "--conc", "4", "--http-client", "aiohttp"], env={})
    assert str(caught.value) == (
        "--http-client: the aiohttp comparison client moved to bench/ "
        "(bench/read_path.py --http-client aiohttp); loadgen measures with its native client"
    )
    with pytest.raises(SpecError, match="native client only"):
        spec_from_argv([*BASE, "--conc", "4", "--http-client", "httpx"], env={})


def test_api_key_from_environment() -> None:
    spec = spec_from_argv([*BASE, "--conc", "4"], env={"OPENAI_API_KEY": "sk-x"})
    assert spec.target.api_key == "sk-x"
    spec = spec_from_argv([*BASE, "--conc", "4", "--api-key", "sk-y"], env={"OPENAI_API_KEY": "x"})
    assert spec.target.api_key == "sk-y"


def test_default_results_dir_is_timestamped() -> None:
    spec = spec_from_argv([*BASE, "--conc", "4"], env={})
    assert spec.output.results_dir is not None and spec.output.results_dir.parent == Path("results")


def test_sim_excludes_base_url() -> None:
    with pytest.raises(SpecError, match="--sim"):
        spec_from_argv([*BASE, "--conc", "4", "--sim"], env={})
    spec = spec_from_argv(
        [
            "--sim",
            "--conc",
            "4",
            "--isl",
            "8",
            "--osl",
            "2",
            "--sim-args",
            "--step-fixed-ms 1 --seed 3",
        ],
        env={},
    )
    assert spec.sim and spec.target.base_url is None
    assert spec.sim_args == ("--step-fixed-ms", "1", "--seed", "3")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--conc", "0"], "--conc"),
        (["--conc", "4", "--range-ratio", "1.5"], "--range-ratio"),
        (["--conc", "4", "--request-rate", "0"], "--request-rate"),
        (["--conc", "4", "--endpoint", "embeddings"], "--endpoint"),
        (["--conc", "4", "--percentiles", "50,100"], "--percentiles"),
        (["--conc", "4", "--max-error-rate", "2"], "--max-error-rate"),
        (["--conc", "4", "--dataset", "/nonexistent.jsonl"], "--dataset"),
    ],
)
def test_invalid_values_name_the_flag(extra: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_from_argv([*BASE, *extra], env={})


def test_runspec_validates_directly() -> None:
    with pytest.raises(SpecError, match="--base-url"):
        RunSpec.flat(conc=(4,), isl=8, osl=8)
    with pytest.raises(SpecError, match="--isl"):
        RunSpec.flat(conc=(4,), isl=0, osl=8, base_url="http://x")


def test_spec_from_options_matches_argv(tmp_path: Path) -> None:
    options = {
        "base_url": "http://127.0.0.1:9",
        "conc": [4, 8],
        "isl": 64,
        "osl": 16,
        "slo": {"ttft": "2s"},
        "header": ["A:b"],
        "no-progress": True,
        "results_dir": str(tmp_path),
        "request_rate": 5.5,
    }
    spec = spec_from_options(options)
    assert spec.load.conc == (4, 8) and spec.scoring.slos_ms == {"ttft": 2000.0}
    assert spec.target.headers == (("A", "b"),) and not spec.output.progress
    assert spec.load.request_rate == 5.5 and spec.output.results_dir == tmp_path
    with pytest.raises(SpecError, match="unknown option 'bogus'"):
        spec_from_options({**options, "bogus": 1})
    with pytest.raises(SpecError, match="--conc"):
        spec_from_options({**options, "conc": "3..12"})


def test_help_documents_every_flag_with_default() -> None:
    text = build_parser().format_help()
    for action in build_parser()._actions:
        if action.help == argparse.SUPPRESS:
            continue  # accepted for earlier scripts only (--http-client native)
        for flag in action.option_strings:
            assert flag in text
    assert "(default: 10)" in text and "(default: completions)" in text
    assert "(default: 0.05; 0.10 for session runs" in " ".join(text.split())
    assert "--http-client" not in text  # loadgen has one client of the measured streams


def _loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=60
    )


def test_bad_flags_exit_2_with_one_line() -> None:
    for args in (
        ["--conc", "3..12", "--isl", "8", "--osl", "8", "--sim"],
        ["--conc", "4", "--isl", "-1", "--osl", "8", "--sim"],
        ["--conc", "4", "--isl", "8", "--osl", "8", "--bogus"],
        ["--conc", "4", "--isl", "8", "--osl", "8", "--sim", "--http-client", "curl"],
        ["--isl", "8", "--osl", "8", "--sim"],
    ):
        done = _loadgen(*args)
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("loadgen: error:"), done.stderr


def test_unreachable_server_one_line_nonzero(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = _loadgen(
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--conc",
        "4",
        "--isl",
        "32",
        "--osl",
        "4",
        "--results",
        str(tmp_path),
        "--no-progress",
    )
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the server" in lines[0], done.stderr


def test_sim_args_cannot_move_the_simulator() -> None:
    with pytest.raises(SpecError, match="--port is chosen by loadgen"):
        spec_from_argv(
            ["--sim", "--conc", "4", "--isl", "8", "--osl", "2", "--sim-args", "--port 9000"],
            env={},
        )


def test_impossible_lengths_exit_2_before_connecting(tmp_path: Path) -> None:
    """Caught while building the probe prompt: no server (port 1 is closed) is needed."""
    done = _loadgen(
        "--base-url",
        "http://127.0.0.1:1",
        "--conc",
        "1",
        "--isl",
        "3",
        "--osl",
        "2",
        "--results",
        str(tmp_path),
        "--no-progress",
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--isl 3" in lines[0] and "template" in lines[0]
    done = _loadgen(
        "--base-url",
        "http://127.0.0.1:1",
        "--conc",
        "1",
        "--isl",
        "300",
        "--range-ratio",
        "0.001",
        "--osl",
        "2",
        "--results",
        str(tmp_path),
    )
    assert done.returncode == 2 and "shorter than" in done.stderr
