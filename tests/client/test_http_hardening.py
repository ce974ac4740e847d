"""Every connection loadgen opens besides the measured streams goes through one bounded
setup (client/http_session.py): GPU exporters (preflight and sampler), the `--metrics-port`
model lookup, the server's preflight. Hostile exporters and servers of our own on
127.0.0.1 answer compressed bombs, endless bodies and redirects to another origin."""

from __future__ import annotations

import asyncio
import gzip
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.client import gpu_metrics
from loadgen.client.gpu_metrics import GpuMetricsUrlError, PowerSampler, check_gpu_metrics_urls
from loadgen.client.http_session import MAX_PAGE_BYTES, open_session
from loadgen.client.preflight import PreflightError, find_model
from loadgen.results.store import name_part
from tests.support.hostile_cli import RUN, loadgen, one_line
from tests.support.hostile_documents import gzip_bomb
from tests.support.hostile_server import (
    HostileServer,
    answer_bytes,
    answer_json,
    compressed,
    endless,
    redirect,
)

pytestmark = pytest.mark.timeout(120)

PAGE = (
    b"# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
    b'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",device="nvidia0"} 300.5\n'
)
EXPORTER = answer_bytes(PAGE, "text/plain; version=0.0.4")
BOMB = gzip_bomb(64 << 20)  # 66 KB on the wire, 64 MiB inflated
INFLATED = 1 << 30  # the --metrics-port bomb inflated (1 MiB on the wire)
# The whole loadgen process, bomb or not: it peaked at 67-80 MiB (its imports) against
# this bomb; the loadgen before the one bounded setup (56777dc^) peaked at 2,125 MiB.
PEAK_RSS_BOUND = 256 << 20


# Linux keeps a process's peak RSS across exec, and a child forked from the (large)
# pytest worker starts from the worker's own peak (676 MiB in CI): a small launcher
# process starts loadgen and reports loadgen's ru_maxrss on its stdout.
LAUNCHER = """
import os, subprocess, sys
child = subprocess.Popen(
    [sys.executable, "-m", "loadgen", *sys.argv[1:]],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
)
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""


def peak_rss_of_loadgen(*args: str) -> tuple[int, str, int]:
    """Run the real CLI from a small launcher and wait for it with wait4, which reports
    that one child's peak resident set (ru_maxrss, KiB on Linux): (exit status, stderr,
    peak RSS in bytes). Blocking: the test's own server answers while this runs in a
    thread."""
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
        timeout=90,
    )
    status, peak = (int(word) for word in done.stdout.split())
    return status, done.stderr.decode(), peak


async def test_an_exporter_answer_is_asked_identity_and_a_gzip_bomb_is_refused() -> None:
    async with HostileServer({"/metrics": compressed(BOMB, "text/plain")}) as exporter:
        with pytest.raises(GpuMetricsUrlError) as caught:
            await check_gpu_metrics_urls([exporter.base_url + "/metrics"])
        # refused on its header (the message says which), before a byte is inflated
        assert "the answer is compressed (Content-Encoding 'gzip')" in str(caught.value)
        assert exporter.requests[0].headers["accept-encoding"] == "identity"


async def test_the_sampler_never_inflates_a_compressed_page() -> None:
    """Even a well-formed page is not read once it comes compressed: loadgen asked for
    identity, and inflating is what a bomb needs."""
    async with HostileServer({"/metrics": compressed(gzip.compress(PAGE), "text/plain")}) as bad:
        sampler = PowerSampler([bad.base_url + "/metrics"], 0.05)
        await sampler.start()
        series = await sampler.stop()
    assert series[0].samples and all(s.readings is None for s in series[0].samples)
    assert all(r.headers["accept-encoding"] == "identity" for r in bad.requests)


async def test_an_endless_exporter_body_is_cut_at_the_cap_not_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the preflight's and the sampler's timeouts out of reach, only the cap can end
    the read: it ends (the hang guard is not what fires)."""
    monkeypatch.setattr(gpu_metrics, "PREFLIGHT_SCRAPE_S", 3600.0)
    monkeypatch.setattr(gpu_metrics, "MAX_SCRAPE_S", 3600.0)
    async with HostileServer({"/metrics": endless(PAGE, b"# more\n")}) as exporter:
        url = exporter.base_url + "/metrics"
        async with asyncio.timeout(30):  # a hang guard
            with pytest.raises(GpuMetricsUrlError, match=r"the answer is over 16 MiB"):
                await check_gpu_metrics_urls([url])
            sampler = PowerSampler([url], 3600.0)
            await sampler.start()  # one sample of every URL
            sampler.cancel()
            await sampler.stop()
    assert MAX_PAGE_BYTES == 16 << 20
    assert [s.readings for s in sampler.series()[0].samples] == [None, None]  # cut, not read


async def test_an_exporter_redirect_to_another_origin_is_not_followed() -> None:
    async with (
        HostileServer({"/metrics": EXPORTER}) as elsewhere,
        HostileServer({"/metrics": redirect(elsewhere.base_url + "/metrics")}) as exporter,
    ):
        url = exporter.base_url + "/metrics"
        with pytest.raises(GpuMetricsUrlError, match=r"does not follow redirects to another"):
            await check_gpu_metrics_urls([url])
        sampler = PowerSampler([url], 10.0)
        await sampler.start()
        sampler.cancel()
        series = await sampler.stop()
        assert all(s.readings is None for s in series[0].samples)
        assert elsewhere.requests == []


