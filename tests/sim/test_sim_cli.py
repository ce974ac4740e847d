"""`loadgen sim` flags: bad values give one clear line and exit 2; a real process serves."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import pytest

from loadgen.cli import main as loadgen_main
from loadgen.sim.config import SimConfig
from loadgen.sim.parser import build_parser, config_from_args
from tests.support.sim_helpers import fetch


@pytest.mark.parametrize(
    ("argv", "mentions"),
    [
        (["--spec-tokens", "3", "--acceptance", "0.8,0.6"], "--acceptance"),
        (["--spec-tokens", "0", "--acceptance", "0.8"], "--spec-tokens"),
        (["--acceptance", "0.8,x"], "--acceptance"),
        (["--acceptance", "0.9,1.5"], "--acceptance[1]"),
        (["--fault-abort", "2"], "--fault-abort"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--port", "eighty"], "--port"),
        (["--step-fixed-ms", "-1"], "--step-fixed-ms"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--reject-params", "return_token_ids,logprobs"], "--reject-params"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    argv: list[str], mentions: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert loadgen_main(["sim", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("loadgen sim: error:") and mentions in err


def test_help_documents_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert loadgen_main(["sim", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in (
        "--spec-tokens",
        "--acceptance",
        "--step-fixed-ms",
        "--decode-token-us",
        "--max-num-seqs",
        "--stream-interval",
        "--trace",
        "--fault-stall",
    ):
        assert flag in out
    assert "default: 3.0" in out  # --step-fixed-ms


def test_flags_map_onto_the_config() -> None:
    args = build_parser().parse_args(
        [
            "--spec-tokens",
            "3",
            "--acceptance",
            "0.9,0.7,0.5",
            "--fault-stall",
            "0.25",
            "--max-waiting",
            "7",
            "--model-path",
            "/srv/m",
            "--reject-params",
            "return_token_ids",
        ]
    )
    config = config_from_args(args)
    assert config.root == "/srv/m" and config.reject_params == ("return_token_ids",)
    assert config.acceptance == (0.9, 0.7, 0.5) and config.spec_tokens == 3
    assert config.faults.stall == 0.25 and config.faults.max_waiting == 7
    defaults = config_from_args(build_parser().parse_args([]))
    assert defaults == SimConfig(spin_us=1000.0)  # only the CLI spins (its own process)
    assert defaults.acceptance == (0.8, 0.6)
    no_mtp = config_from_args(build_parser().parse_args(["--spec-tokens", "0"]))
    assert not no_mtp.mtp and no_mtp.acceptance == ()


async def test_module_serves_until_sigterm() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadgen",
        "sim",
        "--port",
        "0",
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stderr is not None
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, line
        status, _, body = await fetch("GET", f"http://127.0.0.1:{match.group(1)}/version")
        assert status == 200 and b"0.32.0" in body
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_prefix_caching_on_by_default_and_both_spellings_accepted() -> None:
    """As vLLM >= 0.8: on unless --no-enable-prefix-caching; the old opt-in flag still parses."""

    def parsed(*argv: str) -> SimConfig:
        return config_from_args(build_parser().parse_args(list(argv)))

    assert parsed().enable_prefix_caching and parsed().block_size == 16
    assert parsed("--enable-prefix-caching").enable_prefix_caching
    assert not parsed("--no-enable-prefix-caching").enable_prefix_caching
    assert not parsed().enable_prompt_tokens_details
