"""--server-metrics ROLE=URL: a disaggregated deployment's servers seen per role.

Three of loadgen's simulators over real sockets stand for one prefill and two decode
workers: the target (the prefill role) does all the work, the decode pair idles, so
each role's figures are known without a Dynamo frontend (its real per-role test is the
Dynamo suite's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from loadgen.client import server_metrics
from loadgen.config.args import spec_from_argv
from loadgen.config.parsers import SpecError
from loadgen.orchestrate.measure import measure
from loadgen.results.store import ResultsDir
from loadgen.sim.config import SimConfig
from loadgen.sim.server import running_simulator
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver

ARGS = ["--conc", "4", "--isl", "64", "--osl", "50", "--prompts-per-conc", "3"]


async def test_each_role_gets_its_urls_figures(
    tmp_path: Path,
    tokenizer: Tokenizer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(server_metrics, "WATCH_INTERVAL_S", 0.1)
    config = SimConfig(step_fixed_ms=2.0, decode_token_us=2.0, prefill_token_us=0.1, spin_us=0.0)
    async with (
        running_simulator(config, tokenizer=tokenizer) as prefill,
        running_simulator(config, tokenizer=tokenizer) as decode_a,
        running_simulator(config, tokenizer=tokenizer) as decode_b,
    ):
        spec = spec_from_argv(
            [
                "--base-url",
                prefill.base_url,
                *ARGS,
                "--warmup-per-conc",
                "0",
                "--results",
                str(tmp_path),
                "--no-progress",
                "--server-metrics",
                f"prefill={prefill.base_url}",
                "--server-metrics",
                f"decode={decode_a.base_url}/metrics",
                "--server-metrics",
                decode_b.base_url,  # no role: a worker's
            ],
            env={},
        )
        outcome = await measure(spec, tokenizer=tokenizer)
    assert outcome.exit_code == 0
    result = ResultsDir(tmp_path).read_point(4)  # read back typed: the file round-trips
    by_role = {row.role: row for row in result.server_metrics_by_role or ()}
    assert list(by_role) == ["prefill", "decode", "worker"]
    assert by_role["prefill"].urls == [prefill.base_url + "/metrics"]
    assert by_role["decode"].urls == [decode_a.base_url + "/metrics"]
    assert all(row.scraped for row in by_role.values())
    # every measured request reached the prefill role's server, none the others
    assert by_role["prefill"].server_requests == result.metrics.completed == 12
    assert by_role["decode"].server_requests == by_role["worker"].server_requests == 0
    # a role of one URL is that URL's own figures; one that saw nothing has no means
    busy = (result.server_metrics_by_url or [])[0]
    for key in ("server_mean_itl_ms", "server_acceptance_length", "requests_running_mean"):
        assert getattr(by_role["prefill"], key) == getattr(busy, key) is not None, key
    assert (by_role["prefill"].requests_running_mean or 0) > 0
    assert by_role["decode"].server_mean_itl_ms is None
    assert by_role["decode"].requests_running_mean == 0
    # the console's line per point, and the exporter's gauges with a role label
    out = capsys.readouterr().out
    assert "conc 4 server roles: prefill requests 12, " in out
    assert "; decode requests 0, " in out and "; worker requests 0, " in out
    registry = CollectorRegistry()
    MetricsObserver(LoadgenMetrics(registry), model="m", endpoint="completions").point_finished(
        4, result
    )
    seen = {
        (s.labels["role"], s.labels["figure"]): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
        if s.name == "loadgen_server_role_figure"
    }
    assert seen[("prefill", "requests")] == 12 and seen[("decode", "requests")] == 0
    assert ("decode", "itl_ms") not in seen  # a null figure sets no gauge
    # the per-URL rows say their role too
    url_roles = [(row.url, row.role) for row in result.server_metrics_by_url or ()]
    assert url_roles == [
        (prefill.base_url + "/metrics", "prefill"),
        (decode_a.base_url + "/metrics", "decode"),
        (decode_b.base_url + "/metrics", "worker"),
    ]


def test_plain_urls_have_no_roles_section(tmp_path: Path) -> None:
    """Without any ROLE= the point is as before: no per-role figures, no role per URL."""
    from loadgen.client.server_metrics import metrics_roles

    roles = metrics_roles(("http://a:1", "http://b:2/m"), "http://t:3")
    assert roles == {"http://a:1/metrics": "worker", "http://b:2/m": "worker"}


@pytest.mark.parametrize(
    "entry",
    ["prefil=http://127.0.0.1:1", "decode=127.0.0.1:1", "=http://127.0.0.1:1"],
)
def test_a_bad_role_or_url_is_one_line(entry: str) -> None:
    with pytest.raises(SpecError, match=r"must be \[ROLE=\]URL, ROLE one of frontend, prefill"):
        spec_from_argv(
            ["--base-url", "http://127.0.0.1:1", *ARGS, "--server-metrics", entry], env={}
        )
