"""Issue 21, "Done when": `pip install` of loadgen into a venv that already holds a newer
aiohttp does not downgrade it, and the native client still runs.

No aiohttp newer than 3.14.3 exists offline (this machine's only index is local), so the
3.14.3 wheel is re-labelled 3.15.0: the same code under a higher version (dist-info
name, METADATA, `__version__`, RECORD hashes). What is proved is pip's resolution (no
upper pin, nothing in loadgen's dependency tree asking for an older aiohttp) and that
a run needs nothing of aiohttp's beyond what the installed release has. pip runs with this
machine's own configuration (its local index and find-links, as scripts/_venv.sh's
install does); loadgen is installed from a copy of the tree, non-editable, with its
dependencies resolved.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
NEW = "3.15.0"

pytestmark = [pytest.mark.install, pytest.mark.timeout(420)]


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def relabel(wheel: Path, out: Path) -> Path:
    """`wheel` (an aiohttp 3.14) as aiohttp NEW: a valid wheel pip installs as that version."""
    old = wheel.name.split("-")[1]  # the wheel's own version
    old_info, new_info = f"aiohttp-{old}.dist-info", f"aiohttp-{NEW}.dist-info"
    with zipfile.ZipFile(wheel) as source:
        files = {i.filename.replace(old_info, new_info): source.read(i) for i in source.infolist()}
    meta, record = f"{new_info}/METADATA", f"{new_info}/RECORD"
    files[meta] = files[meta].replace(
        f"\nVersion: {old}\n".encode(), f"\nVersion: {NEW}\n".encode()
    )
    init = files["aiohttp/__init__.py"]
    files["aiohttp/__init__.py"] = init.replace(f'"{old}"'.encode(), f'"{NEW}"'.encode())
    assert files["aiohttp/__init__.py"] != init and f"Version: {NEW}".encode() in files[meta]
    rows = [f"{name},{_digest(data)},{len(data)}" for name, data in files.items() if name != record]
    files[record] = ("\n".join([*rows, f"{record},,"]) + "\n").encode()
    target = out / wheel.name.replace(f"aiohttp-{old}-", f"aiohttp-{NEW}-")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return target


def local_wheel() -> Path:
    """The newest aiohttp wheel for this Python in the local index (pip's configuration's)."""
    found = sorted(Path("/opt/pypi/files").glob(f"aiohttp-3.*-cp3{sys.version_info[1]}-*.whl"))
    if not found:
        pytest.skip("no local aiohttp wheel for this Python under /opt/pypi/files")
    return found[-1]


def pip(venv_python: Path, *args: str) -> str:
    """This interpreter's pip acting on the venv (no pip inside it: ~20 s saved)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv_python), "install", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def version_in(venv_python: Path) -> tuple[str, str]:
    code = (
        "import aiohttp, importlib.metadata as m; print(m.version('aiohttp'), aiohttp.__version__)"
    )
    out = subprocess.run([str(venv_python), "-c", code], capture_output=True, text=True, check=True)
    installed, imported = out.stdout.split()
    return installed, imported


def _not_the_source(directory: str, names: list[str]) -> set[str]:
    """What the copy leaves out: the top level's checkouts, venvs and results (not
    loadgen/results/, a package), and build leftovers anywhere."""
    top = {"results", "build"} | {n for n in names if n.startswith(".")}
    anywhere = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
    return anywhere | (top & set(names) if Path(directory) == ROOT else set())


def test_installing_loadgen_keeps_a_newer_aiohttp_and_runs(tmp_path: Path) -> None:
    wheel = relabel(local_wheel(), tmp_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    pip(python, "--quiet", str(wheel))
    assert version_in(python) == (NEW, NEW)
    tree = tmp_path / "loadgen"  # a copy: building in place would leave build/ in the repo
    shutil.copytree(ROOT, tree, ignore=_not_the_source)
    out = pip(python, str(tree))
    assert "Successfully installed" in out and "loadgen-" in out
    assert "aiohttp" not in out.split("Successfully installed")[1]  # not reinstalled
    assert version_in(python) == (NEW, NEW)

    results = tmp_path / "results"
    run = subprocess.run(
        [
            *(str(tmp_path / "venv" / "bin" / "loadgen"), "--sim", "--conc", "2"),
            *("--isl", "16", "--osl", "8", "--prompts-per-conc", "4", "--warmup-per-conc", "1"),
            *("--result-dir", str(results), "--no-progress"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},  # the venv's loadgen, not this tree's
    )
    assert run.returncode == 0, run.stderr[-3000:]
    point = orjson.loads((results / "conc_2.json").read_bytes())
    assert point["http_client"] == "native"
    requests = 2 * 4  # --prompts-per-conc is per slot of the concurrency
    assert point["completed"] == requests and point["failed"] == 0
    assert point["total_output_tokens"] == requests * 8
