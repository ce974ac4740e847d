"""The target part: the server, its credentials and what goes on the wire besides the
prompt (`spec.target`), with the simulator loadgen may start instead (run-level `sim`,
`sim_args`) or the server command it may launch for the run (`--serve-cmd`), and what
loadgen does to the server between points (its prefix-cache resets) and around them (its
profiler windows): its flags, its struct and its checks."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from loadgen.config.fields import Field, default_of, flag
from loadgen.config.parsers import (
    CONTROL_CHARS,
    SpecError,
    check_api_key,
    check_extra_body,
    extra_body,
    header_pair,
    parse_extra_body,
    parse_header,
    seconds_parser,
)
from loadgen.config.redact import (
    REDACTED,
    redact_body,
    redact_command,
    redact_env,
    redact_url,
    url_has_credentials,
)

Endpoint = Literal["completions", "chat"]
# the client the results record: native, or bench/aiohttp_client.py's comparison client
# (the command line takes native only: parse_http_client)
HttpClient = Literal["native", "aiohttp"]
ENDPOINTS: tuple[str, ...] = ("completions", "chat")
# the serving engine families whose server-side figures loadgen reads (metrics/engines.py)
Engine = Literal["auto", "vllm", "sglang", "trtllm", "atom", "llamacpp", "dynamo"]
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm", "atom", "llamacpp", "dynamo")
ENGINE_CHOICES: tuple[str, ...] = ("auto", *ENGINES)
HTTP_CLIENTS: tuple[str, ...] = ("native", "aiohttp")


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """The server, its credentials and what goes on the wire besides the prompt."""

    base_url: str | None = None  # None only with sim=True or serve_cmd (filled in when it starts)
    model: str | None = None  # None: the only model the server serves
    endpoint: Endpoint = "completions"
    api_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    tokenizer: str | None = None
    # Extra request-body fields (vLLM's `--extra-body`), e.g. {"min_p": 0.1}; never the
    # fields loadgen sets itself (EXTRA_BODY_RESERVED).
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    http_client: HttpClient = "native"  # the measured streams' client
    # which engine's metrics and per-request fields to read; auto: found at preflight
    engine: Engine = "auto"
    # Server controls between points: empty the prefix cache of every server loadgen knows
    # (the target, each --server-metrics URL's) before each point's warmup, or after it.
    reset_prefix_cache: bool = False
    # a preflight warning that the run's answers will not be what was asked (Think Max on
    # a server whose context cannot hold them) stops the run instead
    strict_preflight: bool = False
    reset_after_warmup: bool = False
    reset_external: bool = False  # vLLM's reset_external=true: the connector's cache too
    reset_timeout_s: float = 60.0  # how long a reset is retried while the server refuses
    # The points whose measured phase runs inside the server's profiler (POST
    # /start_profile before it, /stop_profile after): their numbers are a slowed server's.
    profile_conc: tuple[int, ...] = ()
    # A server loadgen launches for the run (run/launched_server.py): its argv (split like
    # a shell, run without one; `{port}` becomes a free port), extra environment, working
    # directory, and how long it may take to answer /health and /v1/models.
    serve_cmd: tuple[str, ...] = ()
    serve_env: tuple[tuple[str, str], ...] = ()
    serve_cwd: str | None = None
    serve_timeout_s: float = 1800.0  # a large model loads for many minutes


def parse_endpoint(text: str) -> str:
    """`completions` or `chat`, or vLLM's paths /v1/completions and /v1/chat/completions."""
    name = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}.get(text, text)
    if name not in ("completions", "chat"):
        raise SpecError(
            f"--endpoint {text!r}: allowed: completions, chat (or vLLM's "
            "/v1/completions, /v1/chat/completions)"
        )
    return name


def parse_engine(text: str) -> str:
    if text not in ENGINE_CHOICES:
        raise SpecError(f"--engine {text!r}: allowed: {', '.join(ENGINE_CHOICES)}")
    return text


