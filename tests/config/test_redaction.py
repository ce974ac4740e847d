"""Secrets never reach what loadgen writes or prints, and still reach the server:
the redaction rule (config/redact.py) and the CLI's result files over real sockets."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.redact import redact_json, redact_options, redact_text, redact_url
from loadgen.config.spec import SpecError
from loadgen.sim.server import SimConfig, running_simulator
from tests.support.recording_proxy import recording_proxy

USER, PASSWORD = "alice", "hunter2-pw-5150"
API_KEY_VALUE = "sk-test-0123456789abcdef"
SECRETS = (PASSWORD.encode(), API_KEY_VALUE.encode(), f"{USER}:".encode())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://alice:pw@127.0.0.1:8000", "http://***@127.0.0.1:8000"),
        ("https://tok@vllm.internal/v1", "https://***@vllm.internal/v1"),
        ("http://a:p@ss@h:1/x", "http://***@h:1/x"),  # the authority ends at the last @
        ("http://h:1/x?api_key=abc&model=m", "http://h:1/x?api_key=***&model=m"),
        ("http://h:1/p@x", "http://h:1/p@x"),  # an @ in the path is not userinfo
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/"),  # untouched, byte for byte
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_and_json() -> None:
    text = "cannot reach the server at http://u:p@h:1 (x); also https://k@g/?token=t"
    assert redact_text(text) == (
        "cannot reach the server at http://***@h:1 (x); also https://***@g/?token=***"
    )
    doc = {"base_url": "http://u:p@h", "n": [1, 2.5, None], "s": {"base_url": "http://u@h"}}
    assert redact_json(doc) == {
        "base_url": "http://***@h",
        "n": [1, 2.5, None],
        "s": {"base_url": "http://***@h"},
    }


def test_redact_options_headers_by_name() -> None:
    options: dict[str, Any] = {
        "conc": "1,2",
        "isl": 64,
        "header": [
            "Authorization:Bearer sk-1",
            "X-Upstream-Auth:Bearer sk-2",
            "x-api-key:k",
            "Cookie:session=abc",
            "X-Auth-Token:t",
            "X-Client-Secret:s",
            "X-Password:p",
            "X-Session-Affinity:abc",
        ],
    }
    shown = redact_options(options)
    assert shown["header"] == [
        "Authorization:***",
        "X-Upstream-Auth:***",
        "x-api-key:***",
        "Cookie:***",
        "X-Auth-Token:***",
        "X-Client-Secret:***",
        "X-Password:***",
        "X-Session-Affinity:abc",
    ]
    assert redact_options({"headers": "X-API-KEY:k"}) == {"headers": "X-API-KEY:***"}
    assert {k: v for k, v in shown.items() if k != "header"} == {"conc": "1,2", "isl": 64}
    assert options["header"][0] == "Authorization:Bearer sk-1", "the input is not changed"


def test_redact_options_headers_in_every_form_and_at_every_level() -> None:
    """The mapping form a sweep file takes, and a sweep document's lanes and groups."""
    assert redact_options({"header": {"X-Api-Key": "sk-1", "X-Team": "a", "X-N": 3}}) == {
        "header": {"X-Api-Key": "***", "X-Team": "a", "X-N": 3}
    }
    document = {
        "target": {
            "header": {"Authorization": "Bearer sk-2"},
            "api-key": "sk-3",
            "base-url": "http://u:pw@h:1",
        },
        "lanes": [
            {"name": "a", "headers": ["Cookie:c=1"]},
            {"name": "b", "target": {"header": "X-Auth-Token:t"}},
        ],
    }
    assert redact_options(document) == {
        "target": {
            "header": {"Authorization": "***"},
            "api-key": "***",
            "base-url": "http://***@h:1",
        },
        "lanes": [
            {"name": "a", "headers": ["Cookie:***"]},
            {"name": "b", "target": {"header": "X-Auth-Token:***"}},
        ],
    }


def test_url_credentials_and_an_authorization_header_conflict() -> None:
    base = ["--conc", "1", "--isl", "64", "--osl", "8", "--base-url", "http://u:p@127.0.0.1:9"]
    assert spec_from_argv(base, env={}).target.base_url == "http://u:p@127.0.0.1:9"
    for extra, env in (
        (["--api-key", "k"], {}),
        ([], {"OPENAI_API_KEY": "k"}),
        (["--header", "authorization:Bearer k"], {}),
    ):
        with pytest.raises(SpecError, match="keep one"):
            spec_from_argv([*base, *extra], env=env)


def _files(directory: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in directory.rglob("*") if p.is_file()]


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}


async def _loadgen(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadgen",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_environment(),
    )
    _out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, err.decode()


async def test_cli_result_files_hold_no_credentials_but_the_server_got_them(tmp_path: Path) -> None:
    config = SimConfig(model="sim-model", spec_tokens=2, step_fixed_ms=1.0)
    async with (
        running_simulator(config, host="127.0.0.1", port=0) as sim,
        recording_proxy("127.0.0.1", sim.port) as wire,
    ):
        url = f"http://{USER}:{PASSWORD}@127.0.0.1:{wire.port}"
        code, err = await _loadgen(
            "--base-url",
            url,
            "--header",
            f"X-Api-Key:{API_KEY_VALUE}",
            "--header",
            "X-Session-Affinity:abc",
            "--conc",
            "1,2",
            "--isl",
            "64",
            "--osl",
            "8",
            "--encoder",
            "raw",
            "--prompts-per-conc",
            "2",
            "--warmup-per-conc",
            "0",
            "--results",
            str(tmp_path),
            "--no-progress",
        )
    assert code == 0, err
    shown = f"http://***@127.0.0.1:{wire.port}"
    run = orjson.loads((tmp_path / "run.json").read_bytes())
    assert run["base_url"] == run["settings"]["base_url"] == shown
    assert run["settings"]["headers"] == ["X-Api-Key", "X-Session-Affinity"]
    points = [orjson.loads((tmp_path / f"conc_{c}.json").read_bytes()) for c in (1, 2)]
    assert [p["base_url"] for p in points] == [shown, shown]
    assert all(p["completed"] == p["num_prompts"] == 2 * p["max_concurrency"] for p in points)
    for name, data in _files(tmp_path):
        assert not any(s in data for s in SECRETS), f"{name} holds a secret"
    assert not any(s.decode() in err for s in SECRETS)
    # What was redacted on disk went on the wire as given: the header, and the URL's
    # userinfo as Basic auth, on every request.
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode())
    assert wire.sent.count(b"X-Api-Key: " + API_KEY_VALUE.encode()) >= 6
    assert wire.sent.count(b"Authorization: Basic " + basic) >= 6


async def test_cli_error_line_does_not_show_url_credentials(tmp_path: Path) -> None:
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:1"  # nothing listens on port 1
    code, err = await _loadgen(
        "--base-url",
        url,
        "--conc",
        "1",
        "--isl",
        "64",
        "--osl",
        "8",
        "--encoder",
        "raw",
        "--results",
        str(tmp_path),
        "--no-progress",
    )
    assert code == 1, err
    assert "cannot reach the server at http://***@127.0.0.1:1" in err
    assert PASSWORD not in err
