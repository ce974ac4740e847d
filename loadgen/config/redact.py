"""What counts as a secret in settings, and its redacted form (pure, no I/O).

The one rule for everything loadgen stores or returns (result files, the sidecar's
run.json and API answers, error lines): header values and `--extra-body` string fields
whose name looks like a credential, and credentials inside URLs (`user:password@`,
secret-named query parameters), become `***`; so do, in a launched server's command
(`--serve-cmd`) and environment (`--serve-env`), the value of a flag or variable one of
whose words names a credential (`--api-key K`, `--hf-token=T`, `HF_TOKEN=T`: not
`--max-num-batched-tokens`, whose words are plural counts, nor `--tokenizer`): every
value after such a flag up to the next flag, and inside a word that is a command of its
own (`sh -c '... --api-key K'`, split again as a shell would). What a launched server
prints (its log's last line) is free text: the values its command and environment hide,
and the same flag and `NAME=VALUE` / `name: value` shapes in it, become `***` too.
Requests themselves always carry the real values; only what is written down or shown is
redacted.
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
    """A server command with its credentials replaced: every value after a secret-named
    flag up to the next flag (`--api-key K1 K2`, `--api-key=K`), a secret-named
    `NAME=VALUE` argument (an `env` prefix), the same inside a word that is itself a
    command (`sh -c '... --api-key K'`, split again as a shell would), and URLs'
    credentials anywhere."""
    return _walk_command(argv)[0]


def secret_values(argv: Sequence[str], env: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The values `redact_command` and `redact_env` hide, longest first: what a server
    may echo back in its own output (its argv, its environment) to be hidden there too.
    Values shorter than MIN_SECRET_CHARS are left to the word rules: replacing `1` in
    every log line would say nothing and hide the log."""
    found = set(_walk_command(argv)[1])
    found.update(value for name, value in env if is_secret_word_name(name))
    return sorted((v for v in found if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact_output(text: str, secrets: Sequence[str] = ()) -> str:
    """Free text a server wrote (a launched server's log line) safe to print or store:
    each known secret value (`secret_values`) anywhere, the words after a secret-named
    flag, `NAME=VALUE` and `name: value` with a secret name, and URLs' credentials."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return redact_text(_redact_words(text))


MIN_SECRET_CHARS = 4
# Shell operators a shell-style split returns as words of their own (`;`, `&&`, `|`):
# they end a flag's values as a flag does.
_OPERATOR = re.compile(r"[;&|()<>]+")
# Quoting and list punctuation around a word in free text (`['--api-key', 'sk-1']`,
# `{'api_key': 'sk-1'}`, `"token=x",`).
_WORD_EDGES = "\"'[](){},;`"
_SPACE = re.compile(r"(\s+)")
# NAME=VALUE anywhere in free text (`Namespace(api_key='K', ...)`, `env HF_TOKEN=K`):
# the value up to a space, quote or closing punctuation.
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])(?P<name>-{0,2}[A-Za-z_][\w.-]*)=(?P<quote>['\"]?)(?P<value>[^\s'\",;)\]}]+)"
)
# A flag's or variable's name before `=` (not a whole script that holds an `=` somewhere).
_NAME = re.compile(r"-{0,2}[A-Za-z_][\w.-]*")


def _is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1


def _secret_flag(word: str) -> bool:
    return _is_flag(word) and "=" not in word and is_secret_word_name(word.lstrip("-"))


def _walk_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The words shown and the values hidden."""
    shown: list[str] = []
    hidden: list[str] = []
    hiding = False  # after a secret flag: every word until the next flag or operator
    for arg in argv:
        if hiding and not _is_flag(arg) and not _OPERATOR.fullmatch(arg):
            shown.append(REDACTED)
            hidden.append(arg)
            continue
        hiding = _secret_flag(arg)
        name, eq, value = arg.partition("=")
        if eq and _NAME.fullmatch(name) and is_secret_word_name(name.lstrip("-")):
            shown.append(f"{name}={REDACTED}")
            hidden.append(value)
            continue
        inner = _shell_words(arg)
        if inner is not None:
            inner_shown, inner_hidden = _walk_command(inner)
            if inner_hidden:
                shown.append(_redact_words(redact_text(_replaced(arg, inner_hidden, inner_shown))))
                hidden.extend(inner_hidden)
                continue
        shown.append(_redact_words(redact_text(arg)))  # `-H "Authorization: Bearer K"`
    return shown, hidden


def _shell_words(arg: str) -> list[str] | None:
    """`arg` split again as a shell would split a command (operators as words of their
    own), when it is more than one word; None when it is one, or cannot be split (an
    unbalanced quote: then its words are redacted as free text)."""
    lexer = shlex.shlex(arg, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None
    return words if words != [arg] and words else None


def _replaced(arg: str, hidden: Sequence[str], shown: Sequence[str]) -> str:
    """`arg` as written, each hidden value replaced where it stands; when one is not
    there verbatim (quoting or escapes inside it), the redacted words joined again."""
    for value in sorted(hidden, key=len, reverse=True):
        if value not in arg:
            return " ".join(_quoted(word) for word in shown)
        arg = arg.replace(value, REDACTED)
    return arg


def _quoted(word: str) -> str:
    if word == REDACTED or _OPERATOR.fullmatch(word):
        return word
    name, eq, value = word.partition("=")
    if eq and value == REDACTED:
        return f"{shlex.quote(name)}={REDACTED}"
    return shlex.quote(word)


def _redact_assignment(match: re.Match[str]) -> str:
    if not is_secret_word_name(match["name"].lstrip("-")):
        return match[0]
    return f"{match['name']}={match['quote']}{REDACTED}"


def _redact_words(text: str) -> str:
    """Free text's words with the command rules applied (what follows a secret flag,
    `NAME=VALUE`), plus `name: value` (a header, a printed mapping) with a secret name:
    its value, a bracketed list to its end. Spacing and punctuation are kept."""
    parts = _SPACE.split(_ASSIGNMENT.sub(_redact_assignment, text))
    mode = ""  # "flag": until the next flag; "one": one word; "list": until `]`
    for i in range(0, len(parts), 2):
        word = parts[i]
        core = word.strip(_WORD_EDGES)
        if mode == "flag" and _OPERATOR.fullmatch(word):
            mode = ""  # `--api-key K ; next command`
        if not core:
            continue
        if mode == "flag" and _is_flag(core):
            mode = ""
        if mode:
            if mode == "one" and word.lstrip(_WORD_EDGES[:2]).startswith("["):
                mode = "list"
            if mode == "one" and core.lower() in ("bearer", "basic"):
                parts[i] = word.replace(core, REDACTED, 1)
                continue
            parts[i] = word.replace(core, REDACTED, 1)
            ends_command = mode == "flag" and word.rstrip("'\"").endswith((";", "&", "|"))
            if mode == "one" or (mode == "list" and "]" in word) or ends_command:
                mode = ""
            continue
        if core.endswith("=") and is_secret_word_name(core[:-1].lstrip("-")):
            mode = "one"  # `HF_TOKEN= value`
        elif _secret_flag(core):
            mode = "flag"
        elif (
            core.endswith(":")
            and not _is_flag(core)
            and is_secret_word_name(core.rstrip(":").strip(_WORD_EDGES))
        ):
            mode = "one"
    return "".join(parts)


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
