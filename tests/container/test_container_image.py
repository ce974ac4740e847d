"""loadgen's image, built from docker/Dockerfile and run, with no Docker engine.

scripts/container_image.py builds a Debian bookworm base with debootstrap and the
Dockerfile on it with buildah (chroot isolation), cached under ~/.cache/loadgen/
containers. The sidecar then runs from the image (`buildah run --network host`) against
the simulator on 127.0.0.1: the image's own HEALTHCHECK, an authenticated run, /metrics.
Skipped, with the reason printed, only where debootstrap/buildah cannot be had (not root,
packages not installable): a Dockerfile that does not build fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest

from tests.support.paths import ROOT

MODEL = "sim-model"
pytestmark = pytest.mark.container


def _load_script() -> ModuleType:
    path = ROOT / "scripts" / "container_image.py"
    spec = importlib.util.spec_from_file_location("container_image", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules["container_image"] = module
    spec.loader.exec_module(module)
    return module


container_image = _load_script()


@dataclass(frozen=True)
class Image:
    cache: Path
    tag: str
    info: dict[str, Any]

    def buildah(self, *args: str) -> list[str]:
        return list(container_image.buildah(self.cache, *args))

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.buildah(*args), capture_output=True, text=True, timeout=timeout, check=False
        )


@pytest.fixture(scope="module")
def image() -> Image:
    reason = os.environ.get("LOADGEN_SKIP_CONTAINER") or container_image.missing_tools()
    if reason:
        print(f"\nSKIPPING the container tests: {reason}", file=sys.stderr)  # and in -ra
        pytest.skip(reason)
    cache = container_image.cache_root()
    started = time.perf_counter()
    info = container_image.build(cache)  # a PrepareError here is a failure, not a skip
    print(
        f"\ncontainer image: {json.dumps(info)} in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    return Image(cache, info["tag"], info)


@contextlib.contextmanager
def working_container(image: Image, tag: str | None = None) -> Iterator[str]:
    name = f"loadgen-test-{secrets.token_hex(4)}"
    created = image.run("from", "--pull=false", "--name", name, tag or image.tag)
    assert created.returncode == 0, created.stderr
    try:
        yield name
    finally:
        image.run("rm", name)


def in_container(
    image: Image,
    container: str,
    argv: list[str],
    env: dict[str, str] | None = None,
) -> list[str]:
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    return image.buildah(
        "run", "--isolation", "chroot", "--network", "host", *flags, container, "--", *argv
    )


def healthcheck(image: Image) -> list[str]:
    """The image's HEALTHCHECK command, as Docker would run it."""
    inspected = image.run("inspect", "--type", "image", image.tag)
    assert inspected.returncode == 0, inspected.stderr
    check = json.loads(inspected.stdout)["Docker"]["config"]["Healthcheck"]["Test"]
    assert check[0] == "CMD", check
    return list(check[1:])


