"""--gpu-metrics end to end: sweeps against the simulator's /gpu/metrics over real sockets.

The simulator's power model keeps every step (keep_history), so its energy over the
point's exact window is known: the ground truth the sampled figure is held to.

Sampling error bound (counter method, what dcgm-exporter's energy counter gives): inside
the window the counter delta is exact; only the two boundary intervals are interpolated
linearly. Over an interval of length Δ where power stays in [P_idle, P_max], a counter
deviates from its chord by at most (P_max - P_idle)·Δ/4, so per GPU
|error| <= 2·(P_max - P_idle)·Δ/4, plus P_max·δ per boundary for the uncertainty δ of a
sample's stamp (the midpoint of its GET, which the exporter answered somewhere inside).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from loadgen.config.args import spec_from_argv
from loadgen.config.spec import RunSpec, SpecError
from loadgen.errors import UsageError
from loadgen.orchestrate.measure import measure
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions
from loadgen.scale.sweep import run_sweep  # --workers: the pool driver
from loadgen.sim.config import SimConfig
from loadgen.sim.power import PowerConfig
from loadgen.sim.server import RunningSimulator, running_simulator
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver

POWER = PowerConfig(
    num_gpus=2,
    idle_watts=100.0,
    joules_per_token=0.02,
    joules_per_prefill_token=0.002,
    keep_history=True,
)
SIM = SimConfig(
    step_fixed_ms=2.0,
    decode_token_us=20.0,
    prefill_token_us=2.0,
    spin_us=0.0,
    spec_tokens=2,
    power=POWER,
    enable_prefix_caching=False,
)
STAMP_UNCERTAINTY_S = 0.02  # a GET on loopback, the simulator sharing the client's loop


def spec(tmp_path: Path, url: str, gpu_url: str, **changes: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        conc=(2, 8),
        isl=64,
        osl=400,
        prompts_per_conc=2,
        warmup_per_conc=1,
        base_url=url,
        results_dir=tmp_path / "results",
        progress=False,
        gpu_metrics=(gpu_url,),
        gpu_metrics_interval_s=0.25,
        num_gpus=2,
        vllm_result=None,
    )
    values.update(changes)
    return RunSpec.flat(**values)


def ground_truth_j(sim: RunningSimulator, results: Path, conc: int) -> tuple[float, float]:
    """(energy of all GPUs over the point's window, highest power in it)."""
    records = read_jsonl(results / f"requests_conc_{conc}.jsonl")
    start, end = min(r.start_ns for r in records), max(r.end_ns for r in records)
    per_gpu = sim.power.energy_j(end) - sim.power.energy_j(start)
    return POWER.num_gpus * per_gpu, sim.power.max_power_w(start, end)


async def test_energy_per_token_matches_the_simulators_ground_truth(
    tmp_path: Path, tokenizer: Tokenizer, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = CollectorRegistry()
    observer = MetricsObserver(
        LoadgenMetrics(registry), model=SIM.model, endpoint="completions", points=2
    )
    async with running_simulator(SIM, tokenizer=tokenizer) as sim:
        outcome = await measure(
            spec(tmp_path, sim.base_url, sim.base_url + "/gpu/metrics"),
            tokenizer=tokenizer,
            observer=observer,
        )
        assert outcome.exit_code == 0
        table = capsys.readouterr().out
        assert "J/tok" in table.splitlines()[0]
        sweep_csv = list(
            csv.DictReader((outcome.results_dir / "sweep.csv").read_text().splitlines())
        )
        for conc in (2, 8):
            point = json.loads((outcome.results_dir / f"conc_{conc}.json").read_text())
            truth_j, max_w = ground_truth_j(sim, outcome.results_dir, conc)
            assert point["power_valid"] is True and point["power_invalid_reasons"] == []
            assert point["energy_source"] == "counter" and point["power_num_gpus"] == 2
            gaps = [g["max_sample_gap_s"] for g in point["gpu_energy"]]
            bound = sum(
                2 * (max_w - POWER.idle_watts) * gap / 4 + 2 * max_w * STAMP_UNCERTAINTY_S
                for gap in gaps
            )
            assert abs(point["total_gpu_energy_j"] - truth_j) <= bound, (conc, truth_j, bound)
            truth_per_token = truth_j / point["total_output_tokens"]
            assert point["joules_per_output_token"] == pytest.approx(
                truth_per_token, abs=bound / point["total_output_tokens"]
            )
            assert point["avg_power_w"] == pytest.approx(
                point["total_gpu_energy_j"] / point["duration"] / 2
            )
            check_csv(outcome.results_dir, conc, point)
            row = next(r for r in sweep_csv if r["conc"] == str(conc))
            assert float(row["joules_per_output_token"]) == point["joules_per_output_token"]
            assert f"{point['joules_per_output_token']:,.3f}" in table
            gauges = {
                (s.name, s.labels.get("conc")): s.value
                for f in text_string_to_metric_families(generate_latest(registry).decode())
                for s in f.samples
            }
            assert gauges[("loadgen_joules_per_output_token", str(conc))] == pytest.approx(
                point["joules_per_output_token"]
            )
            assert gauges[("loadgen_gpu_power_watts", str(conc))] == pytest.approx(
                point["avg_power_w"]
            )


def check_csv(results: Path, conc: int, point: dict[str, Any]) -> None:
    """nvidia-smi's layout, as InferenceX's column regexes find it, bracketing the window
    on the result file's own timeline."""
    with (results / f"gpu_power_conc_{conc}.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh, skipinitialspace=True))
    assert list(rows[0]) == ["timestamp", "index", "uuid", "power.draw [W]"]
    assert {r["index"] for r in rows} == {"0", "1"}
    samples = sum(g["samples"] for g in point["gpu_energy"])
    assert len(rows) == samples
    assert all(r["power.draw [W]"].endswith(" W") for r in rows)
    times = sorted(float(r["timestamp"]) for r in rows)
    start = point["benchmark_start_time_unix"]
    assert times[0] <= start and times[-1] >= start + point["duration"]


class GoingSilent:
    """A real HTTP server in front of the simulator's /gpu/metrics that, after `answers`
    scrapes, accepts every request and never answers (a hung exporter)."""

    def __init__(self, upstream: str, answers: int) -> None:
        self.upstream, self.answers = upstream, answers
        self.seen = 0
        self.hung = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.seen += 1
        if self.seen > self.answers:
            self.hung.set()
            await asyncio.Event().wait()  # until the client gives up
        async with aiohttp.ClientSession() as session, session.get(self.upstream) as up:
            return web.Response(text=await up.text(), content_type="text/plain")


@contextlib.asynccontextmanager
async def serve(handler: GoingSilent) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/metrics", handler.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    finally:
        await runner.cleanup()


async def test_an_exporter_that_stops_answering_invalidates_only_the_energy(
    tmp_path: Path, tokenizer: Tokenizer, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_simulator(SIM, tokenizer=tokenizer) as sim:
        # answers the preflight check, the first sample and two more, then hangs
        silent = GoingSilent(sim.base_url + "/gpu/metrics", answers=4)
        async with serve(silent) as url:
            outcome = await measure(
                spec(tmp_path, sim.base_url, url, conc=(4,)), tokenizer=tokenizer
            )
    assert silent.hung.is_set() and outcome.exit_code == 0
    point = json.loads((outcome.results_dir / "conc_4.json").read_text())
    assert point["power_valid"] is False
    assert "exporter_unanswered" in point["power_invalid_reasons"]
    assert point["total_gpu_energy_j"] is None and point["joules_per_output_token"] is None
    # the point itself is untouched: complete, every request measured
    assert point["complete"] is True and point["completed"] == 8 and point["failed"] == 0
    assert point["output_throughput"] > 0 and point["duration"] > 0
    assert "J/tok -: the point's GPU power samples are not valid" in capsys.readouterr().out


async def test_gpu_metrics_sim_samples_the_embedded_simulator_beside_workers(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """The parent samples; worker processes (which only send) never see --gpu-metrics."""
    spec = spec_from_argv(
        [
            "--sim",
            "--sim-args",
            "--num-gpus 4 --step-fixed-ms 2 --decode-token-us 20 --spin-us 0",
            "--conc",
            "2",
            "--isl",
            "64",
            "--osl",
            "300",
            "--prompts-per-conc",
            "2",
            "--results",
            str(tmp_path / "r"),
            "--no-progress",
            "--gpu-metrics",
            "sim",
            "--gpu-metrics-interval",
            "0.25",
            "--num-gpus",
            "4",
            "--workers",
            "2",
        ],
        env={},
    )
    outcome = await run_sweep(spec, SweepOptions(tokenizer=tokenizer))
    point = outcome.points[0].result.energy
    assert point is not None and point.power_valid and point.power_num_gpus == 4
    assert point.joules_per_output_token is not None and point.joules_per_output_token > 0
    with pytest.raises(SpecError, match="or be `sim`, with --sim"):
        spec_from_argv(
            [
                "--base-url",
                "http://x",
                "--conc",
                "1",
                "--isl",
                "8",
                "--osl",
                "8",
                "--gpu-metrics",
                "sim",
            ],
            env={},
        )


async def record_like_nvidia_smi(
    sim: RunningSimulator, path: Path, interval_s: float, stop: asyncio.Event
) -> None:
    """What `nvidia-smi --query-gpu=timestamp,index,power.draw --format=csv -lms N -f FILE`
    writes (local-time stamps, "W" units), from the simulator's GPUs."""
    with path.open("w", buffering=1) as fh:
        fh.write("timestamp, index, power.draw [W]\n")
        while not stop.is_set():
            watts, _ = sim.power.read(time.perf_counter_ns())
            stamp = datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            for gpu in range(sim.config.power.num_gpus):
                fh.write(f"{stamp}, {gpu}, {watts:.2f} W\n")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


async def test_gpu_power_csv_recorded_meanwhile_gives_the_energy(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    config = dataclasses.replace(SIM, power=dataclasses.replace(POWER, average_s=0.1))
    telemetry, stop = tmp_path / "gpu_metrics.csv", asyncio.Event()
    async with running_simulator(config, tokenizer=tokenizer) as sim:
        recorder = asyncio.create_task(record_like_nvidia_smi(sim, telemetry, 0.1, stop))
        await asyncio.sleep(0.3)
        outcome = await run_sweep(
            spec(tmp_path, sim.base_url, "", conc=(4,), gpu_metrics=(), gpu_power_csv=telemetry),
            SweepOptions(tokenizer=tokenizer),
        )
        stop.set()
        await recorder
        point = json.loads((outcome.results_dir / "conc_4.json").read_text())
        truth_j, _ = ground_truth_j(sim, outcome.results_dir, 4)
    assert point["power_valid"] is True and point["energy_source"] == "power"
    assert point["power_num_gpus"] == 2
    assert point["total_gpu_energy_j"] == pytest.approx(truth_j, rel=0.05)
    (tmp_path / "bad.csv").write_text("time, watts\n")
    with pytest.raises(
        UsageError,
        match=r"--gpu-power-csv .*bad\.csv: its header "
        r"\['time', 'watts'\] has no power / GPU index column",
    ):
        await run_sweep(
            spec(
                tmp_path / "bad",
                "http://127.0.0.1:9",
                "",
                gpu_metrics=(),
                gpu_power_csv=tmp_path / "bad.csv",
            ),
            SweepOptions(tokenizer=tokenizer),
        )
