"""The run options' table: every run flag's entry (config/fields.py), in `loadgen --help`
order, grouped as the help groups them. argparse's run parser, the sweep-file and
sidecar decoders and the sidecar's allowed list all come from here."""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.config.compat import GROUP
from loadgen.config.compat_flags import COMPAT_DESCRIPTION, COMPAT_FIELDS
from loadgen.config.fields import Field, Group
from loadgen.config.golden import GOLDEN_FIELDS
from loadgen.config.load_args import LOAD_FIELDS
from loadgen.config.objectives import FIND_MAX_FIELDS
from loadgen.config.results_flags import RESULTS_FIELDS, SCALE_FIELDS
from loadgen.config.session_args import SESSION_FIELDS
from loadgen.config.target_flags import TARGET_FIELDS, WORKLOAD_FIELDS

RUN_GROUPS: tuple[Group, ...] = (
    Group("target", TARGET_FIELDS),
    Group("workload", WORKLOAD_FIELDS),
    Group("sessions (multi-turn, agentic trace replay)", SESSION_FIELDS),
    Group("results", RESULTS_FIELDS),
    Group("load shape (over-saturation stop, slices, ramp-up)", LOAD_FIELDS),
    Group("capacity search (README: capacity at an SLO)", FIND_MAX_FIELDS),
    Group("acceptance conformance (InferenceX golden AL)", GOLDEN_FIELDS),
    Group(GROUP, COMPAT_FIELDS, COMPAT_DESCRIPTION),
    Group("scale out (README: workers and shards)", SCALE_FIELDS),
)
# dest -> entry: every run option once
RUN_FIELDS: Mapping[str, Field] = {f.dest: f for g in RUN_GROUPS for f in g.fields}
# the groups a sweep document may nest keys under (`target:`, `workload:`)
GROUP_DESTS: Mapping[str, frozenset[str]] = {
    g.title: frozenset(f.dest for f in g.fields) for g in RUN_GROUPS
}


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
