"""A document's run options (a sweep file's lane, the sidecar's JSON options) -> the very
values argparse gives for the same flags, straight from the table (config/table.py):
each value's YAML/JSON type checked against its entry's kind and shape, then read by the
entry's own parser: a scalar as the flag's one value, a list or mapping item by item
(the entry's `read`, which the flag's text parser ends in too), never joined back into
flag text to be split again. Errors name the key path given."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from loadgen.config.fields import Field
from loadgen.config.parsers import SpecError
from loadgen.config.table import RUN_FIELDS


def option_dest(key: str) -> str:
    """An option's dest: flag names with `-` or `_`, plus the API's aliases."""
    name = key.replace("-", "_")
    return {"results_dir": "results", "headers": "header"}.get(name, name)


def decode_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The sidecar's options (flag names -> JSON values) as dest -> value; an error is
    one line starting with the key."""
    values: dict[str, Any] = {}
    for key, value in options.items():
        field = RUN_FIELDS.get(option_dest(key))
        if field is None:
            raise SpecError(f"unknown option {key!r}; allowed: {', '.join(sorted(RUN_FIELDS))}")
        if value is not None:
            values[field.dest] = decode_value(field, value, key)
    return values


def decode_value(field: Field, value: Any, where: str) -> Any:
    """`value` (not None) as argparse would give the flag; SpecError `where: ...`."""
    read = _reader(field, value)
    if read is None:
        raise SpecError(f"{where}: expected {_expected(field)}, got {value!r}")
    if field.choices is not None and field.kind != "flag":
        for item in value if isinstance(value, list) else [value]:
            if str(item) not in field.choices:
                raise SpecError(f"{where}: {str(item)!r} is not one of {', '.join(field.choices)}")
    try:
        return read()
    except (SpecError, ValueError, TypeError) as exc:
        raise SpecError(f"{where}: {exc}") from None


def _reader(field: Field, value: Any) -> Callable[[], Any] | None:
    """How the value becomes the flag's, or None when its type cannot be the flag's."""
    shape, parse, read = field.shape, field.parse, field.read
    if field.kind == "flag":
        return (lambda: value) if isinstance(value, bool) else None
    if isinstance(value, str) and shape != "value" and parse is not None:
        # the flag's own text (`conc: 1..64`, `slo: ttft=2s`); a list of headers is each
        # header's text
        return lambda: [parse(value)] if field.kind in ("repeat", "extend") else parse(value)
    if shape == "numbers":
        items = _scalars(value)
        return None if items is None or read is None else lambda: read(items)
    if shape in ("stages", "args"):  # the setting's `to` (or its part's derive) reads them
        if isinstance(value, str):
            return lambda: value
        items = _scalars(value, str if shape == "stages" else (str, int, float)) or []
        return (lambda: tuple(str(v) for v in items)) if items else None
    if shape == "slo":
        if not _scalar_map(value) or read is None:
            return None
        return lambda: read(list(value.items()))
    if shape == "headers":
        if _scalar_map(value) and read is not None:
            return lambda: [read((str(k), v)) for k, v in value.items()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return lambda: [_one(parse, v) for v in value]
        return None
    if shape == "body":
        return (lambda: read(value)) if isinstance(value, Mapping) and read is not None else None
    if field.kind in ("repeat", "extend"):
        found = _scalars(value) or []
        return (lambda: [_one(parse, v) for v in found]) if found else None
    return (lambda: _one(parse, value)) if _fits(field, value) else None


def _one(parse: Callable[[str], Any] | None, value: Any) -> Any:
    """One scalar by the flag's parser: a number to a float parser as it is; any other
    parser reads the scalar's own spelling (units, `auto`, `inf`; `int` refuses `1.5`)."""
    if parse is None:
        return str(value)
    if parse is float and not isinstance(value, str):
        return float(value)
    return parse(value if isinstance(value, str) else str(value))


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _scalar_map(value: Any) -> bool:
    return isinstance(value, Mapping) and all(_scalar(v) for v in value.values())


def _scalars(value: Any, kind: type | tuple[type, ...] = (str, int, float)) -> list[Any] | None:
    """A non-empty list of scalars of `kind`, or one such scalar, as a list."""
    items = value if isinstance(value, list) else [value]
    ok = bool(items) and all(isinstance(v, kind) and not isinstance(v, bool) for v in items)
    return items if ok else None


def _fits(field: Field, value: Any) -> bool:
    if field.parse is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if field.parse is float:
        return _scalar(value) and not isinstance(value, str)
    return _scalar(value)


def _expected(field: Field) -> str:
    """What the value should have been, in the words a sweep file's author reads."""
    if field.kind == "flag":
        return "true or false"
    by_shape = {
        "numbers": "a list of numbers or a string like 1,4,16",
        "stages": "a list of RATE@DURATION stages like [5@30s, 20@60s]",
        "slo": "a mapping like {ttft: 2s}",
        "headers": "a mapping NAME: VALUE or a list of NAME:VALUE strings",
        "body": "a mapping of body fields",
        "args": "a string of simulator flags or a list of them",
    }
    if field.dest == "conc_stages":
        return "a list of CONCURRENCY@DURATION stages like [4@30s, 16@60s]"
    if field.shape in by_shape:
        return by_shape[field.shape]
    if field.kind in ("repeat", "extend"):
        return "a value or a list of values"
    if field.parse is int:
        return "an integer"
    return "a number" if field.parse is float else "a single value"


__all__ = ["decode_options", "decode_value", "option_dest"]