def parse_http_client(text: str) -> str:
    if text == "native":
        return text
    if text == "aiohttp":
        raise SpecError(
            "--http-client: the aiohttp comparison client moved to bench/ "
            "(bench/read_path.py --http-client aiohttp); loadgen measures with its native client"
        )
    raise SpecError(f"--http-client {text!r}: loadgen measures with its native client only")


parse_reset_timeout = seconds_parser("--reset-timeout", "60")


def parse_profile_conc(text: str) -> int:
    try:
        conc = int(text)
    except ValueError:
        raise SpecError(f"--profile-conc {text!r}: one concurrency point, e.g. 16") from None
    if conc < 1:
        raise SpecError(f"--profile-conc {text}: a concurrency point >= 1")
    return conc


PORT_PLACEHOLDER = "{port}"


def parse_serve_cmd(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """The server command's argv: split like a shell (quotes kept together), not run by
    one; a document's list is the argv as given."""
    if text is None:
        return ()
    if not isinstance(text, str):
        return tuple(text)
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise SpecError(f"--serve-cmd {text!r}: {exc}") from None


def parse_serve_env(text: str) -> tuple[str, str]:
    """NAME=VALUE (the flag), or NAME:VALUE (a sweep file's list item): the name ends at
    the first `=` or `:`, which no environment name holds."""
    cut = min((i for i in (text.find("="), text.find(":")) if i >= 0), default=-1)
    return serve_env_pair((text[:cut] if cut > 0 else "", text[cut + 1 :]), text)


def serve_env_pair(pair: tuple[str, object], shown: str | None = None) -> tuple[str, str]:
    """One variable as (NAME, VALUE): a document's mapping `NAME: VALUE` item, or the
    flag's text cut in two (`shown`: how it reads in a message)."""
    name, value = pair[0], str(pair[1])
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        shown = f"{pair[0]}={value}" if shown is None else shown
        raise SpecError(f"--serve-env {shown!r}: expected NAME=VALUE, e.g. VLLM_USE_V1=1")
    return name, value


parse_serve_timeout = seconds_parser("--serve-timeout", "1800")


FIELDS: tuple[Field, ...] = (
    flag(
        "--base-url",
        metavar="URL",
        help="server root, e.g. http://127.0.0.1:8000 (required unless --sim)",
        fills="base_url",
        section="target",
    ),
    flag(
        "--model",
        metavar="NAME",
        help="served model name (default: the only model the server serves)",
        fills="model",
        section="target",
    ),
    flag(
        "--sim",
        action="store_true",
        help="start the embedded simulator (MTP, 2 draft tokens) on a free "
        "loopback port and measure it; results say target: simulator",
        fills="sim",
        section="target",
    ),
    flag(
        "--sim-args",
        shape="args",
        default="",
        metavar='"FLAGS"',
        help='extra `loadgen sim` flags for --sim, e.g. "--step-fixed-ms 5"',
        section="target",
    ),
    flag(
        "--api-key",
        metavar="KEY",
        help="bearer token (default: $OPENAI_API_KEY; never written to results)",
        section="target",
    ),
    flag(
        "--header",
        shape="headers",
        action="extend",
        nargs="+",
        default=[],
        type=parse_header,
        read=header_pair,
        metavar="K:V",
        help="extra request headers, repeatable, e.g. X-Session-Affinity:abc "
        "(K=V as vLLM works too) (default: none)",
        fills="headers",
        to=tuple,
        section="target",
    ),
    flag(
        "--endpoint",
        type=parse_endpoint,
        default=None,
        metavar="{completions,chat}",
        help="completions: loadgen encodes the prompt; chat: the server does "
        "(default: completions)",
        fills="endpoint",
        section="workload",
    ),
    flag(
        "--extra-body",
        shape="body",
        type=parse_extra_body,
        read=extra_body,
        default={},
        metavar="JSON",
        help="extra request-body fields, e.g. '{\"min_p\": 0.1}' (not those "
        "loadgen sets: model, prompt, max_tokens, stream, ...) (default: none)",
        fills="extra_body",
        section="workload",
    ),
    flag(
        "--tokenizer",
        metavar="PATH|ORG/NAME",
        help="tokenizer.json, model dir or Hugging Face Hub id (HF cache and "
        "HF_HUB_OFFLINE honoured) (default: official DeepSeek-V4)",
        fills="tokenizer",
    ),
    # the aiohttp comparison client is bench/'s now; `native` still parses, for old scripts
    flag(
        "--http-client",
        default=default_of(TargetSpec, "http_client"),
        help=argparse.SUPPRESS,
        fills="http_client",
        to=parse_http_client,
        section="target",
    ),
    flag(
        "--engine",
        type=parse_engine,
        default=default_of(TargetSpec, "engine"),
        metavar="{" + ",".join(ENGINE_CHOICES) + "}",
        help="the serving engine, for the server-side figures (acceptance counters, "
        "latency histograms, KV and queue gauges, prefix hits, per-request stats): "
        "auto finds it at preflight from /metrics names, /get_server_info and "
        "/server_info, and run.json records which and why (default: auto)",
        fills="engine",
        section="target",
    ),
    flag(
        "--strict-preflight",
        action="store_true",
        help="make the preflight's warnings about the answers an error: Think Max "
        "(--reasoning-effort max) against a server whose max_model_len is below 393216",
        fills="strict_preflight",
        section="target",
    ),
    flag(
        "--reset-prefix-cache",
        action="store_true",
        help="empty the prefix cache of every server loadgen knows (the target and each "
        "--server-metrics URL's) before each point: vLLM's POST /reset_prefix_cache "
        "(the server needs VLLM_SERVER_DEV_MODE=1) or SGLang's /flush_cache, retried "
        "while running requests hold blocks; each point records its cache_state",
        fills="reset_prefix_cache",
        section="target",
    ),
    flag(
        "--reset-after-warmup",
        action="store_true",
        help="with --reset-prefix-cache: reset after each point's warmup (a cold cache "
        "for the measured requests) instead of before it",
        fills="reset_after_warmup",
        section="target",
    ),
    flag(
        "--reset-external",
        action="store_true",
        help="with --reset-prefix-cache: vLLM's reset_external=true, the KV connector's "
        "(offloaded) prefix cache too",
        fills="reset_external",
        section="target",
    ),
    flag(
        "--reset-timeout",
        type=parse_reset_timeout,
        default=default_of(TargetSpec, "reset_timeout_s"),
        metavar="SECONDS",
        help="how long a --reset-prefix-cache reset is retried while the server refuses "
        "it (requests still hold blocks); past it the point runs with "
        "cache_state reset_failed",
        fills="reset_timeout_s",
        section="target",
    ),
    flag(
        "--profile-conc",
        action="append",
        type=parse_profile_conc,
        default=[],
        metavar="N",
        help="profile the server around this point's measured phase, repeatable: POST "
        "/start_profile after its warmup, /stop_profile after it (vLLM serves them only "
        "when started with --profiler-config); the point is marked profiled: true, its "
        "numbers kept but flagged (a profiled server is slower)",
        fills="profile_conc",
        to=tuple,
        section="target",
    ),
    flag(
        "--serve-cmd",
        shape="args",
        metavar='"COMMAND"',
        help="launch this server for the run and stop it after (its own process group; "
        "SIGINT, SIGTERM, then SIGKILL): `{port}` becomes a free port, the run targets "
        "http://127.0.0.1:{port} unless --base-url is given; output in server.log, "
        'e.g. "vllm serve MODEL --port {port}"',
        fills="serve_cmd",
        to=parse_serve_cmd,
        section="target",
    ),
    flag(
        "--serve-env",
        shape="headers",
        action="append",
        type=parse_serve_env,
        read=serve_env_pair,
        metavar="NAME=VALUE",
        help="with --serve-cmd: an environment variable for the server, repeatable "
        "(on top of loadgen's own environment)",
        fills="serve_env",
        to=lambda pairs: tuple(pairs or ()),
        section="target",
    ),
    flag(
        "--serve-cwd",
        metavar="DIR",
        help="with --serve-cmd: the server's working directory (default: loadgen's)",
        fills="serve_cwd",
        section="target",
    ),
    flag(
        "--serve-timeout",
        type=parse_serve_timeout,
        default=default_of(TargetSpec, "serve_timeout_s"),
        metavar="SECONDS",
        help="with --serve-cmd: how long the server may take to answer /health and "
        "/v1/models (a large model loads for many minutes); progress is shown meanwhile",
        fills="serve_timeout_s",
        section="target",
    ),
)


def redacted(target: TargetSpec) -> TargetSpec:
    """The target as files and answers record it: no API key, header values `***`, a
    URL's credentials, secret-named body fields and the launched server's credentials
    (flags, arguments, environment) `***` (config/redact.py)."""
    return dataclasses.replace(
        target,
        api_key=None,
        headers=tuple((name, REDACTED) for name, _ in target.headers),
        base_url=target.base_url and redact_url(target.base_url),
        extra_body=redact_body(target.extra_body),
        serve_cmd=tuple(redact_command(target.serve_cmd)),  # --api-key K, HF_TOKEN=...
        serve_env=tuple(redact_env(target.serve_env).items()),
    )


def derive(values: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    """The settings of several flags: the key (or $OPENAI_API_KEY), the simulator's flags."""
    if values.sim and values.base_url:
        raise SpecError("--sim and --base-url exclude each other: --sim measures the simulator")
    if values.sim and values.serve_cmd:
        raise SpecError("--sim and --serve-cmd exclude each other: each starts the server")
    sim_args = _sim_args(values.sim_args)
    taken = [a for a in sim_args if a.split("=")[0] in ("--host", "--port")]
    if taken:
        raise SpecError(f"--sim-args: {taken[0]} is chosen by loadgen (a free loopback port)")
    if values.sim and values.model and not any(a.split("=")[0] == "--model" for a in sim_args):
        sim_args = ("--model", values.model, *sim_args)  # the simulator serves the name asked for
    return {"sim_args": sim_args, "api_key": _api_key(values.api_key or env.get("OPENAI_API_KEY"))}


def _sim_args(given: str | Sequence[str]) -> tuple[str, ...]:
    """--sim-args' text split as a shell would, or a document's list of them as given."""
    if not isinstance(given, str):
        return tuple(given)
    try:
        return tuple(shlex.split(given))
    except ValueError as exc:
        raise SpecError(f"--sim-args {given!r}: {exc}") from None


def _api_key(key: str | None) -> str | None:
    """Surrounding whitespace stripped (a secret file's newline); empty means none."""
    if key is None:
        return None
    return check_api_key(key) or None


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def _check_url(target: TargetSpec) -> None:
    if not target.base_url:
        return
    _check(
        target.base_url.startswith(("http://", "https://")),
        f"--base-url {target.base_url!r}: must start with http:// or https://",
    )
    # aiohttp refuses both at the first request (a traceback, not a line): say it here
    _check(
        not url_has_credentials(target.base_url)
        or not (
            target.api_key or any(name.lower() == "authorization" for name, _ in target.headers)
        ),
        "--base-url carries credentials (user:password@, sent as Basic auth) and "
        "--api-key, $OPENAI_API_KEY or --header Authorization sets Authorization "
        "too: keep one",
    )


def _check_wire(target: TargetSpec) -> None:
    """What goes on the wire besides the prompt: body fields, headers, the key."""
    check_extra_body(target.extra_body)


def _check_headers(target: TargetSpec) -> None:
    for name, value in target.headers:  # argv went through parse_header; RunSpec(...) may not
        header_pair((name, value))
    if target.api_key is not None:
        _check(
            not CONTROL_CHARS.search(target.api_key),
            "--api-key / OPENAI_API_KEY contains a control character (CR, LF, ...)",
        )


def _check_endpoint(target: TargetSpec) -> None:
    _check(
        target.endpoint in ENDPOINTS,
        f"--endpoint {target.endpoint!r}: allowed: completions, chat",
    )


def _check_client(target: TargetSpec) -> None:
    _check(
        target.http_client in HTTP_CLIENTS,
        f"--http-client {target.http_client!r}: allowed: {', '.join(HTTP_CLIENTS)}",
    )


def _check_engine(target: TargetSpec) -> None:
    _check(
        target.engine in ENGINE_CHOICES,
        f"--engine {target.engine!r}: allowed: {', '.join(ENGINE_CHOICES)}",
    )


def _check_reset(target: TargetSpec) -> None:
    """The reset options go with --reset-prefix-cache; its deadline is a real one."""
    for given, name in (
        (target.reset_after_warmup, "--reset-after-warmup"),
        (target.reset_external, "--reset-external"),
    ):
        _check(not given or target.reset_prefix_cache, f"{name}: add --reset-prefix-cache")
    _check(
        math.isfinite(target.reset_timeout_s) and target.reset_timeout_s > 0,
        f"--reset-timeout {target.reset_timeout_s}: must be a finite number of seconds > 0",
    )


def _check_serve(target: TargetSpec) -> None:
    """The launched server's options go with --serve-cmd; its port is loadgen's to choose
    unless --base-url says where the server listens."""
    _check(
        math.isfinite(target.serve_timeout_s) and target.serve_timeout_s > 0,
        f"--serve-timeout {target.serve_timeout_s}: must be a finite number of seconds > 0",
    )
    if not target.serve_cmd:
        for given, name in (
            (bool(target.serve_env), "--serve-env"),
            (target.serve_cwd is not None, "--serve-cwd"),
        ):
            _check(not given, f"{name}: add --serve-cmd (the server it applies to)")
        return
    _check(
        target.base_url is not None or any(PORT_PLACEHOLDER in arg for arg in target.serve_cmd),
        f"--serve-cmd: put {PORT_PLACEHOLDER} where the server takes its port (e.g. "
        f"--port {PORT_PLACEHOLDER}), or give --base-url for the port it listens on",
    )


def check_profile(
    target: TargetSpec, conc: tuple[int, ...], *, find_max: bool, shards: int
) -> None:
    """--profile-conc names points the run measures, each once; one process starts the
    window (a second /start_profile while one is open is refused by vLLM with 409)."""
    if not target.profile_conc:
        return
    _check(
        not find_max,
        "--profile-conc: not with --find-max (its points are chosen as it goes); "
        "profile a point of a plain --conc run",
    )
    _check(
        shards == 1,
        "--profile-conc: not with --shard (each shard would open its own profiler "
        "window on the same server); profile from an unsharded run",
    )
    for point in target.profile_conc:
        _check(point >= 1, f"--profile-conc {point}: a concurrency point >= 1")
        _check(
            point in conc,
            f"--profile-conc {point}: not one of this run's --conc points "
            f"({', '.join(map(str, conc))}); no window would open",
        )
    repeated = sorted({c for c in target.profile_conc if target.profile_conc.count(c) > 1})
    _check(not repeated, f"--profile-conc {repeated[0] if repeated else ''}: given twice")


def check(target: TargetSpec) -> None:
    """The target's own checks, in the order the first error is reported (RunSpec runs
    each part's `check`, then the rules that cross parts)."""
    _check_url(target)
    _check_wire(target)
    _check_headers(target)
    _check_endpoint(target)
    _check_client(target)
    _check_engine(target)
    _check_reset(target)
    _check_serve(target)
