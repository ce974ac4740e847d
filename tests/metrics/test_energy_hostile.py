"""--gpu-metrics against exporters that lie: sweeps over real sockets (the simulator serves
the requests, tests/support/hostile_exporter.py the GPU readings), each point's energy
judged from the readings alone.

A GPU drawing 300 W whose counter does not move, a counter that jumps once by a
megajoule-scale glitch, NaN/Inf or negative power: each used to be published as valid
(0 J and 0.000 J/tok, 283 MW per GPU, null figures, negative energy). Now each point is
invalid with its reason, and the honest exporter beside them stays valid.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from loadgen.client import gpu_metrics
from loadgen.client.gpu_metrics import GpuMetricsUrlError
from loadgen.config.spec import RunSpec, SpecError
from loadgen.errors import UsageError
from loadgen.orchestrate.measure import measure
from loadgen.run.sweep import SweepOptions
from loadgen.scale.sweep import run_sweep
from loadgen.sim.config import SimConfig
from loadgen.sim.server import running_simulator
from tests.support.hostile_exporter import HostileExporter, Value, honest_energy

SIM = SimConfig(step_fixed_ms=2.0, decode_token_us=20.0, spin_us=0.0)


def spec(tmp_path: Path, url: str, gpu_urls: tuple[str, ...], **changes: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        conc=(2,),
        isl=32,
        osl=300,
        prompts_per_conc=2,
        warmup_per_conc=0,
        base_url=url,
        results_dir=tmp_path / "results",
        progress=False,
        gpu_metrics=gpu_urls,
        gpu_metrics_interval_s=0.2,
        vllm_result=None,
    )
    values.update(changes)
    return RunSpec.flat(**values)


def constant(value: Value) -> Callable[[int, float], Value]:
    return lambda _n, _t: value


def glitch(n: int, t: float) -> Value:
    """Honest at 300 W, but from the third scrape on the counter reads 1 GJ higher."""
    return 1_000_000.0 + 300.0 * t + (1e9 if n >= 2 else 0.0)


CASES = {
    # name: (power, energy, the reason the point must carry)
    "stuck counter": (constant(300.0), constant(5_000_000.0), "counter_stalled"),
    "glitched counter": (constant(300.0), glitch, "counter_power_mismatch"),
    "NaN power": (constant("NaN"), None, "power_not_finite"),
    "Inf power": (constant("+Inf"), None, "power_not_finite"),
    "negative power": (constant(-300.0), None, "power_negative"),
    "NaN counter": (constant(300.0), constant("NaN"), "counter_not_finite"),
}


async def run_point(
    tmp_path: Path, tokenizer: Tokenizer, exporter: HostileExporter
) -> dict[str, Any]:
    async with running_simulator(SIM, tokenizer=tokenizer) as sim, exporter:
        outcome = await measure(spec(tmp_path, sim.base_url, (exporter.url,)), tokenizer=tokenizer)
    assert outcome.exit_code == 0
    point: dict[str, Any] = json.loads((outcome.results_dir / "conc_2.json").read_text())
    assert point["complete"] is True and point["completed"] == 4  # the point itself stands
    return point


@pytest.mark.parametrize("case", list(CASES))
async def test_a_lying_exporter_makes_the_energy_invalid_with_its_reason(
    case: str, tmp_path: Path, tokenizer: Tokenizer
) -> None:
    power, energy, reason = CASES[case]
    point = await run_point(
        tmp_path, tokenizer, HostileExporter(power=power, energy=energy or constant(None))
    )
    assert point["power_valid"] is False, point["power_invalid_reasons"]
    assert reason in point["power_invalid_reasons"]
    assert point["total_gpu_energy_j"] is None and point["joules_per_output_token"] is None
    assert reason in point["gpu_energy"][0]["issues"]


async def test_an_honest_exporter_beside_them_is_valid(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """The control: 300 W and a counter advancing at 300 W on 2 GPUs."""
    point = await run_point(
        tmp_path, tokenizer, HostileExporter(power=constant(300.0), energy=honest_energy(300.0))
    )
    assert point["power_valid"] is True and point["power_invalid_reasons"] == []
    assert point["energy_source"] == "counter" and point["power_num_gpus"] == 2
    assert point["avg_power_w"] == pytest.approx(300.0, rel=0.05)


async def test_the_same_exporter_twice_is_refused_before_the_sweep(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """Under two names (127.0.0.1 and localhost) its GPUs' UUIDs give it away; the same
    URL twice is refused by the options' own check."""
    exporter = HostileExporter(power=constant(300.0), energy=honest_energy(300.0))
    async with running_simulator(SIM, tokenizer=tokenizer) as sim, exporter:
        other_name = exporter.url.replace("127.0.0.1", "localhost")
        with pytest.raises(GpuMetricsUrlError, match=r"both serve GPU GPU-.*count its GPUs twice"):
            await measure(
                spec(tmp_path, sim.base_url, (exporter.url, other_name)), tokenizer=tokenizer
            )
        assert not (tmp_path / "results" / "conc_2.json").exists()
    with pytest.raises(SpecError, match=r"--gpu-metrics http://.*: given twice"):
        spec(tmp_path, "http://127.0.0.1:9", (exporter.url, exporter.url))


