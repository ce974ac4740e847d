"""Config by part: each RunSpec part's module declares the flags that fill it, `--help`
groups them by part, the table generates values -> settings, and the checks against this
machine run once where a run is built from options, not on every RunSpec."""

from __future__ import annotations

import ast
import dataclasses
import math
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.spec import PART_OF, PARTS, RUN_LEVEL, RunSpec, SpecError
from loadgen.config.table import RUN_FIELDS, RUN_GROUPS

CONFIG = Path(__file__).resolve().parents[2] / "loadgen" / "config"
BASE = ["--base-url", "http://127.0.0.1:9", "--conc", "4", "--isl", "64", "--osl", "16"]


def test_every_flag_is_in_help_with_its_text() -> None:
    """`loadgen --help` as a user runs it: each entry's flags and the start of its help."""
    text = subprocess.run(
        [sys.executable, "-m", "loadgen", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    flat = " ".join(text.split())
    for field in RUN_FIELDS.values():
        if field.help == "==SUPPRESS==":
            continue
        for flag in field.flags:
            assert flag in text, flag
        assert " ".join(field.help_text().split())[:60].replace("%%", "%") in flat, field.flag


def test_help_groups_are_the_parts() -> None:
    """Each part's group holds exactly the entries that fill that part (or a run-level
    setting), so an option's group, module and part cannot disagree."""
    titles = [group.title.split(" (")[0] for group in RUN_GROUPS]
    part_titles = {"session": "sessions"}
    assert titles[:-1] == [part_titles.get(part, part) for part in PARTS]
    for group, part in zip(RUN_GROUPS, PARTS, strict=False):
        for field in group.fields:
            names = (field.fills,) if isinstance(field.fills, str) else field.fills or ()
            for name in names:
                assert name in RUN_LEVEL or PART_OF[name] == part, (field.flag, name, part)


def test_every_filled_setting_is_a_setting() -> None:
    settings = set(PART_OF) | set(RUN_LEVEL)
    for field in RUN_FIELDS.values():
        names = (field.fills,) if isinstance(field.fills, str) else field.fills or ()
        assert set(names) <= settings, field.flag


def test_a_flag_default_is_its_parts_default() -> None:
    """Where a flag and its setting both have a default, they are the one value."""
    for field in RUN_FIELDS.values():
        if not isinstance(field.fills, str) or field.to is not None or field.fills in RUN_LEVEL:
            continue
        part = PARTS[PART_OF[field.fills]]
        spec = {f.name: f for f in dataclasses.fields(part)}[field.fills]
        if field.default is None or spec.default is dataclasses.MISSING:
            continue
        assert field.default == spec.default, field.flag


def test_machine_checks_run_where_the_run_is_built(tmp_path: Path) -> None:
    """A RunSpec changed in place (`with_`, e.g. resolving --workers auto) does not look at
    the machine again; a run built from options still does, with the same words."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    dead_pid = 2**22 + 12345  # above pid_max's default: no such process
    spec = RunSpec.flat(conc=(4,), isl=8, osl=8, sim=True, results_dir=a_file / "x")
    assert spec.with_(server_pid=dead_pid).processes.server_pid == dead_pid
    with pytest.raises(SpecError, match=r"is under .*, which is a file"):
        spec_from_argv([*BASE, "--results", str(a_file / "x")], {})
    with pytest.raises(SpecError, match=f"--server-pid {dead_pid}: no such process"):
        spec_from_argv([*BASE, "--results", str(tmp_path / "r"), "--server-pid", str(dead_pid)], {})
    with pytest.raises(SpecError, match="no such file"):
        spec_from_argv([*BASE, "--results", str(tmp_path / "r"), "--dataset", "/nonexistent"], {})


def test_config_is_at_most_six_import_layers_deep() -> None:
    """Modules of loadgen/config import each other at most 6 layers deep, without cycles."""
    deps: dict[str, set[str]] = {}
    for path in CONFIG.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "loadgen.config":
                    found |= {alias.name for alias in node.names}
                elif node.module.startswith("loadgen.config."):
                    found.add(node.module.split(".")[2])
        deps[path.stem] = found - {path.stem}
    depth: dict[str, int] = {}

    def layer(name: str, seen: tuple[str, ...]) -> int:
        assert name not in seen, f"import cycle: {' -> '.join((*seen, name))}"
        if name not in depth:
            depth[name] = 1 + max((layer(d, (*seen, name)) for d in deps[name]), default=0)
        return depth[name]

    assert max(layer(name, ()) for name in deps) <= 6


# Numeric settings a RunSpec may hold out of range, because the run is built where the
# value can be checked: the server's pid against this machine (build_spec.check_machine).
CHECKED_AT_BUILD = frozenset({"server_pid"})


def _numeric_fields() -> list[tuple[str, type]]:
    found: list[tuple[str, type]] = []
    for part in PARTS.values():
        hints = typing.get_type_hints(part)
        for f in dataclasses.fields(part):
            hint = hints[f.name]  # a number, or a number or None
            kinds = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}
            found += [(f.name, kind) for kind in (float, int) if kind in kinds]
    return found


@pytest.mark.parametrize(("name", "kind"), _numeric_fields())
def test_every_numeric_setting_is_checked_naming_its_flag(name: str, kind: type) -> None:
    """A number no option can use is refused by the part's `check`, in one line naming
    the flag the user typed: NaN for a float; for an integer, -10^30 or 10^30 (no option
    takes every integer). An option added to a part without its check written and wired
    into the part's `check` (or, for a float, its FLOATS entry) fails here."""
    if name in CHECKED_AT_BUILD:
        return
    spec = RunSpec.flat(conc=(4,), isl=64, osl=16, base_url="http://127.0.0.1:9")
    flags = [f.flag for f in RUN_FIELDS.values() if name in _filled(f.fills)]
    refused = []
    for bad in (math.nan,) if kind is float else (-(10**30), 10**30):
        try:
            spec.with_(**{name: bad})
        except SpecError as exc:
            refused.append(str(exc))
    assert refused, f"{name}: {kind.__name__} values no run can use are accepted"
    assert not flags or any(flag in line for flag in flags for line in refused), (name, flags)


def _filled(fills: str | tuple[str, ...] | None) -> tuple[str, ...]:
    return (fills,) if isinstance(fills, str) else fills or ()
