"""The sidecar against hostile network clients, over real sockets on 127.0.0.1: paths
that would lead out of its data directory, sweep documents built to exhaust memory,
credentials in every header form, idle connections held open."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hostile_documents import laughs
from test_service import call, sidecar

from loadgen.config.args import spec_from_argv
from loadgen.config.spec import SpecError
from loadgen.sidecar.options import Escapes, spec_for
from loadgen.sidecar.service import ServiceConfig

# Nothing listens there: every request in these tests is refused before a run starts.
NO_TARGET = "http://127.0.0.1:9"
RUN = {"conc": "1", "isl": 64, "osl": 16, "encoder": "raw", "save_result": True}


def outside_files(tmp_path: Path) -> list[Path]:
    """Everything under tmp_path but outside its data/ directory."""
    return [p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "data")]


@pytest.mark.parametrize("label", ["../../tmp/x", "/tmp/x", "../../../../outside/x"])
async def test_a_label_cannot_put_the_result_file_outside_the_data_dir(
        tmp_path: Path, label: str) -> None:
    async with sidecar(tmp_path / "data", NO_TARGET) as client:
        status, body = await call(client, "POST", "/v1/runs", {**RUN, "label": label})
        assert status == 400, body
        assert body["error"].startswith(f"--label {label!r}: a label, not a path")
        assert "\n" not in body["error"]
        document = {**RUN, "lanes": [{"name": "a"}, {"name": "b", "label": label}]}
        status, body = await call(client, "POST", "/v1/runs", document)
        assert status == 400, body
        assert "a label, not a path" in body["error"]
    assert outside_files(tmp_path) == []
    assert not (tmp_path / "data" / "runs" / "pending").exists()


def test_the_cli_refuses_a_label_with_a_path_separator() -> None:
    argv = ["--base-url", NO_TARGET, "--conc", "1", "--isl", "8", "--osl", "8",
            "--save-result", "--label"]
    with pytest.raises(SpecError, match=r"--label 'a/b': a label, not a path"):
        spec_from_argv([*argv, "a/b"], {})
    spec = spec_from_argv([*argv, "nightly"], {})
    assert spec.vllm_result is not None and spec.vllm_result.label == "nightly"


def test_a_link_planted_below_the_data_dir_cannot_lead_out(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    outside.mkdir()
    (data / "planted").symlink_to(outside)
    config = ServiceConfig(target=NO_TARGET, model="m", data_dir=data)
    with pytest.raises(Escapes, match=r"^results '.*planted': leads outside the sidecar's "
                       "data directory"):
        spec_for(config, {**RUN, "label": "nightly"}, data / "planted")
    inside = spec_for(config, {**RUN, "label": "..", "result_filename": ".."}, data / "ok")
    assert inside.vllm_result is not None and inside.vllm_result.label == ".."
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("levels", [9, 7])
async def test_a_billion_laughs_body_is_a_400_and_the_sidecar_keeps_answering(
        tmp_path: Path, levels: int) -> None:
    async with sidecar(tmp_path / "data", NO_TARGET) as client:
        started = time.monotonic()
        async with client.post("/v1/runs", data=laughs(levels).encode(), headers={
                "Content-Type": "application/yaml"}) as response:
            body = await response.json()
            assert response.status == 400, body
        assert time.monotonic() - started < 2.0
        assert body["error"].startswith("body: ") and "aliases (*name)" in body["error"]
        started = time.monotonic()
        status, health = await call(client, "GET", "/healthz")
        assert (status, health["busy"]) == (200, False)
        assert time.monotonic() - started < 1.0


async def test_a_deep_json_body_is_a_400_naming_the_key_path(tmp_path: Path) -> None:
    async with sidecar(tmp_path / "data", NO_TARGET) as client:
        raw = b'{"lanes": [{"name": "a", "extra-body": {"x": ' + b"[" * 1000 + b"]" * 1000
        status, body = await call(client, "POST", "/v1/runs", raw + b"}}]}")
        assert status == 400, body
        assert body["error"].startswith("body: lanes[0].extra-body.x" + "[0]" * 28
                                        + ": nested more than 32 levels deep")
        async with client.post("/v1/runs", data=b"seed: 0x10000000000000000\nlanes: []",
                               headers={"Content-Type": "application/yaml"}) as response:
            assert response.status == 400
            assert (await response.json())["error"] == (
                "body: seed: 18446744073709551616 does not fit in 64 bits")
