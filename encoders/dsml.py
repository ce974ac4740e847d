"""DSML tool calls of DeepSeek-V4: render an assistant's calls, parse them back from text.

A block looks like (one invoke per call, one parameter per argument):

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="location" string="true">Beijing</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

String arguments are written raw (string="true"); every other JSON value as JSON
(string="false"), so parsing restores the exact types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from encoders.errors import EncodingError

DSML = "｜DSML｜"
TOOL_CALLS_OPEN = f"<{DSML}tool_calls>"
TOOL_CALLS_CLOSE = f"</{DSML}tool_calls>"
INVOKE_CLOSE = f"</{DSML}invoke>"
PARAMETER_CLOSE = f"</{DSML}parameter>"

_INVOKE_OPEN = re.compile(rf'<{DSML}invoke name="([^"\n]*)">')
_PARAMETER_OPEN = re.compile(rf'<{DSML}parameter name="([^"\n]*)" string="(true|false)">')
_WHITESPACE = re.compile(r"\s*")


def render_tool_calls(tool_calls: Sequence[Any], where: str) -> str:
    """The DSML block for an assistant's tool calls (the caller adds the blank line before)."""
    invokes = [
        _render_invoke(call, f"{where}, tool call {number}")
        for number, call in enumerate(tool_calls)
    ]
    return f"{TOOL_CALLS_OPEN}\n" + "\n".join(invokes) + f"\n{TOOL_CALLS_CLOSE}"


def _render_invoke(call: Any, where: str) -> str:
    name, arguments = call_name_and_arguments(call, where)
    lines = [f'<{DSML}invoke name="{name}">']
    for key, value in arguments.items():
        if isinstance(value, str):
            lines.append(f'<{DSML}parameter name="{key}" string="true">{value}{PARAMETER_CLOSE}')
        else:
            as_json = json.dumps(value, ensure_ascii=False)
            lines.append(f'<{DSML}parameter name="{key}" string="false">{as_json}{PARAMETER_CLOSE}')
    lines.append(INVOKE_CLOSE)
    return "\n".join(lines)


def call_name_and_arguments(call: Any, where: str) -> tuple[str, dict[str, Any]]:
    """Name and decoded arguments of an OpenAI-style tool call (arguments: JSON text or dict)."""
    if not isinstance(call, Mapping):
        raise EncodingError(f"{where}: a tool call must be an object, got {type(call).__name__}")
    function = call.get("function", call)
    if not isinstance(function, Mapping):
        raise EncodingError(f"{where}: 'function' must be an object with name and arguments")
    name = function.get("name")
    if not isinstance(name, str) or not name or '"' in name or "\n" in name:
        raise EncodingError(f"{where}: the function name must be a non-empty string without quotes")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise EncodingError(f"{where} ({name}): arguments are not valid JSON: {exc}") from exc
    if not isinstance(arguments, Mapping):
        raise EncodingError(f"{where} ({name}): arguments must be a JSON object")
    for key in arguments:
        if not isinstance(key, str) or '"' in key or "\n" in key:
            raise EncodingError(
                f"{where} ({name}): argument name {key!r} cannot be written in DSML"
            )
    return name, dict(arguments)


def parse_tool_calls(text: str, start: int) -> tuple[list[dict[str, Any]], int]:
    """Parse the block opening at `start`; return the calls and the offset just past it."""
    if not text.startswith(TOOL_CALLS_OPEN, start):
        raise EncodingError(f"completion text: expected {TOOL_CALLS_OPEN} at offset {start}")
    position = _skip_whitespace(text, start + len(TOOL_CALLS_OPEN))
    calls: list[dict[str, Any]] = []
    while not text.startswith(TOOL_CALLS_CLOSE, position):
        match = _INVOKE_OPEN.match(text, position)
        if match is None:
            raise _malformed(text, position, f"an invoke or {TOOL_CALLS_CLOSE}")
        arguments, position = _parse_parameters(text, _skip_whitespace(text, match.end()))
        calls.append(
            {
                "type": "function",
                "function": {
                    "name": match.group(1),
                    "arguments": json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
    return calls, position + len(TOOL_CALLS_CLOSE)


def _parse_parameters(text: str, position: int) -> tuple[dict[str, Any], int]:
    """Parameters up to and including the invoke's closing tag."""
    arguments: dict[str, Any] = {}
    while not text.startswith(INVOKE_CLOSE, position):
        match = _PARAMETER_OPEN.match(text, position)
        if match is None:
            raise _malformed(text, position, f"a parameter or {INVOKE_CLOSE}")
        name, is_string = match.group(1), match.group(2) == "true"
        close = text.find(PARAMETER_CLOSE, match.end())
        if close < 0:
            raise EncodingError(f"completion text: parameter {name!r} is never closed")
        if name in arguments:
            raise EncodingError(f"completion text: parameter {name!r} is given twice")
        raw = text[match.end() : close]
        arguments[name] = raw if is_string else _json_value(name, raw)
        position = _skip_whitespace(text, close + len(PARAMETER_CLOSE))
    return arguments, _skip_whitespace(text, position + len(INVOKE_CLOSE))


def _json_value(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise EncodingError(
            f'completion text: parameter {name!r} has string="false" but its value is not '
            f"JSON ({exc})"
        ) from exc


def _skip_whitespace(text: str, position: int) -> int:
    match = _WHITESPACE.match(text, position)
    return position if match is None else match.end()


def _malformed(text: str, position: int, expected: str) -> EncodingError:
    found = text[position : position + 40]
    return EncodingError(
        f"completion text: malformed DSML at offset {position}: expected {expected}, "
        f"found {found!r}"
    )
