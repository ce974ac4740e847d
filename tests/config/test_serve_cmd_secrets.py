"""Secrets in a launched server's command never reach run.json, stderr or its
`last_log_line` (issue 47 item 3): a value inside a wrapper's script (`sh -c '...'`),
every value after a secret flag (`--api-key K1 K2`), and the same values when the
server prints its own argv.

Real processes: the launched server is `loadgen sim` under `sh -c`, the wrapper echoing
its argv (the fake keys) when it exits, the CLI runs as `python -m loadgen`.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import orjson

from loadgen.config.redact import REDACTED, redact_command, redact_output, secret_values
from tests.support.procs import one_error_line, run_loadgen

PY = shlex.quote(sys.executable)
SIM = "--step-fixed-ms 1 --decode-token-us 200 --prefill-token-us 2 --spin-us 0 --seed 7"
KEYS = ("sk-fake-K1111", "sk-fake-K2222", "hf_fake_K3333")
RUN = ["--conc", "1", "--isl", "48", "--osl", "16", "--encoder", "raw",
       "--prompts-per-conc", "2", "--warmup-per-conc", "0", "--no-progress"]  # fmt: skip


def _wrapped(body: str) -> str:
    """`sh -c BODY fakesrv --api-key K1 K2`: BODY sets HF_TOKEN=K3 and says its argv."""
    script = f"export HF_TOKEN={KEYS[2]}; {body}"
    return f"sh -c {shlex.quote(script)} fakesrv --api-key {KEYS[0]} {KEYS[1]}"


def _held(text: str | bytes) -> list[str]:
    raw = text.decode() if isinstance(text, bytes) else text
    return [key for key in KEYS if key in raw]


def test_every_value_after_a_secret_flag_and_inside_a_word_is_redacted() -> None:
    argv = shlex.split(_wrapped("exec server --token=t0ken --port 1"))
    shown = redact_command(argv)
    assert _held(" ".join(shown)) == [] and "t0ken" not in " ".join(shown)
    assert shown[-4:] == ["fakesrv", "--api-key", REDACTED, REDACTED]
    assert shown[2] == f"export HF_TOKEN={REDACTED}; exec server --token={REDACTED} --port 1"
    # a flag ends the values; counts and paths stay
    assert redact_command(["vllm", "--api-key", "a1", "a2", "--max-num-batched-tokens", "8"]) == [
        "vllm", "--api-key", REDACTED, REDACTED, "--max-num-batched-tokens", "8",
    ]  # fmt: skip
    assert sorted(secret_values(argv)) == sorted([*KEYS, "t0ken"])
    # a value not there verbatim (an escape in it) is hidden all the same, and a shell
    # operator ends the flag's values as the next flag does
    assert redact_command(["sh", "-c", "x --api-key sk\\ one; y"]) == [
        "sh", "-c", f"x --api-key {REDACTED} ; y",
    ]  # fmt: skip
    assert redact_output("--api-key k1; next --token t2 && y") == (
        f"--api-key {REDACTED}; next --token {REDACTED} && y"
    )


def test_free_text_a_server_prints_is_redacted() -> None:
    assert redact_output("argv: ['s', '--api-key', 'k1', 'k2', '--port', '8']") == (
        f"argv: ['s', '--api-key', '{REDACTED}', '{REDACTED}', '--port', '8']"
    )
    assert redact_output("Namespace(api_key='k1', port=3)") == (
        f"Namespace(api_key='{REDACTED}', port=3)"
    )
    assert redact_output("args: {'api_key': ['k1', 'k2'], 'model': 'm'}") == (
        f"args: {{'api_key': ['{REDACTED}', '{REDACTED}'], 'model': 'm'}}"
    )
    # a known value anywhere, whatever surrounds it
    assert redact_output(f"loaded ({KEYS[0]}x)", [KEYS[0]]) == f"loaded ({REDACTED}x)"
    assert redact_output("--max-num-batched-tokens 8192") == "--max-num-batched-tokens 8192"


def test_a_wrapper_that_echoes_its_keys_on_exit_leaks_none(tmp_path: Path) -> None:
    # sh runs the simulator in the foreground: the group's SIGINT stops it, then sh's
    # trap prints the argv (the keys) as its last line and exits 0
    body = (
        "trap 'echo \"server exits; argv: $0 $* HF_TOKEN=$HF_TOKEN\"; exit 0' INT TERM; "
        f"{PY} -m loadgen sim --port {{port}} {SIM}"
    )
    results = tmp_path / "run"
    done = run_loadgen(
        ["--serve-cmd", _wrapped(body), *RUN, "--results", str(results)], timeout=200
    )
    assert done.returncode == 0, done.stderr
    log = (results / "server.log").read_text()
    assert _held(log) == list(KEYS)  # the server was given (and printed) the real values
    run_json = (results / "run.json").read_bytes()
    launched = orjson.loads(run_json)["launched_server"]
    assert launched["last_log_line"].startswith("server exits; argv: fakesrv --api-key ***")
    assert _held(run_json) == [] and _held(done.stderr) == [] and _held(done.stdout) == []
    assert launched["command"][-3:] == ["--api-key", REDACTED, REDACTED]


def test_a_server_that_prints_its_argv_and_dies_leaks_none_on_stderr(tmp_path: Path) -> None:
    body = 'echo "usage error; argv: $0 $* HF_TOKEN=$HF_TOKEN"; exit 3; : {port}'
    results = tmp_path / "run"
    done = run_loadgen(
        ["--serve-cmd", _wrapped(body), *RUN, "--results", str(results)], timeout=120
    )
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)
    assert "exited with status 3" in line and "usage error; argv: fakesrv --api-key" in line
    assert _held((results / "server.log").read_text()) == list(KEYS)
    assert _held(done.stderr) == []
    for stored in results.rglob("*.json"):
        assert _held(stored.read_bytes()) == [], stored
