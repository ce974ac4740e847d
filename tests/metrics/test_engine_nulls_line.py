""" "null on this engine" names only the fields a point leaves null (issue 47 low item):
the engine's list (metrics/engines.py `missing`) says what it is not known to give, and a
server may send one after all. The simulator speaking TensorRT-LLM's dialect and also
returning vLLM's per-request spec-decode stats (`--per-request-spec-decode-metrics`, as
a frontend passing them on would) gives server_request_acceptance_length, which
TensorRT-LLM's list names; the line must not call it null, and must still name the ones
the point does null. Real `python -m loadgen --sim` over real sockets."""

from __future__ import annotations

from pathlib import Path

from tests.support.procs import point, run_loadgen

SIM = "--spec-tokens 2 --step-fixed-ms 1 --decode-token-us 200 --engine trtllm"
RUN = ["--sim", "--conc", "1,2", "--isl", "48", "--osl", "32", "--encoder", "raw",
       "--prompts-per-conc", "3", "--warmup-per-conc", "0", "--no-progress"]  # fmt: skip


def _null_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "null on this engine" in line]


def test_a_field_the_point_carries_is_not_called_null(tmp_path: Path) -> None:
    results = tmp_path / "r"
    done = run_loadgen(
        [*RUN, "--sim-args", f"{SIM} --per-request-spec-decode-metrics detailed",
         "--results", str(results)]
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    carried = point(results, 1)["server_request_acceptance_length"]
    assert carried is not None and point(results, 2)["server_mean_itl_ms"] is None
    said = _null_lines(done.stderr)
    # once, at the first point: the second nulls the same fields
    assert said == [
        "loadgen: conc 1: null on this engine (trtllm): server_mean_itl_ms "
        "(why: run.json server.engine_unavailable)"
    ], done.stderr


def test_the_fields_the_point_nulls_are_named(tmp_path: Path) -> None:
    results = tmp_path / "r"
    done = run_loadgen([*RUN, "--sim-args", SIM, "--results", str(results)])
    assert done.returncode == 0, done.stderr
    assert point(results, 1)["server_request_acceptance_length"] is None
    said = _null_lines(done.stderr)
    assert len(said) == 1 and said[0].startswith("loadgen: conc 1: "), done.stderr
    assert "server_mean_itl_ms, server_request_acceptance_length" in said[0]
