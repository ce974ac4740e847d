"""What counts as a secret in settings, and its redacted form (pure, no I/O).

The one rule for everything loadgen stores or returns (result files, the sidecar's
run.json and API answers, error lines): header values and `--extra-body` string fields
whose name looks like a credential, and credentials inside URLs (`user:password@`,
secret-named query parameters), become `***`; so do, in a launched server's command
(`--serve-cmd`) and environment (`--serve-env`), the value of a flag or variable one of
whose words names a credential (`--api-key K`, `--hf-token=T`, `HF_TOKEN=T`: not
`--max-num-batched-tokens`, whose words are plural counts, nor `--tokenizer`). Requests
themselves always carry the real values; only what is written down or shown is redacted.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "***"
# A header or query parameter whose name contains one of these (case-insensitive) is a
# credential: Authorization, Proxy-Authorization, X-Api-Key, X-Upstream-Auth, Cookie,
# X-Auth-Token, ... Wider than strictly needed: a redacted harmless value costs less
# than a leaked key.
_SECRET_NAME = re.compile(r"key|token|secret|auth|cookie|passw(?:or)?d|credential", re.I)
# scheme://userinfo@ in free text; greedy up to the last `@` of the authority, which
# ends at the first `/`, `?`, `#` or whitespace (RFC 3986 section 3.2).
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]*@")
# ?name=value or &name=value (a query parameter), value up to the next & # or whitespace.
_QUERY_PARAM = re.compile(r"(?P<sep>[?&])(?P<name>[^=&#\s]+)=[^&#\s]*")
# Sidecar options (and argv flags) that hold `NAME:VALUE` headers.
_HEADER_OPTIONS = frozenset({"header", "headers"})
_BODY_OPTIONS = frozenset({"extra_body"})
_COMMAND_OPTIONS = frozenset({"serve_cmd"})
_ENV_OPTIONS = frozenset({"serve_env"})
# A command-line flag's or an environment variable's words (split at - and _) that name
# a credential: whole words only, so counts (`tokens`) and paths (`tokenizer`) stay.
_SECRET_WORD = re.compile(
    r"(?:api)?(?:key|token|secret|auth|authorization|cookie|passw(?:or)?d|credentials?)",
    re.I,
)
_WORDS = re.compile(r"[-_]+")


def is_secret_name(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


def redact_header(name: str, value: str) -> str:
    """The value to show for header `name` (any other header may still hold a URL)."""
    return REDACTED if is_secret_name(name) else redact_text(value)


def redact_header_text(text: str) -> str:
    """`NAME:VALUE` (the --header form) with a secret value replaced."""
    name, sep, value = text.partition(":")
    return f"{name}{sep}{redact_header(name.strip(), value)}" if sep else text


def url_has_credentials(url: str) -> bool:
    """Whether the URL carries `userinfo@` (aiohttp sends it as Basic auth)."""
    return _URL_USERINFO.match(url) is not None


def redact_url(url: str) -> str:
    """A URL with its userinfo and secret-named query values replaced; everything else is
    kept exactly as given (the recorded base_url stays what the user typed)."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """Free text (an option, an error message) with every URL's credentials replaced."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _QUERY_PARAM.sub(_redact_param, text)


def _redact_param(match: re.Match[str]) -> str:
    if not is_secret_name(match["name"]):
        return match[0]
    return f"{match['sep']}{match['name']}={REDACTED}"


def is_secret_word_name(name: str) -> bool:
    """A flag or variable name (`--api-key`, `HF_TOKEN`) one of whose words is a credential."""
    return any(_SECRET_WORD.fullmatch(word) for word in _WORDS.split(name) if word)