async def test_a_same_origin_redirect_is_still_followed() -> None:
    async with HostileServer({"/metrics": redirect("/gpu"), "/gpu": EXPORTER}) as exporter:
        await check_gpu_metrics_urls([exporter.base_url + "/metrics"])
        assert exporter.paths() == ["/metrics", "/gpu"]


async def test_a_model_list_bomb_stops_the_preflight_with_one_line() -> None:
    async with (
        HostileServer({"/v1/models": compressed(BOMB, "application/json")}) as server,
        open_session(max_connections=1) as session,
    ):
        with pytest.raises(PreflightError) as caught:
            await find_model(session, server.base_url, None)
    assert str(caught.value).startswith(f"GET {server.base_url}/v1/models: the answer is compr")


def metrics_port_run(base_url: str, tmp_path: Path) -> list[str]:
    """A run with `--metrics-port`, which looks the model up before its preflight."""
    return ["--base-url", base_url, *RUN, "--results", str(tmp_path / "r"), "--metrics-port", "0"]


async def test_the_metrics_port_model_lookup_does_not_follow_a_redirect_away(
    tmp_path: Path,
) -> None:
    """`--metrics-port` looks the model up before the run's own preflight: that lookup
    used a session of its own that followed redirects to any origin."""
    async with (
        HostileServer() as elsewhere,
        HostileServer({"/v1/models": redirect(elsewhere.base_url + "/v1/models")}) as server,
    ):
        status, lines = await loadgen(
            *metrics_port_run(server.base_url, tmp_path), "--header", "X-Api-Key: k-secret"
        )
        assert status == 1, lines
        assert "does not follow redirects to another origin" in one_line(lines)
        assert elsewhere.requests == []
        # the lookup carries the run's headers (--header, --api-key) as the run does
        assert server.requests[0].headers["x-api-key"] == "k-secret"
        assert server.requests[0].headers["accept-encoding"] == "identity"


async def test_a_metrics_port_model_lookup_answered_with_a_gzip_bomb_stays_small(
    tmp_path: Path,
) -> None:
    """`--metrics-port` asks /v1/models for its label before the run's preflight; a
    1 MiB gzip answer inflating to 1 GiB took that lookup's process to 2.1 GiB (its
    session inflated without a bound). Now the answer is refused unread: one line, exit
    1, and the process's peak RSS stays far below the inflated size."""
    bomb = compressed(gzip_bomb(INFLATED), "application/json")
    async with HostileServer({"/v1/models": bomb}) as server:
        status, err, peak = await asyncio.wait_for(
            asyncio.to_thread(peak_rss_of_loadgen, *metrics_port_run(server.base_url, tmp_path)),
            90,
        )
    assert status == 1, err
    line = one_line(err.strip().splitlines())
    assert f"GET {server.base_url}/v1/models: the answer is compressed" in line, line
    assert server.requests[0].headers["accept-encoding"] == "identity"
    assert peak < PEAK_RSS_BOUND, f"peak RSS {peak >> 20} MiB"
    assert not (tmp_path / "r").exists()  # stopped before the run began


# --- names from the server are data ---------------------------------------------------------

HOSTILE_NAMES = ["\x1b]0;owned\x07m1", "m2\x1b[2J\x1b[31m\r", "\u202eevil"]


async def test_model_names_reach_the_terminal_without_escape_sequences(tmp_path: Path) -> None:
    models = answer_json({"data": [{"id": name} for name in HOSTILE_NAMES]})
    async with HostileServer({"/v1/models": models}) as server:
        status, lines = await loadgen(
            "--base-url", server.base_url, *RUN, "--results", str(tmp_path / "r")
        )
    assert status == 1, lines
    line = one_line(lines)
    assert "serves 3 models (]0;owned" not in line  # no half-stripped sequence either
    assert "serves 3 models (m1, m2, evil); pick one with --model" in line, line
    assert not any(ch in line for ch in "\x1b\x07\r\u202e")


@pytest.mark.parametrize(
    "model",
    ["org/" + "x" * 300, "org/m\x1b[2J\x07"],
    ids=["300-characters", "escape-sequence"],
)
async def test_a_server_model_name_becomes_a_safe_result_file_name(
    tmp_path: Path, model: str
) -> None:
    """vLLM's result file name carries the model: a 300-character name failed the write
    with ENAMETOOLONG after the point was measured; an escape sequence went into it."""
    models = answer_json({"data": [{"id": model, "max_model_len": 100000}]})
    results = tmp_path / "r"
    async with HostileServer({"/v1/models": models}) as server:
        status, lines = await loadgen(
            "--base-url",
            server.base_url,
            *RUN,
            "--results",
            str(results),
            "--encoder",
            "raw",
            "--save-result",
        )
    assert status == 0, lines
    assert not any("\x1b" in line for line in lines)
    written = [p for p in results.iterdir() if p.name.startswith("vllm-")]
    assert len(written) == 1, sorted(p.name for p in results.iterdir())
    name = written[0].name
    assert len(name.encode()) <= 255 and name.isprintable(), name
    assert orjson.loads(written[0].read_bytes())["model_id"] == model  # the data, as served


def test_a_name_part_is_safe_bounded_and_keeps_long_names_apart() -> None:
    assert name_part("Qwen3-8B") == "Qwen3-8B"
    assert name_part("DeepSeek-V3.2") == "DeepSeek-V3.2"
    assert name_part("../..") == "_.."
    assert name_part("a/b\x1b[2J c") == "a_b_2J_c"
    a, b = name_part("m" * 300 + "a"), name_part("m" * 300 + "b")
    assert len(a) == len(b) == 80 and a != b
