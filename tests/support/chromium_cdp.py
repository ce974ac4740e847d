"""Open a local HTML file in a real headless Chromium and report what happened.

Driven over the DevTools protocol (a websocket, with aiohttp): every console message and
uncaught exception, every network request the page made (any URL, before it is sent),
a full-page screenshot, and the value of a JavaScript expression evaluated in the page
(used to read the rendered tables back). Chromium is Debian's package
(scripts/ensure-chromium); it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.paths import ROOT


def find_chromium() -> str | None:
    """The chromium binary, installing Debian's package first when possible."""
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [str(ROOT / "scripts" / "ensure-chromium")],
            check=True,
            timeout=600,
            capture_output=True,
        )
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageReport:
    console: list[dict[str, Any]] = field(default_factory=list)  # {"level", "text"}
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    failed: list[str] = field(default_factory=list)  # requests that failed to load
    evaluated: Any = None
    screenshot: Path | None = None

    @property
    def errors(self) -> list[str]:
        return (
            [m["text"] for m in self.console if m["level"] == "error"]
            + self.exceptions
            + self.failed
        )


class _Cdp:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse, report: PageReport) -> None:
        self.ws = ws
        self.report = report
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.loaded = asyncio.Event()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = future
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    async def listen(self) -> None:
        async for message in self.ws:
            data = message.json()
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            else:
                self._event(data.get("method", ""), data.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        r = self.report
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            r.console.append(
                {
                    "level": "error" if params["type"] in ("error", "assert") else params["type"],
                    "text": text,
                }
            )
        elif method == "Log.entryAdded":
            entry = params["entry"]
            r.console.append({"level": entry["level"], "text": entry.get("text", "")})
        elif method == "Runtime.exceptionThrown":
            r.exceptions.append(str(params["exceptionDetails"].get("text")))
        elif method == "Network.requestWillBeSent":
            r.requests.append(params["request"]["url"])
        elif method == "Network.loadingFailed":
            r.failed.append(f"request failed: {params.get('errorText')}")
        elif method == "Page.loadEventFired":
            self.loaded.set()


@contextlib.asynccontextmanager
async def _browser(binary: str) -> AsyncIterator[int]:
    # Chromium's helper processes may still write to the profile as the browser exits.
    with tempfile.TemporaryDirectory(
        prefix="loadgen-chromium-", ignore_cleanup_errors=True
    ) as profile:
        process = await asyncio.create_subprocess_exec(
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            for _ in range(300):
                if port_file.is_file() and port_file.read_text().strip():
                    break
                if process.returncode is not None:
                    raise RuntimeError(f"chromium exited with {process.returncode}")
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("chromium did not open its DevTools port in 30 s")
            yield int(port_file.read_text().splitlines()[0])
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 10)
                except TimeoutError:
                    process.kill()
                    await process.wait()


async def open_page(binary: str, url_of_page: str, screenshot: Path, expression: str) -> PageReport:
    """Load the page (a file: URL), wait for it, screenshot it whole, evaluate `expression`."""
    report = PageReport()
    async with _browser(binary) as port, aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        async with session.ws_connect(url, max_msg_size=0) as ws:
            cdp = _Cdp(ws, report)
            listener = asyncio.create_task(cdp.listen())
            try:
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await cdp.call(f"{domain}.enable")
                await cdp.call(
                    "Emulation.setDeviceMetricsOverride",
                    width=1280,
                    height=900,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                await cdp.call("Page.navigate", url=url_of_page)
                await asyncio.wait_for(cdp.loaded.wait(), 30)
                await asyncio.sleep(0.5)  # late requests and console messages, if any
                size = (await cdp.call("Page.getLayoutMetrics"))["cssContentSize"]
                shot = await cdp.call(
                    "Page.captureScreenshot",
                    format="png",
                    captureBeyondViewport=True,
                    clip={
                        "x": 0,
                        "y": 0,
                        "width": size["width"],
                        "height": min(size["height"], 16000),
                        "scale": 1,
                    },
                )
                await asyncio.to_thread(screenshot.write_bytes, base64.b64decode(shot["data"]))
                report.screenshot = screenshot
                value = await cdp.call(
                    "Runtime.evaluate", expression=expression, returnByValue=True
                )
                report.evaluated = value.get("result", {}).get("value")
            finally:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
    return report
