"""A document's run options (a sweep file's lane, the sidecar's JSON options) -> the very
values argparse gives for the same flags, straight from the table (config/table.py):
each value's YAML/JSON type checked against its entry's kind and shape, then run through
the entry's own parser, as argv text is. Errors name the key path given."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

import orjson

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
    texts = _texts(field, value)
    if texts is None:
        raise SpecError(f"{where}: expected {_expected(field)}, got {value!r}")
    if field.kind == "flag" or field.shape == "args":
        return value if field.kind == "flag" else texts[0]
    if field.choices is not None:
        for text in texts:
            if text not in field.choices:
                raise SpecError(f"{where}: {text!r} is not one of {', '.join(field.choices)}")
    try:
        parsed = [_read(field.parse, text, value) for text in texts]
    except (SpecError, ValueError, TypeError) as exc:
        raise SpecError(f"{where}: {exc}") from None
    return parsed if field.kind in ("repeat", "extend") else parsed[0]


def _read(parse: Callable[[str], Any] | None, text: str, value: Any) -> Any:
    if parse is None:
        return text
    if parse in (int, float) and not isinstance(value, list | Mapping):
        return parse(value)  # the number itself, already checked to be one
    return parse(text)


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _scalars(value: Any, kind: type | tuple[type, ...] = (str, int, float)) -> list[Any] | None:
    """A non-empty list of scalars of `kind`, or one such scalar, as a list."""
    items = value if isinstance(value, list) else [value]
    ok = bool(items) and all(isinstance(v, kind) and not isinstance(v, bool) for v in items)
    return items if ok else None


def _texts(field: Field, value: Any) -> list[str] | None:
    """The flag texts the value stands for, or None when its type cannot be the flag's."""
    shape = field.shape
    if field.kind == "flag":
        return [] if isinstance(value, bool) else None
    if shape in ("numbers", "stages"):
        items = _scalars(value) if shape == "numbers" else _scalars(value, str)
        return None if items is None else [",".join(str(v) for v in items)]
    if shape == "slo":
        if isinstance(value, Mapping) and all(_scalar(v) for v in value.values()):
            return [",".join(f"{k}={v}" for k, v in value.items())]
        return [value] if isinstance(value, str) else None
    if shape == "headers":
        if isinstance(value, Mapping) and all(_scalar(v) for v in value.values()):
            return [f"{k}:{v}" for k, v in value.items()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        return [value] if isinstance(value, str) else None
    if shape == "body":
        if isinstance(value, Mapping):
            return [orjson.dumps(dict(value)).decode()]
        return [value] if isinstance(value, str) else None
    if shape == "args":
        if isinstance(value, list) and all(_scalar(v) for v in value):
            return [shlex.join(str(v) for v in value)]
        return [value] if isinstance(value, str) else None
    if field.kind in ("repeat", "extend"):
        items = _scalars(value)
        return None if items is None else [str(v) for v in items]
    return [str(value)] if _fits(field, value) else None


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
