"""Reading a sweep document safely: PyYAML's safe loader with bounds on size, depth,
aliases and integers, checked while the document is composed, and the same bounds for a
document parsed as JSON (the sidecar's body). Every error is one line naming the key
path; what the document means is config/sweepfile.py's job."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from loadgen.config.parsers import SpecError


class SweepFileError(SpecError):
    """A sweep file is invalid; the message names the file and the key path."""


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
