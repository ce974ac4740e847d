"""Ctrl-C before any point began says nothing was measured (issue 47 low item): not
"everything measured so far is in DIR" over a directory with no point in it.

Real processes and sockets: `python -m loadgen` against a listener that accepts and
never answers (a hung server: the preflight waits on it), interrupted with SIGINT."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from loadgen.results.store import holds_measurements
from tests.support.procs import loadgen

RUN = ["--conc", "1", "--isl", "48", "--osl", "16", "--encoder", "raw", "--no-progress",
       "--http-timeout", "120"]  # fmt: skip


def test_ctrl_c_in_the_preflight_says_nothing_was_measured(tmp_path: Path) -> None:
    results = tmp_path / "r"
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        hung.settimeout(120)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        process = loadgen(["--base-url", url, *RUN, "--results", str(results)])
        try:
            connection, _ = hung.accept()  # the preflight's first GET: it waits now
            with connection:
                process.send_signal(signal.SIGINT)
                _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if "interrupted" in line]
    assert said == ["loadgen: interrupted before any point began; nothing was measured"], stderr
    assert not holds_measurements(results)  # and indeed no point began


def test_a_directory_holds_measurements_once_a_point_file_is_there(tmp_path: Path) -> None:
    assert not holds_measurements(tmp_path)
    (tmp_path / "run.json").write_text("{}")  # a run's file, no point's
    assert not holds_measurements(tmp_path)
    lane = tmp_path / "lane-a"
    lane.mkdir()
    (lane / "requests_conc_4.jsonl").write_text("")
    assert holds_measurements(tmp_path)