@pytest.mark.exclusive
async def test_two_exporters_of_different_gpus_are_counted_once_each(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """4 GPUs, 800 W in all (counted twice: 1600 W). The average is the counters' delta
    over the scrapes' times: few scrapes in a short point, so a late one moves it, and it
    is checked to 5 %: run alone, the figure printed."""
    one = HostileExporter(power=constant(300.0), energy=honest_energy(300.0))
    two = HostileExporter(power=constant(100.0), energy=honest_energy(100.0))
    async with running_simulator(SIM, tokenizer=tokenizer) as sim, one, two:
        outcome = await measure(
            spec(tmp_path, sim.base_url, (one.url, two.url), prompts_per_conc=6),
            tokenizer=tokenizer,
        )
    point = json.loads((outcome.results_dir / "conc_2.json").read_text())
    print(f"two exporters: {point['avg_total_gpu_power_w']} W on {point['power_num_gpus']} GPUs")
    assert point["power_valid"] is True and point["power_num_gpus"] == 4
    assert point["avg_total_gpu_power_w"] == pytest.approx(800.0, rel=0.05)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
async def test_a_power_csv_that_is_no_regular_file_is_refused_with_one_line(
    kind: str, tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """A FIFO blocked the read past Ctrl-C and /dev/zero grew without bound (the device
    case, run against a loadgen without the check, reads until memory runs out)."""
    path = {"fifo": tmp_path / "gpu.fifo", "device": Path("/dev/zero"), "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(UsageError, match=r"--gpu-power-csv .*: not a regular file") as caught:
        await asyncio.wait_for(
            run_sweep(
                spec(tmp_path, "http://127.0.0.1:9", (), gpu_power_csv=path),
                SweepOptions(tokenizer=tokenizer),
            ),
            10,
        )
    assert "\n" not in str(caught.value)


def test_the_power_csv_is_read_once_as_it_grows(tmp_path: Path) -> None:
    """Each point reads only what the recorder appended since the last one: rows already
    read are never read again (the whole file used to be re-read after every point)."""
    path = tmp_path / "gpu.csv"
    path.write_text("timestamp, index, power.draw [W]\n100.0, 0, 300 W\n101.0, 0, 300 W\n102.0, 0")
    tail = gpu_metrics.PowerCsvTail(path)
    tail.read_new()
    assert tail.rows == {"0": [(100.0, 300.0), (101.0, 300.0)]}  # the half row waits
    # the recorder finishes the row and appends; an earlier row changed on disk is not read
    text = path.read_text().replace("100.0, 0, 300 W", "100.0, 0, 999 W")
    path.write_text(text + ", 250 W\n103.0, 0, 250 W\n")
    tail.read_new()
    assert tail.rows["0"] == [(100.0, 300.0), (101.0, 300.0), (102.0, 250.0), (103.0, 250.0)]
    assert tail.offset == path.stat().st_size
    assert tail.rows_after(101.5) == {"0": [(102.0, 250.0), (103.0, 250.0)]}
    assert tail.rows["0"] == [(102.0, 250.0), (103.0, 250.0)]  # older rows let go
    path.write_text("timestamp, index, power.draw [W]\n200.0, 1, 100 W\n")  # rotated
    tail.read_new()
    assert tail.rows == {"1": [(200.0, 100.0)]}
