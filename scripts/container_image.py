#!/usr/bin/env python3
"""Build loadgen's image from docker/Dockerfile and run it, without a Docker engine.

    python3 scripts/container_image.py prepare   # the Debian base image, cached; prints JSON
    python3 scripts/container_image.py build     # loadgen's image on it; prints JSON

Debian's packages give what is needed (scripts/ensure-container-tools installs them):
`debootstrap --variant=minbase --include=python3,python3-venv bookworm` makes a root file
system that is imported as the base image localhost/debian-python:bookworm, and `buildah
bud --isolation chroot` builds the Dockerfile on it (its base is the PYTHON_IMAGE build
argument; users keep the official Python image). `buildah run --isolation chroot
--network host` then runs commands in the image. No daemon, no user namespaces, no
cgroups: what this machine (gVisor, hybrid cgroups, no crun rlimits) allows.

Everything lives under ${XDG_CACHE_HOME:-~/.cache}/loadgen/containers (override with
LOADGEN_CONTAINER_CACHE): buildah's storage and a marker for the base image, keyed by
this recipe and by the CA bundle pip uses here. A second run reuses the base image (about
a minute to make) and buildah's layer cache (the dependency layer depends on
pyproject.toml only), so a rebuild after a code change takes seconds. CI runs in a fresh
clone: the cache lives outside the checkout.

pip inside the build is configured as pip is on this machine: an `index-url` from `pip
config` (or PIP_INDEX_URL) is passed as the PIP_INDEX_URL build argument, and the CA
bundle pip trusts here (`cert`, or PIP_CERT) becomes the base image's system bundle,
which Debian's pip reads. Nothing about this machine is written into the repository.

Standard library only; needs root (debootstrap, chroot isolation).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv")
BASE_TAG = f"localhost/debian-python:{SUITE}"
IMAGE_TAG = "localhost/loadgen:test"
RECIPE = 1  # bump when the base image recipe below changes
MARKER = "base-image.json"
SYSTEM_CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"  # what Debian's pip trusts


class PrepareError(RuntimeError):
    """The image could not be built; the message says which step and why."""


def log(message: str) -> None:
    print(f"container_image: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    if explicit := os.environ.get("LOADGEN_CONTAINER_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loadgen" / "containers"


def missing_tools() -> str | None:
    """Why images cannot be built here, or None."""
    if os.geteuid() != 0:
        return "building images needs root (debootstrap, buildah --isolation chroot)"
    absent = [tool for tool in ("debootstrap", "buildah") if shutil.which(tool) is None]
    if absent:
        return (
            f"{' and '.join(absent)} not installed (Debian packages; "
            "scripts/ensure-container-tools installs them)"
        )
    return None


def buildah(cache: Path, *args: str) -> list[str]:
    return [
        "buildah",
        "--root",
        str(cache / "storage"),
        "--runroot",
        str(cache / "run"),
        "--storage-driver",
        os.environ.get("LOADGEN_BUILDAH_DRIVER", "overlay"),
        *args,
    ]


def run_step(argv: Sequence[str], what: str, *, quiet: bool = False) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        list(argv),
        stdout=subprocess.PIPE if quiet else sys.stderr,
        stderr=subprocess.STDOUT if quiet else sys.stderr,
        check=False,
    )
    if result.returncode != 0:
        tail = (result.stdout or b"").decode(errors="replace").strip().splitlines()[-5:]
        raise PrepareError(
            f"{what} failed (exit {result.returncode})" + (": " + " | ".join(tail) if tail else "")
        )
    return round(time.perf_counter() - started, 1)


def output(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False).stdout.strip()


def pip_setting(name: str, env: str) -> str | None:
    """A pip setting as pip resolves it here: environment first, then its config files."""
    if value := os.environ.get(env):
        return value
    for scope in ("global", "user", "site"):
        value = output([sys.executable, "-m", "pip", "config", "get", f"{scope}.{name}"])
        if value:
            return value
    return None


def pip_build_args() -> list[str]:
    """--build-arg PIP_INDEX_URL=... when pip here uses an index other than its default
    (only http(s): a file:// index on this disk is not inside the build)."""
    index = pip_setting("index-url", "PIP_INDEX_URL")
    if index and index.startswith(("http://", "https://")):
        return ["--build-arg", f"PIP_INDEX_URL={index}"]
    return []


def pip_ca_bundle() -> Path | None:
    cert = pip_setting("cert", "PIP_CERT")
    return Path(cert) if cert and Path(cert).is_file() else None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialize concurrent runs (two pytest sessions) on one cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def base_key(ca_bundle: Path | None) -> str:
    digest = hashlib.sha256(f"{RECIPE} {SUITE} {' '.join(PACKAGES)}".encode())
    if ca_bundle is not None:
        digest.update(ca_bundle.read_bytes())
    return digest.hexdigest()[:16]


def image_exists(cache: Path, tag: str) -> bool:
    return bool(output(buildah(cache, "images", "--quiet", tag)))


def prepare(cache: Path) -> dict[str, Any]:
    """The base image, built once per recipe and CA bundle."""
    if reason := missing_tools():
        raise PrepareError(reason)
    ca_bundle = pip_ca_bundle()
    key = base_key(ca_bundle)
    with locked(cache / ".lock"):
        marker = cache / MARKER
        if marker.is_file() and image_exists(cache, BASE_TAG):
            info = json.loads(marker.read_text())
            if info.get("key") == key:
                return dict(info, cached=True)
        info = {"key": key, "tag": BASE_TAG, "timings": make_base(cache, ca_bundle)}
        marker.write_text(json.dumps(info, indent=1))
    return dict(info, cached=False)


def make_base(cache: Path, ca_bundle: Path | None) -> dict[str, float]:
    rootfs = cache / "rootfs"
    if rootfs.exists():
        shutil.rmtree(rootfs)
    timings = {
        "debootstrap_s": run_step(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(rootfs),
            ],
            "debootstrap",
            quiet=True,
        )
    }
    # The official Python image has `python`; Debian names it python3 only.
    (rootfs / "usr" / "bin" / "python").symlink_to("python3")
    if ca_bundle is not None:
        shutil.copyfile(ca_bundle, rootfs / SYSTEM_CA_BUNDLE)
    shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    started = time.perf_counter()
    archive = cache / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    shutil.rmtree(rootfs)
    container = output(buildah(cache, "from", "--pull=false", "scratch"))
    if not container:
        raise PrepareError("buildah from scratch gave no container")
    try:
        run_step(buildah(cache, "add", container, str(archive), "/"), "buildah add", quiet=True)
        run_step(
            buildah(
                cache,
                "config",
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--cmd",
                "python3",
                container,
            ),
            "buildah config",
            quiet=True,
        )
        run_step(
            buildah(cache, "commit", "--quiet", container, BASE_TAG), "buildah commit", quiet=True
        )
    finally:
        subprocess.run(buildah(cache, "rm", container), capture_output=True, check=False)
        archive.unlink(missing_ok=True)
    timings["import_s"] = round(time.perf_counter() - started, 1)
    return timings


def build(
    cache: Path,
    *,
    tag: str = IMAGE_TAG,
    context: Path = ROOT,
    dockerfile: Path = ROOT / "docker" / "Dockerfile",
) -> dict[str, Any]:
    """loadgen's image from the Dockerfile, on the cached base (buildah's layer cache)."""
    base = prepare(cache)
    argv = buildah(
        cache,
        "bud",
        "--isolation",
        "chroot",
        "--network",
        "host",
        "--layers",
        "--format",
        "docker",
        "--pull=false",
        "--build-arg",
        f"PYTHON_IMAGE={BASE_TAG}",
        *pip_build_args(),
        "--tag",
        tag,
        "--file",
        str(dockerfile),
        str(context),
    )
    with locked(cache / ".lock"):
        seconds = run_step(argv, f"buildah bud {dockerfile.name}", quiet=True)
    return {"tag": tag, "base": base, "build_s": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("prepare", "build"))
    args = parser.parse_args(argv)
    cache = cache_root()
    try:
        info = prepare(cache) if args.command == "prepare" else build(cache)
    except PrepareError as error:
        log(f"error: {error}")
        return 1
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
