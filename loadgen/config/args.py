"""argv -> a validated RunSpec, through argparse's run parser, built from the run
options' table (config/table.py); the sidecar's JSON options and sweep files are decoded
with the same table (config/decode.py) and end in the same function (build_spec.py), so
all of them reject the same things with the same words. Invalid input raises SpecError
(exit status 2), one line saying what is wrong and what is allowed.
"""

from __future__ import annotations

import argparse
import difflib
import os
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from loadgen import __version__
from loadgen.config.build_spec import default_results_dir, spec_from_values
from loadgen.config.decode import decode_options
from loadgen.config.fields import add_field
from loadgen.config.parsers import SpecError
from loadgen.config.spec import RunSpec
from loadgen.config.table import RUN_FIELDS, RUN_GROUPS

__all__ = [
    "COMMANDS",
    "argv_values",
    "build_parser",
    "default_results_dir",
    "parse_run_args",
    "spec_from_argv",
    "spec_from_options",
]

# every run flag's long name, for the nearest one to a mistyped flag
RUN_FLAGS = tuple(f for field in RUN_FIELDS.values() for f in field.flags if f.startswith("--"))


class _Parser(argparse.ArgumentParser):
    """Raises SpecError instead of printing usage and exiting, so errors stay one line;
    an unknown flag gets the nearest real one, as a sweep file's unknown key does."""

    def __init__(self, **kwargs: Any) -> None:
        # `--is 1024` must not silently become --isl: abbreviations are off
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise SpecError(message + _suggestion(message))


def _suggestion(message: str) -> str:
    if not message.startswith("unrecognized arguments:"):
        return ""
    for word in message.split(":", 1)[1].split():
        flag = word.split("=", 1)[0]
        close = difflib.get_close_matches(flag, RUN_FLAGS, n=1, cutoff=0.6)
        if flag.startswith("--") and close:
            return f" (did you mean {close[0]}?)"
    return ""


# name -> what it does: loadgen.cli dispatches on it and `loadgen --help` lists it
COMMANDS = {
    "run": "measure a server (the default: `loadgen [run] --base-url URL ...`)",
    "sim": "serve the simulator (vLLM's API, MTP, prefix cache) on a port",
    "serve": "run the sidecar: a REST API that starts sweeps next to the server",
    "compare": "compare result directories on the console and as CSV/JSON",
    "report": "write one HTML report of result directories",
    "merge": "combine the result directories of a run's shards",
    "profile": "AIPerf's `profile --scenario inferencex-agentx-mvp` command line "
    "(InferenceX AgentX)",
}


def build_parser(*, suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """The run parser, from the table. suppress_defaults: only the flags given are set
    (a sweep file's argv overrides: what they leave out the file decides)."""
    p = _Parser(
        prog="loadgen",
        description=textwrap.fill(
            "Measure an OpenAI-compatible (vLLM) server at controlled concurrency: TTFT, "
            "ITL, TPOT, E2EL, throughput, interactivity and MTP acceptance. `loadgen --config "
            "sweep.yaml [flags]` runs a sweep file's lanes (flags given apply to every lane).",
            88,
        ),
        epilog="commands (`loadgen COMMAND --help` for each):\n"
        + "\n".join(f"  {name:<9} {summary}" for name, summary in COMMANDS.items()),
        # the description and the command list are laid out by hand, not re-wrapped
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"loadgen {__version__}")
    for group in RUN_GROUPS:
        argparse_group = p.add_argument_group(group.title, group.description)
        for field in group.fields:
            add_field(argparse_group, field, suppress=suppress_defaults)
    return p


def spec_from_argv(argv: Sequence[str], env: Mapping[str, str] | None = None) -> RunSpec:
    return parse_run_args(argv, os.environ if env is None else env)[0]


def parse_run_args(
    argv: Sequence[str],
    env: Mapping[str, str],
) -> tuple[RunSpec, int | None, str]:
    """(the run, the --metrics-port to serve live metrics on, if any, and its host)."""
    args = build_parser().parse_args(list(argv))
    return spec_from_values(vars(args), env), args.metrics_port, args.metrics_host


def argv_values(argv: Sequence[str]) -> dict[str, Any]:
    """dest -> value of the flags given in argv only (no defaults)."""
    return vars(build_parser(suppress_defaults=True).parse_args(list(argv)))


def spec_from_options(options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> RunSpec:
    """The sidecar's JSON options (flag names, `-` or `_`), decoded with the table."""
    return spec_from_values(decode_options(options), os.environ if env is None else env)
