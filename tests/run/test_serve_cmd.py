"""--serve-cmd / a lane's serve_cmd: loadgen launches the server, measures it, stops it.

Real processes throughout: the launched server is `loadgen sim` started by loadgen
itself from the command given (through `sh -c '... exec ...'` where the test needs the
server's pid: `exec` keeps it, so the pid written is the server's and its group's),
the CLI runs as `python -m loadgen`.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.parsers import SpecError
from loadgen.config.redact import REDACTED, redact_command, redact_options
from tests.support.procs import (
    lines_in,
    loadgen,
    one_error_line,
    run_loadgen,
    wait_until,
    whole_lines,
)

PY = shlex.quote(sys.executable)
SIM = "--step-fixed-ms 1 --decode-token-us 200 --prefill-token-us 2 --spin-us 0 --seed 7"
WORKLOAD = """
workload: {isl: 48, osl: 32, encoder: raw}
prompts-per-conc: 3
warmup-per-conc: 1
no-progress: true
"""


def sim_cmd(spec_tokens: int, *, pidfile: Path | None = None, extra: str = "") -> str:
    """The launched server's command: `loadgen sim` on loadgen's {port}."""
    sim = f"{PY} -m loadgen sim --port {{port}} --spec-tokens {spec_tokens} {SIM} {extra}"
    if pidfile is None:
        return sim
    return f"sh -c {shlex.quote(f'echo $$ > {pidfile}; exec {sim}')}"


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def lanes(root: Path) -> list[dict[str, Any]]:
    index: list[dict[str, Any]] = orjson.loads((root / "lanes.json").read_bytes())["lanes"]
    return index


def run_json(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((directory / "run.json").read_bytes())
    return data


def test_two_lanes_each_launch_their_server_and_compare_prints_both(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"conc: [1, 32]\n{WORKLOAD}lanes:\n"
        f"  - name: stp\n    target: {{serve-cmd: {orjson.dumps(sim_cmd(0)).decode()}}}\n"
        f"  - name: mtp\n    target:\n      serve-cmd: {orjson.dumps(sim_cmd(2)).decode()}\n"
        "      serve-env: {HF_TOKEN: hf_secret_value, LOADGEN_TEST_LANE: mtp}\n"
    )
    root = tmp_path / "tree"
    done = run_loadgen(["--config", str(sweep), "--results", str(root)], timeout=300)
    assert done.returncode == 0, done.stderr
    assert [(lane["name"], lane["state"]) for lane in lanes(root)] == [
        ("stp", "succeeded"),
        ("mtp", "succeeded"),
    ]
    ports, pids = set(), []
    for name, k in (("stp", "0"), ("mtp", "2")):
        run = run_json(root / name)
        launched = run["launched_server"]
        assert launched["command"][launched["command"].index("--spec-tokens") + 1] == k
        assert str(launched["port"]) in launched["command"]  # {port} substituted
        assert run["base_url"] == f"http://127.0.0.1:{launched['port']}"
        assert launched["version"] and launched["version"] == run["server"]["version"]
        assert launched["startup_s"] > 0 and launched["log"] == "server.log"
        # stopped by loadgen's SIGINT, which the simulator takes as a clean stop
        assert launched["stopped_by"] == "SIGINT" and launched["exit_status"] == 0
        assert launched["last_log_line"] == "loadgen sim: stopped"
        assert (root / name / "server.log").read_text().startswith("loadgen sim: serving")
        assert "{port}" in run["settings"]["serve_cmd"]  # the setting as given
        ports.add(launched["port"])
        pids.append(launched["pid"])
        for conc in (1, 32):
            point = orjson.loads((root / name / f"conc_{conc}.json").read_bytes())
            assert point["complete"] is True and point["completed"] == 3 * conc
    assert all(group_gone(pid) for pid in pids)
    assert len(ports) == 2  # each lane its own free port
    # the secret in the environment is nowhere in the tree, the harmless value is
    env = run_json(root / "mtp")["launched_server"]["env"]
    assert env == {"HF_TOKEN": REDACTED, "LOADGEN_TEST_LANE": "mtp"}
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".yaml", ".html", ".csv"):
            assert b"hf_secret_value" not in path.read_bytes(), path
    compared = run_loadgen(["compare", str(root / "stp"), str(root / "mtp")], timeout=120)
    assert compared.returncode == 0, compared.stderr
    # the simulator's step model puts MTP ahead at conc 1 (the fixed step cost dominates)
    # and behind at high concurrency, where the K+1 tokens computed per request dominate;
    # on a CPU-starved machine conc 32 may not get there, so the line expected is the one
    # the result files imply
    ratios = [
        orjson.loads((root / "mtp" / f"conc_{c}.json").read_bytes())["output_throughput"]
        / orjson.loads((root / "stp" / f"conc_{c}.json").read_bytes())["output_throughput"]
        for c in (1, 32)
    ]
    assert ratios[0] > 1, ratios
    expected = (
        "crossover: mtp is ahead up to conc 1, stp from conc 32 on"
        if ratios[1] < 1
        else "no crossover: mtp is ahead at every common concurrency"
    )
    assert expected in compared.stdout, (ratios, compared.stdout)


def test_a_server_killed_mid_lane_ends_that_lane_and_the_next_one_runs(tmp_path: Path) -> None:
    pidfile = tmp_path / "doomed.pid"
    sweep = tmp_path / "sweep.yaml"
    slow = sim_cmd(0, pidfile=pidfile, extra="--step-fixed-ms 5")
    sweep.write_text(
        "workload: {isl: 48, osl: 200, encoder: raw}\nno-progress: true\n"
        "warmup-per-conc: 0\nlanes:\n"
        f"  - name: doomed\n    conc: 2\n    prompts-per-conc: 40\n"
        f"    serve-cmd: {orjson.dumps(slow).decode()}\n"
        f"  - name: next\n    conc: 1\n    osl: 16\n    prompts-per-conc: 2\n"
        f"    serve-cmd: {orjson.dumps(sim_cmd(0)).decode()}\n"
    )
    root = tmp_path / "tree"
    run = loadgen(["--config", str(sweep), "--results", str(root)])
    jsonl = root / "doomed" / "requests_conc_2.jsonl"
    try:

        def measuring() -> bool:
            assert run.poll() is None, run.communicate()
            return lines_in(jsonl) >= 3

        wait_until(measuring, 180, "the doomed lane to measure 3 requests")
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGKILL)
        _, stderr = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, stderr
    doomed, following = lanes(root)
    assert doomed["state"] == "failed" and doomed["stop_reason"] == "server_gone", doomed
    # the lane's one line ends with how the server ended and its log's last line
    assert "the launched server was ended by signal SIGKILL" in doomed["error"], doomed
    assert "server.log's last line: loadgen sim: " in doomed["error"], doomed
    assert "\n" not in doomed["error"]
    assert following["state"] == "succeeded" and following["exit_code"] == 0
    # every finished request is on disk, the point kept and marked
    point = orjson.loads((root / "doomed" / "conc_2.json").read_bytes())
    assert point["complete"] is False and point["stop_reason"] == "server_gone"
    assert whole_lines(jsonl) == point["num_prompts"] >= 3
    assert "server.log's last line" in point["stop_detail"]
    launched = run_json(root / "doomed")["launched_server"]
    assert launched["pid"] == pid and launched["exit_status"] == -signal.SIGKILL
    assert launched["stopped_by"] is None  # it was dead before loadgen stopped it
    assert group_gone(pid)
    assert run_json(root / "next")["launched_server"]["exit_status"] == 0


def test_a_command_that_exits_at_once_is_server_failed_to_start(tmp_path: Path) -> None:
    crash = (
        PY
        + " -c "
        + shlex.quote("import sys; print('no GPU found', flush=True); sys.exit(3)")
        + " {port}"
    )
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"conc: 1\n{WORKLOAD}lanes:\n"
        f"  - name: broken\n    serve-cmd: {orjson.dumps(crash).decode()}\n"
        f"  - name: fine\n    serve-cmd: {orjson.dumps(sim_cmd(0)).decode()}\n"
    )
    root = tmp_path / "tree"
    # a hang guard: the broken lane is said failed at its exit (its stop_reason below),
    # not at the end of its --serve-timeout
    done = run_loadgen(["--config", str(sweep), "--results", str(root)], timeout=200)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    broken, fine = lanes(root)
    assert broken["stop_reason"] == "server_failed_to_start", broken
    assert "exited with status 3" in broken["error"] and "no GPU found" in broken["error"]
    assert (root / "broken" / "server.log").read_text() == "no GPU found\n"
    assert fine["state"] == "succeeded"
    # the CLI alone: the one line, exit 1, well before --serve-timeout
    alone = run_loadgen(
        ["--serve-cmd", crash, "--conc", "1", "--isl", "48", "--osl", "16", "--encoder", "raw",
         "--results", str(tmp_path / "alone"), "--serve-timeout", "600"],
        timeout=120,
    )  # fmt: skip
    assert alone.returncode == 1
    line = one_error_line(alone.stderr)
    assert "exited with status 3" in line and "server.log's last line: no GPU found" in line
    # a program that is not there: the same stop, said as such
    missing = run_loadgen(
        ["--serve-cmd", f"{tmp_path}/no-such-server --port {{port}}", "--conc", "1",
         "--isl", "48", "--osl", "16", "--encoder", "raw", "--results", str(tmp_path / "m")],
        timeout=120,
    )  # fmt: skip
    assert missing.returncode == 1
    line = one_error_line(missing.stderr)
    assert "no-such-server" in line and "cannot start it: No such file or directory" in line


def test_ctrl_c_stops_the_launched_server_and_its_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    results = tmp_path / "results"
    run = loadgen(
        ["--serve-cmd", sim_cmd(0, pidfile=pidfile, extra="--step-fixed-ms 5"),
         "--conc", "2", "--isl", "48", "--osl", "300", "--encoder", "raw",
         "--prompts-per-conc", "50", "--warmup-per-conc", "0", "--no-progress",
         "--results", str(results)]
    )  # fmt: skip
    jsonl = results / "requests_conc_2.jsonl"
    try:

        def measuring() -> bool:
            assert run.poll() is None, run.communicate()
            return lines_in(jsonl) >= 2

        wait_until(measuring, 180, "two requests measured")
        pgid = int(pidfile.read_text())
        assert os.getpgid(pgid) == pgid  # the server leads its own group
        assert not group_gone(pgid)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, stderr
    assert group_gone(pgid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    launched = run_json(results)["launched_server"]
    assert launched["pid"] == pgid and launched["stopped_by"] == "SIGINT"
    assert launched["exit_status"] == 0 and launched["last_log_line"] == "loadgen sim: stopped"


def test_the_options_go_together(tmp_path: Path) -> None:
    base = ["--conc", "1", "--isl", "48", "--osl", "16", "--results", str(tmp_path / "r")]

    def refused(*argv: str) -> str:
        with pytest.raises(SpecError) as raised:
            spec_from_argv([*base, *argv], {})
        return str(raised.value)

    assert "--serve-env: add --serve-cmd" in refused(
        "--base-url", "http://127.0.0.1:9", "--serve-env", "A=1"
    )
    assert "put {port} where the server takes its port" in refused("--serve-cmd", "vllm serve m")
    assert "--sim and --serve-cmd exclude each other" in refused(
        "--sim", "--serve-cmd", "x --port {port}"
    )
    assert "--serve-timeout 0: must be" in refused(
        "--serve-cmd", "x --port {port}", "--serve-timeout", "0"
    )
    assert "--find-max with --serve-cmd" in refused(
        "--serve-cmd",
        "x --port {port}",
        "--find-max",
        "conc",
        "--slo",
        "ttft:p99=2s",
        "--conc",
        "1..8",
    )
    spec = spec_from_argv(
        [*base, "--serve-cmd", "vllm serve 'a model' --port {port}", "--serve-env", "A=b=c"], {}
    )
    assert spec.target.serve_cmd == ("vllm", "serve", "a model", "--port", "{port}")
    assert spec.target.serve_env == (("A", "b=c"),) and spec.target.base_url is None


def test_the_command_is_redacted_by_the_one_rule() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=t", "HF_TOKEN=x",
            "--max-num-batched-tokens", "8192", "--tokenizer", "tok/dir",
            "--lora", "http://u:pw@host/x"]  # fmt: skip
    assert redact_command(argv) == [
        "vllm", "serve", "m", "--api-key", REDACTED, f"--hf-token={REDACTED}",
        f"HF_TOKEN={REDACTED}", "--max-num-batched-tokens", "8192", "--tokenizer", "tok/dir",
        "--lora", f"http://{REDACTED}@host/x",
    ]  # fmt: skip
    shown = redact_options(
        {"lanes": [{"serve-cmd": "vllm serve m --api-key sk-2", "serve_env": ["OPENAI_API_KEY=k"]}]}
    )
    assert "sk-2" not in str(shown) and shown["lanes"][0]["serve_env"] == [
        f"OPENAI_API_KEY={REDACTED}"
    ]
