"""What a new user types first: the version, and a flag that is almost right."""

from __future__ import annotations

import loadgen
from loadgen.config.args import COMMANDS
from tests.support.procs import one_error_line, run_loadgen


def test_version_prints_the_one_version_source() -> None:
    done = run_loadgen(["--version"], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"loadgen {loadgen.__version__}"


def test_an_abbreviated_flag_is_refused_with_the_flag_meant() -> None:
    # argparse would take `--is` as --isl; a measurement must not guess what was meant
    done = run_loadgen(["--sim", "--is", "1024", "--conc", "1"], timeout=60)
    assert done.returncode == 2
    assert one_error_line(done.stderr).endswith(
        "unrecognized arguments: --is 1024 (did you mean --isl?)"
    )


def test_a_mistyped_flag_gets_a_suggestion_and_an_unknown_word_none() -> None:
    done = run_loadgen(["--sim", "--prompts-per-cnoc", "3"], timeout=60)
    assert done.returncode == 2
    assert "(did you mean --prompts-per-conc?)" in one_error_line(done.stderr)
    done = run_loadgen(["--sim", "--zzzzzz"], timeout=60)
    assert done.returncode == 2 and "did you mean" not in one_error_line(done.stderr)


def test_help_lists_every_command_and_each_command_has_its_help() -> None:
    done = run_loadgen(["--help"], timeout=60)
    assert done.returncode == 0
    listed = done.stdout.split("commands (")[1]
    for name, summary in COMMANDS.items():
        assert f"  {name:<9} {summary}" in listed
    for name in ("sim", "serve", "compare", "report", "merge"):
        sub = run_loadgen([name, "--help"], timeout=60)
        assert sub.returncode == 0 and sub.stdout.startswith("usage: loadgen"), (name, sub)


def test_every_command_reports_its_error_as_one_line_through_one_map() -> None:
    cases = {  # the subcommand, a bad argument, the line's prefix, the exit status
        "sim": (["sim", "--spec-tokens", "-1"], "loadgen sim: error:", 2),
        "serve": (["serve", "--target", "ftp://x", "--model", "m"], "loadgen serve: error:", 2),
        "compare": (["compare", "/nonexistent-run"], "loadgen: error:", 2),
        "merge": (["merge", "/nonexistent-a", "--results", "/nonexistent-b"], "loadgen: error:", 2),
    }
    for name, (argv, prefix, status) in cases.items():
        done = run_loadgen(argv, timeout=60)
        assert done.returncode == status, (name, done.stderr)
        assert "Traceback" not in done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith(prefix)]
        assert len(lines) == 1, (name, done.stderr)


def test_a_mistyped_command_gets_the_command_meant() -> None:
    done = run_loadgen(["comapre", "a", "b"], timeout=60)
    assert done.returncode == 2
    assert one_error_line(done.stderr) == (
        "loadgen: error: unknown command 'comapre'; did you mean `loadgen compare`?"
    )
    done = run_loadgen(["zzzzzz"], timeout=60)
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert "did you mean" not in line and all(name in line for name in COMMANDS)