def test_the_image_is_the_sidecar_image(image: Image) -> None:
    config = json.loads(image.run("inspect", "--type", "image", image.tag).stdout)
    docker = config["Docker"]["config"]
    assert docker["Entrypoint"] == ["loadgen"] and docker["User"] == "10001:10001"
    assert "9400/tcp" in docker["ExposedPorts"] and "/data" in docker["Volumes"]
    with working_container(image) as container:
        done = subprocess.run(
            in_container(
                image,
                container,
                [
                    "sh",
                    "-c",
                    "id -u; loadgen --help | head -1; "
                    "if command -v gcc || command -v cc; then echo compiler; else echo clean; fi",
                ],
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0] == "10001", "runs as the non-root user"
    assert lines[1] == "usage:" and done.stdout.strip().endswith("clean"), (
        "loadgen runs; the build stage's compiler (if any) stayed behind"
    )


def test_the_build_context_leaves_out_local_state(image: Image, tmp_path: Path) -> None:
    """.dockerignore: the context is what the Dockerfile copies, not .venv*, .git, results."""
    present = [
        name for name in (".venv", ".git", "results", ".mypy_cache") if (ROOT / name).exists()
    ]
    assert present, "nothing local to leave out: the check would prove nothing"
    probe = tmp_path / "Dockerfile"
    probe.write_text(f"FROM {container_image.BASE_TAG}\nCOPY . /ctx\n")
    tag = "localhost/loadgen-context:test"
    built = image.run(
        "bud",
        "--isolation",
        "chroot",
        "--pull=false",
        "--tag",
        tag,
        "--file",
        str(probe),
        str(ROOT),
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    try:
        with working_container(image, tag) as container:
            listed = subprocess.run(
                in_container(
                    image, container, ["sh", "-c", "cd /ctx && find . -maxdepth 2 | sort"]
                ),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
    finally:
        image.run("rmi", tag)
    assert listed.returncode == 0, listed.stderr
    files = {line.removeprefix("./") for line in listed.stdout.split()}
    assert {"pyproject.toml", "README.md", "LICENSE", "loadgen", "encoders"} <= files
    for name in present:
        assert name not in files, f"{name} is in the build context"
    assert not any("__pycache__" in f for f in files)
    assert {f.split("/")[0] for f in files} <= {
        ".",
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "loadgen",
        "encoders",
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def sidecar_in_image(
    image: Image, container: str, target: str, port: int, token: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    argv = in_container(
        image,
        container,
        [
            "loadgen",
            "serve",
            "--target",
            target,
            "--model",
            MODEL,
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            "/data",
            "--canary-conc",
            "0",
        ],
        env={"LOADGEN_API_TOKEN": token},
    )
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                os.killpg(process.pid, 9)
                await process.wait()


async def wait_healthy(
    session: aiohttp.ClientSession, url: str, process: asyncio.subprocess.Process
) -> None:
    for _ in range(600):
        if process.returncode is not None:
            assert process.stderr is not None
            raise AssertionError(f"the sidecar exited: {(await process.stderr.read())[-2000:]!r}")
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise AssertionError("the sidecar in the image did not answer /healthz within 60 s")


async def check_health(image: Image, container: str, port: int) -> int:
    """Run the image's HEALTHCHECK in the container; its exit status."""
    process = await asyncio.create_subprocess_exec(
        *in_container(
            image,
            container,
            healthcheck(image),
            env={"LOADGEN_HEALTH_URL": f"http://127.0.0.1:{port}/healthz"},
        ),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(process.wait(), 60)


async def test_the_sidecar_runs_from_the_image_against_the_simulator(image: Image) -> None:
    from loadgen.sim.server import SimConfig, running_simulator

    token, port = secrets.token_hex(16), free_port()
    base = f"http://127.0.0.1:{port}"
    config = SimConfig(model=MODEL, spec_tokens=2, step_fixed_ms=2.0)
    with working_container(image) as container:
        assert await check_health(image, container, port) != 0, "healthy with nothing running"
        async with (
            running_simulator(config) as sim,
            sidecar_in_image(image, container, sim.base_url, port, token) as process,
            aiohttp.ClientSession() as session,
        ):
            await wait_healthy(session, f"{base}/healthz", process)
            assert await check_health(image, container, port) == 0
            run = {"conc": "2", "isl": 64, "osl": 16, "prompts_per_conc": 3, "encoder": "raw"}
            async with session.post(f"{base}/v1/runs", json=run) as response:
                assert response.status == 401, "no token, no run"
            auth = {"Authorization": f"Bearer {token}"}
            async with session.post(f"{base}/v1/runs", json=run, headers=auth) as response:
                assert response.status == 202, await response.text()
                run_id = (await response.json())["id"]
            state = await wait_run(session, f"{base}/v1/runs/{run_id}", auth)
            assert state["state"] == "succeeded", state
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                metrics = await response.text()
    ok = [
        line
        for line in metrics.splitlines()
        if line.startswith("loadgen_requests_total{")
        and f'model_name="{MODEL}"' in line
        and 'outcome="ok"' in line
    ]
    assert ok and float(ok[0].rsplit(" ", 1)[1]) == 6, metrics[:2000]


async def wait_run(
    session: aiohttp.ClientSession,
    url: str,
    auth: dict[str, str],
) -> dict[str, Any]:
    for _ in range(1200):
        async with session.get(url, headers=auth) as response:
            assert response.status == 200, await response.text()
            state: dict[str, Any] = await response.json()
        if state["state"] != "running":
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"the run did not finish within 120 s: {state}")
