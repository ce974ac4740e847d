"""argv -> a validated RunSpec, through argparse's run parser, built from the run
options' table (config/table.py); the sidecar's JSON options and sweep files are decoded
with the same table (config/decode.py) and end in the same function (build_spec.py), so
all of them reject the same things with the same words. Invalid input raises SpecError
(exit status 2), one line saying what is wrong and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.config.build_spec import default_results_dir, spec_from_values
from loadgen.config.commands import COMMANDS
from loadgen.config.decode import decode_options
from loadgen.config.spec import RunSpec
from loadgen.config.table import argv_values, build_parser

__all__ = [
    "COMMANDS",
    "argv_values",
    "build_parser",
    "default_results_dir",
    "parse_run_args",
    "spec_from_argv",
    "spec_from_options",
]


def spec_from_argv(argv: Sequence[str], env: Mapping[str, str] | None = None) -> RunSpec:
    return parse_run_args(argv, os.environ if env is None else env)[0]


def parse_run_args(
    argv: Sequence[str],
    env: Mapping[str, str],
) -> tuple[RunSpec, int | None, str]:
    """(the run, the --metrics-port to serve live metrics on, if any, and its host)."""
    args = build_parser().parse_args(list(argv))
    return spec_from_values(vars(args), env), args.metrics_port, args.metrics_host


def spec_from_options(options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> RunSpec:
    """The sidecar's JSON options (flag names, `-` or `_`), decoded with the table."""
    return spec_from_values(decode_options(options), os.environ if env is None else env)
