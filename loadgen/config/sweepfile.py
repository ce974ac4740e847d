"""Sweep files (`loadgen --config sweep.yaml`): a matrix of lanes, each lane one run.

    results: results/mtp-vs-stp    # the tree: each lane's results go to <results>/<name>
    conc: 1,4,16                   # any run flag here is shared by every lane
    workload: {isl: 1024, osl: 256}
    lanes:
      - name: no-spec              # [A-Za-z0-9._-]: the lane's directory
        target: {sim: true, sim-args: "--spec-tokens 0"}
      - name: mtp
        target: {sim: true, sim-args: "--spec-tokens 2"}

Every key is a run flag's long name (`-` or `_`), with the value the flag takes (lists
and mappings where the flag takes a list: conc, percentiles, header, slo, extra-body,
sim-args). `target:` and `workload:` group the flags of those `loadgen --help` groups;
the others (num-gpus, slo, spec-tokens, ...) sit beside them. A lane's keys override the
top level's; argv flags given with --config override both. Each lane goes through the
very parser argv does (`build_parser`), so it accepts and rejects the same things; every
error is one line naming the key path (`lanes[1].workload.isl: ...`), exit status 2.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from loadgen.config.args import (
    build_parser,
    default_results_dir,
    option_argv,
    option_dest,
    parse_run_args,
)
from loadgen.config.redact import redact_options
from loadgen.config.spec import RunSpec, SpecError

SECTIONS = ("target", "workload")  # argparse groups a document may group keys under
LANE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Keys a lane cannot set: its results directory is <tree>/<name>; live metrics would mix
# lanes that share a model and concurrency into one series.
LANE_REFUSED: Mapping[str, str] = {
    "results": "set once for the whole tree: put `results` at the top level (each lane "
    "writes <results>/<name>)",
    "metrics_port": "not available with a sweep file (lanes sharing a model and "
    "concurrency would mix in one series): run a lane alone with --metrics-port",
}


class SweepFileError(SpecError):
    """A sweep file is invalid; the message names the file and the key path."""


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    spec: RunSpec
    options: dict[str, Any]  # the lane's resolved keys (dest -> value), credentials redacted


@dataclass(frozen=True, slots=True)
class SweepPlan:
    results_dir: Path  # the tree
    lanes: tuple[Lane, ...]
    document: dict[str, Any]  # as written, credentials redacted (kept with the results)

    @property
    def points(self) -> int:
        return sum(len(lane.spec.load.conc) for lane in self.lanes)


# Bounds of a sweep document, CLI and sidecar alike, checked while it is parsed (before
# anything copies it): a real one is a few KiB, a few levels deep, with no aliases or a
# handful. Aliases are counted as the copies they become (redaction, argv, run.json each
# expand them), so a "billion laughs" document is refused after its first few KiB.
MAX_DOCUMENT_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 32  # nested mappings/lists
MAX_ALIASES = 64  # `*name` references
MAX_EXPANDED_NODES = 10_000  # values in the document with every alias expanded
MAX_INT_BITS = 64  # what any integer option can hold
MAX_INT_CHARS = 32  # an integer's text (digits, sign, _), checked before int() sees it


def _refused(source: str, where: str, problem: str) -> SweepFileError:
    return SweepFileError(f"{source}: {where}: {problem}" if where else f"{source}: {problem}")


class _SweepLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the bounds above, checked as each node is composed (so a
    hostile document is refused after its first few KiB, long before it is parsed
    whole); records each node's key path for the errors. A key given twice is an error
    too, not a silent last-one-wins."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.source = source
        self.where: dict[int, str] = {}  # id(node) -> key path, e.g. lanes[1].workload
        self._paths: list[str] = [""]  # the enclosing collections' paths
        self._aliases = 0
        self._values = 0  # composed so far, each alias counted as the copy it becomes
        self._sizes: dict[int, int] = {}  # id(node) -> its values, once composed

    def fail(self, node: yaml.Node | None, problem: str) -> SweepFileError:
        return _refused(self.source, self.where.get(id(node), "") if node else "", problem)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        where = _step(self._paths[-1], index)
        if self.check_event(yaml.AliasEvent):
            self._alias(self.peek_event(), where)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        if self.check_event(yaml.CollectionStartEvent) and len(self._paths) > MAX_DEPTH:
            raise _refused(
                self.source,
                where,
                f"nested more than {MAX_DEPTH} levels deep; a sweep document needs a few",
            )
        start = self._values
        self._paths.append(where)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._paths.pop()
        self._count(1, where)
        self.where[id(node)] = where
        self._sizes[id(node)] = self._values - start
        return node

    def _alias(self, event: yaml.Event, where: str) -> None:
        self._aliases += 1
        if self._aliases > MAX_ALIASES:
            raise _refused(
                self.source,
                where,
                f"more than {MAX_ALIASES} aliases (*name) in the document; write the values out",
            )
        anchored = self.anchors.get(getattr(event, "anchor", None))
        if anchored is None:
            return  # undefined: PyYAML says so
        size = self._sizes.get(id(anchored))
        if size is None:  # its anchor's node is still being composed: a cycle
            raise _refused(
                self.source,
                where,
                "an alias (*name) inside its own anchor; a sweep document cannot be recursive",
            )
        self._count(size, where)

    def _count(self, values: int, where: str) -> None:
        self._values += values
        if self._values > MAX_EXPANDED_NODES:
            raise _refused(
                self.source,
                where,
                f"more than {MAX_EXPANDED_NODES:,} values, "
                "each alias (*name) counted as the copy it becomes; a sweep "
                "document needs a few hundred",
            )


def _step(parent: str, index: Any) -> str:
    """The key path of a child: `[i]` in a list, `.key` in a mapping (a key: the parent)."""
    if isinstance(index, int):
        return f"{parent}[{index}]"
    if isinstance(index, yaml.ScalarNode):
        return f"{parent}.{index.value}" if parent else str(index.value)
    return parent


def _mapping(loader: _SweepLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str):
            shown = (
                repr(key)
                if isinstance(key_node, yaml.ScalarNode)
                else ("a list" if isinstance(key_node, yaml.SequenceNode) else "a mapping")
            )
            raise loader.fail(
                node, f'key {shown} is not a string; keys are setting names (quote it: "1": ...)'
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


def _integer(loader: _SweepLoader, node: yaml.ScalarNode) -> int:
    # int() of a long digit string is quadratic (and refused past 4300 digits with an
    # error PyYAML does not catch): look at the text first.
    if len(node.value) > MAX_INT_CHARS:
        raise loader.fail(
            node,
            f"integer of {len(node.value):,} characters; integers here fit in {MAX_INT_BITS} bits",
        )
    value: int = loader.construct_yaml_int(node)
    if value.bit_length() > MAX_INT_BITS:
        raise loader.fail(node, f"{value} does not fit in {MAX_INT_BITS} bits")
    return value


_SweepLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_SweepLoader.add_constructor("tag:yaml.org,2002:int", _integer)


def read_sweep_document(path: Path) -> Any:
    """The YAML (or JSON) document in `path`; unreadable or invalid YAML is one line."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_DOCUMENT_BYTES + 1)  # never more, whatever the file is
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SweepFileError(
            f"--config {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    return load_yaml(text, source=str(path))


def load_yaml(text: str, *, source: str) -> Any:
    """The one parser of sweep documents (a file, or the sidecar's YAML body)."""
    size = len(text.encode("utf-8", "replace"))
    if size > MAX_DOCUMENT_BYTES:
        raise SweepFileError(
            f"{source}: over {MAX_DOCUMENT_BYTES >> 20} MiB; a sweep "
            "document is a few KiB: split it"
        )
    loader = _SweepLoader(text, source)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SweepFileError(f"{source}: not valid YAML{where}: {problem}") from None
    finally:
        loader.dispose()


def check_document(value: Any, *, source: str) -> None:
    """The same bounds for a document parsed as JSON (the sidecar's JSON body): depth,
    integer size. Iterative: the depth is what is being checked."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, Mapping | list) and depth >= MAX_DEPTH:
            raise _refused(
                source,
                where,
                f"nested more than {MAX_DEPTH} levels deep; a sweep document needs a few",
            )
        if (
            isinstance(item, int)
            and not isinstance(item, bool)
            and (item.bit_length() > MAX_INT_BITS)
        ):
            raise _refused(source, where, f"{item} does not fit in {MAX_INT_BITS} bits")
        if isinstance(item, Mapping):
            stack += [(v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in item.items()]
        elif isinstance(item, list):
            stack += [(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item)]


def _groups() -> tuple[dict[str, argparse.Action], dict[str, frozenset[str]]]:
    parser = build_parser()
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    groups = {
        g.title or "": frozenset(a.dest for a in g._group_actions) for g in parser._action_groups
    }
    return actions, groups


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _shape_error(dest: str, action: argparse.Action, value: Any) -> str | None:
    """What the value should have been, when its YAML type cannot be the flag's."""
    if isinstance(action, argparse._StoreTrueAction):
        return None if isinstance(value, bool) else "true or false"
    if dest in ("conc", "percentiles"):
        ok = _scalar(value) or (
            isinstance(value, list) and value and all(_scalar(v) for v in value)
        )
        return None if ok else "a list of numbers or a string like 1,4,16"
    if dest == "rate_stages":  # [5@30s, 20@30s] or "5@30s,20@30s"
        ok = isinstance(value, str) or (
            isinstance(value, list) and value and all(isinstance(v, str) for v in value)
        )
        return None if ok else "a list of RATE@DURATION stages like [5@30s, 20@60s]"
    if dest in ("slo", "header"):
        ok = isinstance(value, str) or (
            isinstance(value, Mapping) and all(_scalar(v) for v in value.values())
        )
        ok = ok or (
            dest == "header" and isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
        return (
            None
            if ok
            else (
                "a mapping like {ttft: 2s}"
                if dest == "slo"
                else "a mapping NAME: VALUE or a list of NAME:VALUE strings"
            )
        )
    if dest == "extra_body":
        return None if isinstance(value, Mapping | str) else "a mapping of body fields"
    if dest == "sim_args":
        ok = isinstance(value, str) or (isinstance(value, list) and all(_scalar(v) for v in value))
        return None if ok else "a string of simulator flags or a list of them"
    if isinstance(action, argparse._AppendAction):  # repeatable (--gpu-metrics per node...)
        ok = _scalar(value) or (
            isinstance(value, list) and value and all(_scalar(v) for v in value)
        )
        return None if ok else "a value or a list of values"
    if action.type is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if action.type is float:
        return None if _scalar(value) and not isinstance(value, str) else "a number"
    return None if _scalar(value) else "a single value"


def _check_value(dest: str, action: argparse.Action, value: Any, where: str) -> None:
    if value is None:
        return  # null: the flag's default
    expected = _shape_error(dest, action, value)
    if expected is not None:
        raise SweepFileError(f"{where}: expected {expected}, got {value!r}")
    argv = option_argv(dest, value)
    for text in argv[1::2] if len(argv) > 1 else ():
        if action.choices is not None and text not in action.choices:
            raise SweepFileError(
                f"{where}: {text!r} is not one of {', '.join(map(str, action.choices))}"
            )
        convert = action.type
        if callable(convert) and convert not in (int, float):
            try:
                convert(text)
            except (argparse.ArgumentTypeError, SpecError, ValueError, TypeError) as exc:
                raise SweepFileError(f"{where}: {exc}") from None


class _Resolver:
    """Flattens one level (top or lane) into dest -> (value, key path)."""

    def __init__(self, source: str, forbidden: Mapping[str, str]) -> None:
        self.source = source
        self.forbidden = forbidden
        self.actions, self.groups = _groups()

    def fail(self, where: str, message: str) -> SweepFileError:
        return SweepFileError(f"{self.source}: {where}: {message}")

    def level(
        self, mapping: Mapping[Any, Any], prefix: str, skip: frozenset[str]
    ) -> dict[str, tuple[Any, str]]:
        out: dict[str, tuple[Any, str]] = {}
        for key, value in mapping.items():
            where = f"{prefix}{key}"
            if not isinstance(key, str):
                raise self.fail(where, "keys must be setting names (strings)")
            if key in skip:
                continue
            if key in SECTIONS:
                if not isinstance(value, Mapping):
                    raise self.fail(where, f"expected a mapping of {key} settings, got {value!r}")
                for inner, inner_value in value.items():
                    self._add(out, str(inner), inner_value, f"{where}.{inner}", key)
            else:
                self._add(out, key, value, where, None)
        return out

    def _add(
        self, out: dict[str, tuple[Any, str]], key: str, value: Any, where: str, section: str | None
    ) -> None:
        dest = option_dest(key)
        allowed = self.groups[section] if section else frozenset(self.actions)
        if dest not in allowed or dest == "help":
            raise self.fail(where, self._unknown(key, section))
        if dest in self.forbidden:
            raise self.fail(where, self.forbidden[dest])
        if dest in out:
            raise self.fail(where, f"given twice (also at {out[dest][1]})")
        _check_value(dest, self.actions[dest], value, f"{self.source}: {where}")
        out[dest] = (value, where)

    def _unknown(self, key: str, section: str | None) -> str:
        if section is None and key in ("name", "lanes"):
            return f"{key!r} belongs in a lane" if key == "name" else "only at the top level"
        names = sorted(_flag(d)[2:] for d in (self.groups[section] if section else self.actions))
        close = difflib.get_close_matches(key.replace("_", "-"), names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        other = [s for s in SECTIONS if s != section and option_dest(key) in self.groups[s]]
        if other:
            hint = f"it is a {other[0]} setting (put it under {other[0]}:); " + hint
        what = f"{section} setting" if section else "setting"
        return f"unknown {what} {key!r}; {hint}allowed: {', '.join(names)}"


def _lane_name(lane: Mapping[Any, Any], where: str, seen: set[str], source: str) -> str:
    name = lane.get("name")
    if name is None:
        raise SweepFileError(f"{source}: {where}.name: required (the lane's directory name)")
    if not isinstance(name, str) or not LANE_NAME.match(name):
        raise SweepFileError(
            f"{source}: {where}.name: {name!r} must be 1-64 of A-Z a-z 0-9 "
            ". _ - (it names the lane's directory), starting with a letter "
            "or digit"
        )
    if name in seen:
        raise SweepFileError(f"{source}: {where}.name: {name!r} is used by another lane")
    seen.add(name)
    return name


def _spec_error(
    exc: SpecError, where: str, keys: Mapping[str, tuple[Any, str]], source: str
) -> SweepFileError:
    """The parser's message, located at the key it is about when it names a flag."""
    message = str(exc)
    required = re.match(r"the following arguments are required: (.*)", message)
    if required:
        missing = [f.strip().lstrip("-") for f in required.group(1).split(",")]
        return SweepFileError(
            f"{source}: {where}: missing {', '.join(missing)}: give them in "
            "the lane or at the top level"
        )
    for flag in re.findall(r"--[a-z][a-z-]*", message):
        dest = flag[2:].replace("-", "_")
        if dest in keys:
            return SweepFileError(f"{source}: {keys[dest][1]}: {message}")
    return SweepFileError(f"{source}: {where}: {message}")


def parse_sweep(
    document: Any,
    *,
    source: str,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    results_dir: Path | None = None,
    forbidden: Mapping[str, str] | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> SweepPlan:
    """Every lane of `document` as a validated RunSpec.

    overrides: argv flags applied to every lane, after the file (the CLI's extra flags).
    results_dir: the tree (else the document's `results`, else ./results/<timestamp>).
    forbidden: dest -> why the key is refused here (the sidecar refuses target keys).
    fixed: options set on every lane after everything else (the sidecar's target).
    """
    if not isinstance(document, Mapping):
        raise SweepFileError(
            f"{source}: expected a mapping with a `lanes` list at the top, "
            f"got {type(document).__name__}"
        )
    lanes = document.get("lanes")
    if not isinstance(lanes, list) or not lanes:
        raise SweepFileError(
            f"{source}: lanes: {'empty' if lanes == [] else 'missing'}; "
            "give a list of lanes, each a mapping with a name"
        )
    resolver = _Resolver(source, {**LANE_REFUSED, **(forbidden or {})})
    shared = resolver.level(document, "", frozenset({"lanes", "results"}))
    tree = _tree(document, source, results_dir, forbidden or {})
    seen: set[str] = set()
    planned = []
    for index, lane in enumerate(lanes):
        where = f"lanes[{index}]"
        if not isinstance(lane, Mapping):
            raise SweepFileError(f"{source}: {where}: expected a mapping with a name, got {lane!r}")
        name = _lane_name(lane, where, seen, source)
        keys = {**shared, **resolver.level(lane, f"{where}.", frozenset({"name"}))}
        options = {dest: value for dest, (value, _) in keys.items()}
        argv = [*_argv(options), *overrides, *_argv({**(fixed or {}), "results": str(tree / name)})]
        try:
            spec, _, _ = parse_run_args(argv, {} if env is None else env)
        except SpecError as exc:
            raise _spec_error(exc, f"{where} ({name})", keys, source) from None
        planned.append(Lane(name, spec, redact_options(options)))
    # the one rule (config/redact.py) at every level: lanes, `target:` groups, the top
    return SweepPlan(tree, tuple(planned), redact_options(document))


def _argv(options: Mapping[str, Any]) -> list[str]:
    return [part for dest, value in options.items() for part in option_argv(dest, value)]


def _tree(
    document: Mapping[str, Any], source: str, results_dir: Path | None, forbidden: Mapping[str, str]
) -> Path:
    value = document.get("results")
    if value is not None and "results" in forbidden:
        raise SweepFileError(f"{source}: results: {forbidden['results']}")
    if results_dir is not None:
        return results_dir
    if value is None:
        return default_results_dir()
    if not isinstance(value, str) or not value:
        raise SweepFileError(f"{source}: results: expected a directory path, got {value!r}")
    return Path(value)


class _ConfigParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SweepFileError(message)


def parse_config_argv(argv: Sequence[str]) -> tuple[Path, Path | None, list[str]]:
    """`--config FILE [--results DIR] [run flags...]` -> (file, tree, flags for every lane)."""
    parser = _ConfigParser(prog="loadgen", add_help=False, allow_abbrev=False)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--metrics-port", default=None)
    known, rest = parser.parse_known_args(list(argv))
    if known.metrics_port is not None:
        raise SweepFileError(f"--metrics-port: {LANE_REFUSED['metrics_port']}")
    return known.config, known.results, rest


def load_sweep(
    path: Path,
    *,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    results_dir: Path | None = None,
) -> SweepPlan:
    """`loadgen --config PATH`: the file's lanes, argv overrides applied."""
    return parse_sweep(
        read_sweep_document(path),
        source=str(path),
        overrides=overrides,
        env=env,
        results_dir=results_dir,
    )
