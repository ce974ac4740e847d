"""The run options' table: every run flag's entry, one help group per RunSpec part (each
part's module declares its entries), plus vLLM's compatibility flags; and argparse's run
parser, built from it. The sweep-file and sidecar decoders (decode.py), the sidecar's
allowed list and values -> RunSpec (build_spec.py) all come from here too."""

from __future__ import annotations

import argparse
import difflib
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from loadgen import __version__
from loadgen.config import (
    deadlines,
    load,
    output,
    processes,
    scoring,
    session,
    target,
    telemetry,
    workload,
)
from loadgen.config.commands import COMMANDS
from loadgen.config.compat_flags import COMPAT_DESCRIPTION, COMPAT_FIELDS, GROUP
from loadgen.config.fields import Field, Group, add_field
from loadgen.config.parsers import SpecError

# one group per RunSpec part, in the parts' order (config/spec.py), titled by the part
RUN_GROUPS: tuple[Group, ...] = (
    Group("target", target.FIELDS),
    Group("workload", workload.FIELDS),
    Group(
        "load (arrivals, load shape, capacity search: docs/load-shapes.md, docs/capacity.md)",
        load.FIELDS,
    ),
    Group("deadlines", deadlines.FIELDS),
    Group("scoring (SLOs, percentiles, InferenceX golden AL)", scoring.FIELDS),
    Group("telemetry", telemetry.FIELDS),
    Group("output", output.FIELDS),
    Group("processes (docs/workers-and-shards.md)", processes.FIELDS),
    Group("sessions (multi-turn, agentic trace replay)", session.FIELDS),
    Group(GROUP, COMPAT_FIELDS, COMPAT_DESCRIPTION),
)
# dest -> entry: every run option once
RUN_FIELDS: Mapping[str, Field] = {f.dest: f for g in RUN_GROUPS for f in g.fields}
# the sections a sweep document may nest keys under (`target:`, `workload:`)
GROUP_DESTS: Mapping[str, frozenset[str]] = {
    section: frozenset(f.dest for f in RUN_FIELDS.values() if f.section == section)
    for section in ("target", "workload")
}
# every run flag's long name, for the nearest one to a mistyped flag
RUN_FLAGS = tuple(f for field in RUN_FIELDS.values() for f in field.flags if f.startswith("--"))


def run_defaults() -> dict[str, object]:
    """dest -> the value argparse gives an option not on the command line (fresh lists)."""
    return {dest: _default(f) for dest, f in RUN_FIELDS.items()}


def _default(field: Field) -> object:
    default = field.default
    if isinstance(default, list | dict):
        return type(default)(default)
    if isinstance(default, str) and field.parse is not None:
        return field.parse(default)  # as argparse converts a text default through `type`
    return default


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


def argv_values(argv: Sequence[str]) -> dict[str, Any]:
    """dest -> value of the flags given in argv only (no defaults)."""
    return vars(build_parser(suppress_defaults=True).parse_args(list(argv)))
