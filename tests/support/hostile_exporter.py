"""A GPU exporter for tests that says what it is told: dcgm-exporter's page layout, over a
real socket, with power and energy counter values a test scripts per scrape.

    async with HostileExporter(power=lambda n, t: 300.0, energy=lambda n, t: 0.0) as ex:
        ... ex.url ...   # GPUs drawing 300 W whose counter never advances

`power(n, t)` and `energy(n, t)` get the scrape's number (0 first) and the seconds since
the exporter started, and return the watts (a float, or a string written as is, such as
"NaN") and the counter in joules (written in mJ, as dcgm-exporter does; None leaves the
counter out). `padding` adds that many bytes of other series per page, as a real
dcgm-exporter page carries dozens of fields per GPU.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from types import TracebackType

from aiohttp import web

Value = float | str | None


def honest_energy(watts: float) -> Callable[[int, float], Value]:
    """A counter that advances at `watts` since the exporter started (J)."""
    return lambda _n, t: 1_000_000.0 + watts * t


class HostileExporter:
    def __init__(
        self,
        *,
        power: Callable[[int, float], Value],
        energy: Callable[[int, float], Value],
        gpus: int = 2,
        padding: int = 0,
        uuids: tuple[str, ...] | None = None,
    ) -> None:
        self.power, self.energy, self.gpus = power, energy, gpus
        self.uuids = uuids or tuple(f"GPU-{uuid.uuid4()}" for _ in range(gpus))
        self.padding = _padding(padding, gpus)
        self.scrapes = 0
        self.started = time.monotonic()
        self._runner: web.AppRunner | None = None
        self.url = ""

    def page(self) -> str:
        n, t = self.scrapes, time.monotonic() - self.started
        self.scrapes += 1
        watts, joules = self.power(n, t), self.energy(n, t)
        lines = [
            "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
            "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
        ]
        lines += [
            f"DCGM_FI_DEV_POWER_USAGE{{{self._labels(i)}}} {_text(watts)}" for i in range(self.gpus)
        ]
        if joules is not None:
            mj = joules * 1000 if isinstance(joules, float) else joules
            lines += ["# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"]
            lines += [
                f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{self._labels(i)}}} {_text(mj)}"
                for i in range(self.gpus)
            ]
        return self.padding + "\n".join(lines) + "\n"

    def _labels(self, index: int) -> str:
        return f'gpu="{index}",UUID="{self.uuids[index]}",device="nvidia{index}",Hostname="h"'

    async def _handle(self, _request: web.Request) -> web.Response:
        return web.Response(text=self.page(), content_type="text/plain")

    async def __aenter__(self) -> HostileExporter:
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/metrics"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _text(value: Value) -> str:
    return value if isinstance(value, str) else f"{value:.3f}"


def _padding(size: int, gpus: int) -> str:
    """`size` bytes of other dcgm-exporter fields (temperatures, clocks) per page."""
    if size <= 0:
        return ""
    lines, total, i = [], 0, 0
    while total < size:
        line = f'DCGM_FI_DEV_FIELD_{i % 97}{{gpu="{i % gpus}",UUID="GPU-pad",Hostname="h"}} {i}\n'
        lines.append(line)
        total += len(line)
        i += 1
    return "# TYPE DCGM_FI_DEV_FIELD gauge\n" + "".join(lines)
