"""One typed entry per run option: the table argparse's run parser is built from, and the
one sweep files and the sidecar's JSON options are decoded with (config/decode.py).

An entry says how a value is read (`parse`: the same small function for argv text and
for a document's value), its kind (how argparse takes it: a flag, one value, a
repeatable, a repeatable list) and its shape (what a YAML/JSON value may look like).
Nothing here reads argparse's own objects back: the table is the source, the parser
is one of its outputs.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from loadgen.config.parsers import SpecError

# flag: store_true; scalar: one value; repeat: `--x A --x B` (append); extend: `--x A B`
Kind = Literal["flag", "scalar", "repeat", "extend"]
# what a document may give beyond the flag's text: value (one scalar), numbers (a list
# of numbers joined by commas: conc, percentiles), stages (RATE@DURATION strings joined),
# slo (a mapping NAME: T joined as NAME=T,...), headers (a mapping NAME: VALUE or a list
# of NAME:VALUE strings), body (a JSON object), args (a list of simulator flags)
Shape = Literal["value", "numbers", "stages", "slo", "headers", "body", "args"]
_ACTIONS: dict[str | None, Kind] = {
    None: "scalar",
    "store_true": "flag",
    "append": "repeat",
    "extend": "extend",
}


@dataclass(frozen=True, slots=True)
class Field:
    flags: tuple[str, ...]  # the first long one names the option
    dest: str
    help: str
    kind: Kind
    parse: Callable[[str], Any] | None  # None: the text itself
    default: Any
    choices: tuple[str, ...] | None
    metavar: str | None
    shape: Shape
    # The RunSpec setting(s) the value fills (flat names, config/spec.py); None: an input
    # its part's `derive` (or the compatibility mapping) combines with others.
    fills: str | tuple[str, ...] | None = None
    to: Callable[[Any], Any] | None = None  # value -> setting; None: as it is
    # A list or mapping in a document (a sweep file's lane, the sidecar's JSON) read
    # straight to the value: the function `parse` ends in once it has split the flag's
    # text (a list of items; (NAME, VALUE) pairs; a JSON object), not that text re-joined.
    read: Callable[[Any], Any] | None = None
    keep_none: bool = False  # None is a value here (workers: auto), not "not given"
    section: str | None = None  # the sweep document's `target:`/`workload:` it may sit in

    @property
    def flag(self) -> str:
        return next(f for f in self.flags if f.startswith("--"))

    def help_text(self) -> str:
        """The help, ending with its default exactly once."""
        text = self.help
        if "default" in text or text == argparse.SUPPRESS:  # SUPPRESS: not in --help
            return text
        if self.kind == "flag":
            return f"{text} (default: off)"
        default = self.default
        if default is None or default in ("", [], {}):
            return f"{text} (default: none)"
        if isinstance(default, tuple):
            default = ",".join(f"{v:g}" for v in default)
        return f"{text} (default: {default})"


class ArgumentAdder(Protocol):
    """What argparse's parser and its argument groups have in common here."""

    def add_argument(self, *names: str, **options: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Group:
    title: str
    fields: tuple[Field, ...]
    description: str | None = None


def flag(
    *flags: str,
    help: str,
    action: str | None = None,
    nargs: str | None = None,
    type: Callable[[str], Any] | None = None,
    default: Any = None,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    dest: str | None = None,
    shape: Shape = "value",
    fills: str | tuple[str, ...] | None = None,
    to: Callable[[Any], Any] | None = None,
    read: Callable[[Any], Any] | None = None,
    keep_none: bool = False,
    section: str | None = None,
) -> Field:
    """A table entry, written like the add_argument call it becomes, naming the setting
    it fills."""
    kind = _ACTIONS[action]
    if (kind == "extend") != (nargs == "+"):
        raise ValueError(f"{flags[0]}: extend goes with nargs='+' and only with it")
    long = next(f for f in flags if f.startswith("--"))
    return Field(
        flags=tuple(flags),
        dest=dest or long[2:].replace("-", "_"),
        help=help,
        kind=kind,
        parse=type,
        default=False if kind == "flag" else default,
        choices=tuple(choices) if choices is not None else None,
        metavar=metavar,
        shape=shape,
        fills=fills,
        to=to,
        read=read,
        keep_none=keep_none,
        section=section,
    )


def default_of(part: type[Any], name: str) -> Any:
    """A part's default for one of its settings: flags show and take the struct's own."""
    spec = {f.name: f for f in dataclasses.fields(part)}[name]
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


def typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse `type` from a parser that raises SpecError (the message is kept)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")  # argparse names the type in errors
    return convert


def add_field(
    group: ArgumentAdder,
    field: Field,
    *,
    suppress: bool = False,
) -> None:
    """The field as argparse takes it; suppress: no default (only given flags are set)."""
    options: dict[str, Any] = {
        "dest": field.dest,
        "help": field.help_text(),
        "default": argparse.SUPPRESS if suppress else field.default,
    }
    if field.kind == "flag":
        options["action"] = "store_true"
    else:
        options["metavar"] = field.metavar
        if field.parse is not None:
            options["type"] = typed(field.parse)
        if field.choices is not None:
            options["choices"] = field.choices
    if field.kind == "repeat":
        options["action"] = "append"
    elif field.kind == "extend":
        options.update(action="extend", nargs="+")
    group.add_argument(*field.flags, **options)
