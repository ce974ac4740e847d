"""What a new user types first: the version, and a flag that is almost right."""

from __future__ import annotations

import loadgen
from run.procs import one_error_line, run_loadgen


def test_version_prints_the_one_version_source() -> None:
    done = run_loadgen(["--version"], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"loadgen {loadgen.__version__}"


def test_an_abbreviated_flag_is_refused_with_the_flag_meant() -> None:
    # argparse would take `--is` as --isl; a measurement must not guess what was meant
    done = run_loadgen(["--sim", "--is", "1024", "--conc", "1"], timeout=60)
    assert done.returncode == 2
    assert one_error_line(done.stderr).endswith(
        "unrecognized arguments: --is 1024 (did you mean --isl?)")


def test_a_mistyped_flag_gets_a_suggestion_and_an_unknown_word_none() -> None:
    done = run_loadgen(["--sim", "--prompts-per-cnoc", "3"], timeout=60)
    assert done.returncode == 2
    assert "(did you mean --prompts-per-conc?)" in one_error_line(done.stderr)
    done = run_loadgen(["--sim", "--zzzzzz"], timeout=60)
    assert done.returncode == 2 and "did you mean" not in one_error_line(done.stderr)


def test_a_mistyped_command_gets_the_command_meant() -> None:
    done = run_loadgen(["comapre", "a", "b"], timeout=60)
    assert done.returncode == 2
    assert one_error_line(done.stderr) == (
        "loadgen: error: unknown command 'comapre'; did you mean `loadgen compare`?")
    done = run_loadgen(["zzzzzz"], timeout=60)
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert "did you mean" not in line and "compare, report, merge, sim, serve" in line