def redact_command(argv: Sequence[str]) -> list[str]:
    """A server command with its credentials replaced: the value after a secret-named
    flag (`--api-key K`, `--api-key=K`), a secret-named `NAME=VALUE` argument (an `env`
    prefix), and URLs' credentials anywhere."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        name, eq, _ = arg.partition("=")
        if hide_next and not arg.startswith("--"):
            shown.append(REDACTED)
        elif eq and is_secret_word_name(name.lstrip("-")):
            shown.append(f"{name}={REDACTED}")
        else:
            shown.append(redact_text(arg))
        hide_next = arg.startswith("-") and not eq and is_secret_word_name(arg.lstrip("-"))
    return shown


def redact_env(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """A launched server's extra environment, a secret-named variable's value replaced."""
    return {
        name: REDACTED if is_secret_word_name(name) else redact_text(value) for name, value in pairs
    }


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Run options (the sidecar's JSON, flag names with `-` or `_`) or a sweep document
    (its lanes and `target:` groups hold the same keys, at any depth) safe to store/show."""
    return {key: _redact_option(key, value) for key, value in options.items()}


def _redact_option(key: str, value: Any) -> Any:
    if key.replace("-", "_").lower() in _HEADER_OPTIONS:
        headers = _redact_headers(value)
        if headers is not None:
            return headers
    if key.replace("-", "_").lower() in _BODY_OPTIONS:
        return redact_body(value)
    if key.replace("-", "_").lower() in _COMMAND_OPTIONS:
        if isinstance(value, str):
            try:
                return shlex.join(redact_command(shlex.split(value)))
            except ValueError:  # refused when the run is built; show it as text
                return redact_text(value)
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return redact_command(value)
    if key.replace("-", "_").lower() in _ENV_OPTIONS:
        return _redact_env_option(value)
    if key.replace("-", "_").lower() == "api_key":  # refused by the sidecar; never shown
        return None if value is None else REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list | tuple):
        return [_redact_option("", v) for v in value]
    if isinstance(value, Mapping):
        return {k: _redact_option(str(k), v) for k, v in value.items()}
    return value


def _redact_env_option(value: Any) -> Any:
    """Every form --serve-env takes: "NAME=VALUE", a list of them, {NAME: VALUE}."""
    if isinstance(value, Mapping):
        return {
            k: REDACTED if is_secret_word_name(str(k)) else _redact_option("", v)
            for k, v in value.items()
        }
    items = value if isinstance(value, list | tuple) else [value]
    shown: list[Any] = []
    for item in items:
        if isinstance(item, str):
            cut = min((i for i in (item.find("="), item.find(":")) if i > 0), default=-1)
            name = item[:cut] if cut > 0 else ""
            hidden = bool(name) and is_secret_word_name(name)
            shown.append(f"{item[: cut + 1]}{REDACTED}" if hidden else redact_text(item))
        elif isinstance(item, list | tuple) and len(item) == 2:  # a (name, value) pair
            name, val = str(item[0]), item[1]
            shown.append([name, REDACTED if is_secret_word_name(name) else _redact_option("", val)])
        else:
            shown.append(_redact_option("", item))
    return shown if isinstance(value, list | tuple) else shown[0]


def _redact_headers(value: Any) -> Any:
    """Every form a header option takes: "K:V", ["K:V", ...], {K: V} (a sweep file's);
    None for anything else (redacted as any other value)."""
    if isinstance(value, str):
        return redact_header_text(value)
    if isinstance(value, list | tuple):
        return [
            redact_header_text(v) if isinstance(v, str) else _redact_option("", v) for v in value
        ]
    if isinstance(value, Mapping):
        return {
            k: REDACTED if is_secret_name(str(k)) and v is not None else _redact_option("", v)
            for k, v in value.items()
        }
    return None


def redact_body(value: Any) -> Any:
    """Request-body fields (`--extra-body`, a mapping or its JSON text) safe to store:
    a string under a secret-looking name at any depth is `***` (a provider key passed
    through the body), every other string as free text. A JSON text stays text."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return redact_text(value)
        return json.dumps(redact_body(parsed)) if isinstance(parsed, dict) else redact_text(value)
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(v, str) and is_secret_name(str(k)) else redact_body(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_body(v) for v in value]
    return value


def redact_json(value: Any) -> Any:
    """A parsed JSON document with every string passed through `redact_text`."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_json(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_json(v) for k, v in value.items()}
    return value
