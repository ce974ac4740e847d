"""`loadgen sim --pd P:D`: its flags refused in one line when they cannot make a
deployment (the deployment itself: tests/metrics/test_ttft_parts_sim.py)."""

from __future__ import annotations

import pytest

from loadgen.sim.config import ConfigError
from loadgen.sim.parser import build_parser, config_from_args
from tests.support.procs import run_loadgen


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--pd", "2"], "--pd wants prefill engines:decode engines like 1:1"),
        (["--pd", "a:b"], "--pd wants prefill engines:decode engines like 1:1"),
        (["--pd", "0:1"], "--pd needs at least one engine of each role"),
        (["--pd", "1:1", "--data-parallel-size", "2"], "give one of them"),
        (["--pd", "1:1", "--kv-bandwidth-gbps", "0"], "--kv-bandwidth-gbps must be > 0"),
        (["--kv-latency-ms", "-1"], "--kv-latency-ms must be a finite number >= 0"),
    ],
)
def test_a_bad_pd_flag_is_one_clear_error(argv: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        config_from_args(build_parser().parse_args(argv))


def test_the_cli_says_it_in_one_line() -> None:
    done = run_loadgen(["sim", "--pd", "1:0"], timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "loadgen sim: error: --pd needs at least one engine of each role, got (1, 0)"
    ]


def test_the_ratio_and_link_reach_the_config() -> None:
    config = config_from_args(
        build_parser().parse_args(["--pd", "2:1", "--kv-bandwidth-gbps", "4.5"])
    )
    assert config.pd == (2, 1)
    assert config.kv_bandwidth_gbps == 4.5
