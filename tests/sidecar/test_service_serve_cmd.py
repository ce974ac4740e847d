"""The sidecar never launches a process: serve_cmd and friends, in its options or in a
sweep document's lanes, are a one-line 400 (as gpu_metrics is), and nothing starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.sidecar.options import allowed_options
from tests.support.sidecar import QUICK, call, sidecar, simulator

LAUNCH = ("serve_cmd", "serve_env", "serve_cwd", "serve_timeout")


def test_the_launch_options_are_not_allowed() -> None:
    allowed = allowed_options()
    assert not set(LAUNCH) & set(allowed)
    assert "gpu_metrics" not in allowed and "reset_prefix_cache" in allowed


@pytest.mark.parametrize(
    "option",
    [
        {"serve_cmd": "touch {marker} --port {{port}}"},
        {"serve-cmd": ["touch", "{marker}", "{{port}}"]},
        {"serve_env": {"A": "1"}},
        {"serve-cwd": "."},
        {"serve_timeout": 5},
    ],
)
async def test_options_that_launch_a_server_are_one_line_400(
    tmp_path: Path, option: dict[str, object]
) -> None:
    marker = tmp_path / "launched"
    given = {
        k: [v.format(marker=marker) for v in value] if isinstance(value, list) else value
        for k, value in option.items()
    }
    given = {k: v.format(marker=marker) if isinstance(v, str) else v for k, v in given.items()}
    async with simulator() as target, sidecar(tmp_path / "data", target) as client:
        status, body = await call(client, "POST", "/v1/runs", {**QUICK, **given})
        assert status == 400, body
        [key] = given
        assert body["error"].startswith(f"{key}: not accepted over the API (the sidecar never")
        assert "\n" not in body["error"]
        document = {**QUICK, "lanes": [{"name": "a", "target": given}]}
        status, body = await call(client, "POST", "/v1/runs", document)
        assert status == 400, body
        assert body["error"].startswith(
            f"sweep document: lanes[0].target.{key}: not accepted over the API (the sidecar never"
        )
        status, runs = await call(client, "GET", "/v1/runs")
    assert status == 200 and runs["runs"] == []
    assert not marker.exists()


async def test_gpu_metrics_is_still_refused_for_its_own_reason(tmp_path: Path) -> None:
    async with simulator() as target, sidecar(tmp_path, target) as client:
        status, body = await call(
            client, "POST", "/v1/runs", {**QUICK, "gpu_metrics": ["http://127.0.0.1:9/gpu"]}
        )
    assert status == 400 and body["error"].startswith("gpu_metrics: not accepted over the API")
    assert "never launches" not in body["error"]
