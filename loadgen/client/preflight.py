"""Before the first measured request: is this the server, model and tokenizer we think?

Each check either passes, stops the run with one line saying what to change, or (for a
tokenizer mismatch, which silently skews every number) is reported loudly and recorded
in run.json. Request options the server rejects are detected once here; the run then
uses the best token-count source the server supports and records which one.

Every call here is bounded by the session's default timeout (`--http-timeout`); the
probe requests stream, under the transport's deadlines. A server that does not answer
/v1/models or /metrics here, or answers something that is not what an OpenAI-compatible
server says, stops the run with one line (exit 1).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from loadgen.client.deadlines import timeout_of, unanswered
from loadgen.client.engine_detect import choose_engine, detect_engine
from loadgen.client.http_session import (
    MAX_JSON_BYTES,
    MAX_PAGE_BYTES,
    REFUSED,
    read_capped,
    refused_line,
)
from loadgen.client.redirects import CrossOriginRedirect
from loadgen.client.refusals import refused_fields
from loadgen.client.round_trip import round_trip_ms
from loadgen.client.server_metrics import check_metrics_urls
from loadgen.client.stream_client import StreamClient
from loadgen.client.transport import Transport
from loadgen.config.redact import redact_body, redact_url
from loadgen.config.spec import DEFAULT_STREAM_IDLE_TIMEOUT_S
from loadgen.errors import ServerError
from loadgen.metrics.server import (
    MetricsParseError,
    ServerSnapshot,
    parse_metrics,
    server_spec_tokens,
    speculative_decoding_enabled,
)
from loadgen.records import RequestRecord, TokenSource
from loadgen.wording import printable
from loadgen.workload.bodies import CONTINUOUS_USAGE, EXTENSIONS, TOKEN_IDS, BodyOptions
from loadgen.workload.plan import RequestSpec

PROBE_TOKENS = 4
MAX_NAMES, NAME_CHARS = 20, 80  # of the served models an error line names
PROBE_ATTEMPTS = 3


class PreflightError(ServerError):
    """The run cannot start; str() is the one line to show the user."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    model: str
    max_model_len: int | None
    version: str | None
    spec_decoding: bool | None  # None: /metrics unavailable
    token_source: TokenSource  # where per-chunk counts will come from
    options: BodyOptions  # the request options the server accepted
    tokenize_check: dict[str, Any]
    warnings: tuple[str, ...]
    # K (num_speculative_tokens) as the server's /metrics give it (None: not known):
    # every request's spec-decode stats must have it (client/ingest.py)
    spec_tokens: int | None = None
    # the engine family whose figures are read, why, and what it cannot give (field ->
    # reason); metrics/engines.py
    engine: str = "vllm"
    engine_reason: str = ""
    engine_unavailable: dict[str, str] = dataclasses.field(default_factory=dict)
    # request extensions the server refused by name, left out of every body: name -> where
    # the figures that depended on it now come from (client/refusals.py, bodies.EXTENSIONS)
    dropped_options: dict[str, str] = dataclasses.field(default_factory=dict)
    # the median round trip of a few GETs of /v1/models, ms (client/round_trip.py; None:
    # not measured)
    rtt_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["options"] = dataclasses.asdict(self.options)
        # as stored (run.json): a credential passed through the body is not written down
        data["options"]["extra_body"] = redact_body(data["options"].get("extra_body"))
        return data


def engine_line(server: ServerInfo) -> str:
    """The one line that says which engine's figures are read and why (which fields it
    leaves null is said once a point has them: `engine_nulls_line`)."""
    return printable(f"loadgen: engine {server.engine} ({server.engine_reason})")


def engine_nulls(server: ServerInfo, point: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields the engine is not known to give (server.engine_unavailable) that
    `point` (its flat file form) does leave null: the list comes from the point, since
    a server may send one after all (TensorRT-LLM behind a frontend that passes vLLM's
    per-request stats on)."""
    return tuple(name for name in server.engine_unavailable if point.get(name) is None)


def engine_nulls_line(server: ServerInfo, conc: int, nulls: Iterable[str]) -> str:
    """The line that names them (their reasons are in run.json's server.engine_unavailable)."""
    return (
        f"loadgen: conc {conc}: null on this engine ({server.engine}): {', '.join(nulls)} "
        "(why: run.json server.engine_unavailable)"
    )


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """The JSON body of a GET; PreflightError on a non-200 status or a body not JSON."""
    async with session.get(url) as response:
        if response.status != 200:
            raise PreflightError(f"GET {url}: HTTP {response.status}")
        body = await read_capped(response, MAX_JSON_BYTES)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        start = body[:60].decode("utf-8", "replace").split()
        raise PreflightError(
            f"GET {url} answered {response.content_type or 'no content type'}, not JSON "
            f"({' '.join(start)[:60]!r}); is --base-url the root of an OpenAI-compatible "
            "server (not a proxy's or dashboard's page)?"
        ) from None


async def fetch_metrics(session: aiohttp.ClientSession, url: str) -> ServerSnapshot | None:
    """The server's Prometheus text at `url` parsed, or None when it has none usable.

    Raises TimeoutError (or aiohttp.ClientError / OSError) when it does not answer.
    """
    async with session.get(url) as response:
        if response.status != 200:
            return None
        body = await read_capped(response, MAX_PAGE_BYTES)
    try:
        return parse_metrics(body.decode("utf-8", "replace"))
    except MetricsParseError:
        return None


async def find_model(
    session: aiohttp.ClientSession, base_url: str, wanted: str | None
) -> tuple[str, int | None]:
    url = base_url + "/v1/models"
    try:
        listing = await get_json(session, url)
    except TimeoutError:
        raise PreflightError(unanswered(session, url)) from None
    except REFUSED as exc:
        raise PreflightError(refused_line(url, exc)) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise PreflightError(
            f"cannot reach the server at {base_url} ({type(exc).__name__}: {exc}); "
            "is it running, and is --base-url right?"
        ) from None
    cards = _model_cards(listing, url)
    if not cards:
        raise PreflightError(f"{base_url}/v1/models lists no models")
    if wanted is None:
        if len(cards) > 1:
            raise PreflightError(
                f"the server serves {len(cards)} models ({_names(cards)}); pick one with --model"
            )
        wanted = next(iter(cards))
    if wanted not in cards:
        raise PreflightError(
            f"model {printable(wanted, NAME_CHARS)!r} is not served at {base_url}; "
            f"served: {_names(sorted(cards))} (use --model)"
        )
    max_len = cards[wanted].get("max_model_len")
    return wanted, max_len if type(max_len) is int and max_len > 0 else None


def _names(names: Iterable[str]) -> str:
    """Model names from the server, as data: shown without control characters, each and
    their number bounded."""
    shown = [printable(name, NAME_CHARS) for name in itertools.islice(names, MAX_NAMES + 1)]
    return ", ".join(shown[:MAX_NAMES]) + (", …" if len(shown) > MAX_NAMES else "")


def _model_cards(listing: Any, url: str) -> dict[str, dict[str, Any]]:
    """id -> model card of an OpenAI model list; PreflightError when it is not one."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        raise PreflightError(
            f"GET {url} answered JSON that is not an OpenAI model list "
            "(no `data` list); is --base-url an OpenAI-compatible server?"
        )
    return {
        card["id"]: card
        for card in data
        if isinstance(card, dict) and isinstance(card.get("id"), str)
    }


THINK_MAX_MODEL_LEN = 393_216  # DeepSeek-V4's Think Max needs this much context


def think_max_line(max_model_len: int | None, reasoning_effort: str | None) -> str | None:
    """The warning for Think Max against a server whose context is too short for it (None:
    not Think Max, or the server says nothing, or its context is long enough)."""
    if reasoning_effort != "max" or max_model_len is None:
        return None
    if max_model_len >= THINK_MAX_MODEL_LEN:
        return None
    return (
        f"Think Max (--reasoning-effort max) needs the server's max_model_len >= "
        f"{THINK_MAX_MODEL_LEN:,}; it reports {max_model_len:,}: long reasoning will be cut "
        "off, answers truncated (restart it with --max-model-len 393216, or "
        "--strict-preflight to stop here)"
    )


def check_context(max_model_len: int | None, isl: int, osl: int) -> None:
    if max_model_len is not None and isl + osl > max_model_len:
        raise PreflightError(
            f"--isl {isl} + --osl {osl} = {isl + osl} tokens exceeds the server's max_model_len "
            f"{max_model_len}: restart the server with --max-model-len >= {isl + osl} "
            "(vLLM) or lower --isl/--osl"
        )


async def tokenize_check(
    session: aiohttp.ClientSession, base_url: str, model: str, text: str, ours: int
) -> dict[str, Any]:
    """Compare loadgen's token count of one prompt with the server's /tokenize."""
    body = {"model": model, "prompt": text, "add_special_tokens": False}
    unknown = {"loadgen": ours, "server": None, "match": None}
    try:
        async with session.post(base_url + "/tokenize", json=body) as response:
            if response.status != 200:
                return {**unknown, "note": f"/tokenize answered HTTP {response.status}"}
            answer = orjson.loads(await read_capped(response, MAX_JSON_BYTES))
    except TimeoutError:
        return {
            **unknown,
            "note": f"/tokenize did not answer within {timeout_of(session)} (--http-timeout)",
        }
    except CrossOriginRedirect as exc:  # not optional: --base-url points at a redirector
        raise PreflightError(str(exc)) from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return {**unknown, "note": f"{type(exc).__name__}: {exc}"[:200]}
    server = answer.get("count") if isinstance(answer, dict) else None
    if type(server) is not int:
        return {**unknown, "note": "/tokenize answered without an integer `count`"}
    return {"loadgen": ours, "server": server, "match": server == ours, "note": ""}


# Request options from best to plainest; the first the server accepts and that yields
# token counts is used for the whole run.
# (return_token_ids, continuous_usage_stats, logprobs)
FALLBACKS: tuple[tuple[bool, bool, bool], ...] = (
    (True, True, False),
    (False, True, False),
    (False, False, True),
    (False, False, False),
)


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What the probes settled: the options every request is built with, where their
    token counts come from, and the extensions the server refused by name (name -> what
    the run does without it)."""

    options: BodyOptions
    token_source: TokenSource
    dropped: dict[str, str]


async def probe_options(
    transport: Transport,
    base: BodyOptions,
    prompt: str,
    on_probe: Callable[[RequestRecord], None] | None = None,
    droppable: Mapping[str, str] = EXTENSIONS,
) -> Negotiated:
    """Send one tiny request per option set until the server accepts one.

    An extension in `droppable` that a 400 refuses by name (client/refusals.py) is left
    out from then on and the same option set is sent again, unless the refused field is
    one of its token sources: then the next, plainer, set is tried. A 400 that names no
    droppable field moves to the next set; any other failure stops the probing."""
    details = []
    attempts = 0
    refused: dict[str, str] = {}
    for token_ids, usage, logprobs in FALLBACKS:
        options = dataclasses.replace(
            base, return_token_ids=token_ids, continuous_usage=usage, logprobs=logprobs
        ).without(refused)
        record: RequestRecord | None = None
        while (options.return_token_ids, options.continuous_usage) == (token_ids, usage):
            record = await _probe(transport, options, prompt, attempts, on_probe)
            attempts = record.request_id
            if record.ok and record.chunk_tokens:
                return Negotiated(options, record.token_source, refused)
            named = {
                name
                for name in refused_fields(record.error_detail)
                if name in droppable and options.sends(name)
            }
            if record.status != 400 or not named:
                break
            refused.update((name, droppable[name]) for name in sorted(named))
            options = options.without(refused)
        else:
            continue  # this set's token source was refused: the next set goes without it
        assert record is not None  # the loop ran: it ends by a break only after a probe
        details.append(f"{options.path} {record.error}: {record.error_detail[:160]}")
        if record.status != 400:
            break  # not an option problem: fewer options will not help
    raise PreflightError(
        "the server rejected every streaming request option set: " + " | ".join(details)
    )


async def _probe(
    transport: Transport,
    options: BodyOptions,
    prompt: str,
    attempts: int,
    on_probe: Callable[[RequestRecord], None] | None,
) -> RequestRecord:
    """One option set's probe, sent again on a transient failure (not a rejected option);
    its record's request_id counts the probes sent so far."""
    body = _probe_body(options, prompt)
    for _ in range(PROBE_ATTEMPTS):
        attempts += 1
        request = RequestSpec(index=attempts, input_len=0, max_tokens=PROBE_TOKENS, body=body)
        record = await transport.send(
            request,
            x_request_id=f"preflight-{attempts}",
            conc=0,
            scheduled_ns=0,
            on_record=on_probe or (lambda _r: None),
        )
        if (record.ok and record.chunk_tokens) or record.status == 400:
            break
    return record


def _probe_body(options: BodyOptions, prompt: str) -> bytes:
    return options.builder.body(
        options,
        text=prompt,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=PROBE_TOKENS,
    )


async def server_version(session: aiohttp.ClientSession, base_url: str) -> str | None:
    try:
        data = await get_json(session, base_url + "/version")
    except CrossOriginRedirect as exc:
        raise PreflightError(str(exc)) from None
    except (PreflightError, aiohttp.ClientError, OSError):  # optional: any failure is "unknown"
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return version[:100] if isinstance(version, str) else None


async def preflight(
    session: aiohttp.ClientSession,
    base_url: str,
    *,
    wanted_model: str | None,
    isl: int,
    osl: int,
    options: BodyOptions,
    prompt: tuple[str, int],
    request_timeout_s: float | None = None,
    metrics_urls: tuple[str, ...] = (),
    stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S,
    streams: StreamClient,
    engine: str = "auto",
    strict: bool = False,
) -> ServerInfo:
    """All checks in order; raises PreflightError with one line when the run cannot start.

    isl/osl are the longest request's lengths (a dataset's longest prompt and output).
    With `metrics_urls` (--server-metrics) each is checked once and their sum tells
    whether speculative decoding is on; otherwise the target's own /metrics does.
    The probe requests go through `streams`, the client the measured requests will use,
    so a server that client cannot read fails here. `engine` (--engine) is checked
    against what the server shows, or found from it (client/engine_detect.py); its
    dialect reads the metrics and adds the request fields its per-request stats need.
    """
    model, max_model_len = await find_model(session, base_url, wanted_model)
    rtt_ms = await round_trip_ms(session, base_url + "/v1/models")
    check_context(max_model_len, isl, osl)
    think_max = think_max_line(max_model_len, options.reasoning_effort)
    if think_max is not None and strict:
        raise PreflightError(think_max.replace(", or --strict-preflight to stop here", ""))
    options = dataclasses.replace(options, model=model)
    text, ours = prompt
    check = await tokenize_check(session, base_url, model, text, ours)
    warnings = [] if think_max is None else [think_max]
    if check["match"] is False:
        warnings.append(
            f"TOKENIZER MISMATCH: loadgen counts {ours} tokens in a probe prompt, the server "
            f"counts {check['server']}; every token count and length will be off "
            "(pass the server's tokenizer with --tokenizer)"
        )
    if check["note"].startswith("/tokenize did not answer"):
        warnings.append(f"the server's {check['note']}: the tokenizer check was skipped")
    if metrics_urls:
        snapshot = (await check_metrics_urls(session, metrics_urls)).total
    else:
        snapshot = await _preflight_metrics(session, base_url + "/metrics")
    # the reason is printed and stored: a URL's user:password@ never is
    where = ", ".join(map(redact_url, metrics_urls)) or redact_url(base_url + "/metrics")
    chosen = choose_engine(engine, await detect_engine(session, base_url, snapshot, where))
    dialect = chosen.dialect
    if not metrics_urls and dialect.metrics_path != "/metrics":
        snapshot = await _preflight_metrics(session, base_url + dialect.metrics_path)
    spec_decoding = (
        speculative_decoding_enabled(dialect.canonical(snapshot)) if snapshot is not None else None
    )
    if dialect.request_body:
        options = dataclasses.replace(
            options, extra_body={**dialect.request_body, **options.extra_body}
        )
    transport = Transport(
        streams,
        base_url + options.path,
        request_timeout_s=request_timeout_s,
        stream_idle_timeout_s=stream_idle_timeout_s,
    )
    droppable = {**EXTENSIONS, **dict.fromkeys(dialect.request_body, dialect.request_body_lost)}
    negotiated = await probe_options(transport, options, text, droppable=droppable)
    options, source = negotiated.options, negotiated.token_source
    counted = f"per-chunk token counts come from {source.value}" + (
        " (approximate)" if source is TokenSource.TEXT else ""
    )
    if negotiated.dropped:
        warnings.append(dropped_line(negotiated.dropped, counted))
    elif source is not TokenSource.TOKEN_IDS:
        warnings.append(f"the server does not return token ids; {counted}")
    return ServerInfo(
        model=model,
        max_model_len=max_model_len,
        version=await server_version(session, base_url),
        spec_decoding=spec_decoding,
        token_source=source,
        options=options,
        tokenize_check=check,
        warnings=tuple(warnings),
        spec_tokens=server_spec_tokens(snapshot) if snapshot is not None else None,
        engine=dialect.name,
        engine_reason=chosen.reason,
        engine_unavailable=dict(dialect.missing),
        dropped_options={
            name: counted if name in (TOKEN_IDS, CONTINUOUS_USAGE) else lost
            for name, lost in negotiated.dropped.items()
        },
        rtt_ms=rtt_ms,
    )


def dropped_line(dropped: Mapping[str, str], counted: str) -> str:
    """The one line that says which extensions the server refused by name and what the
    run does without them (each in run.json's server.dropped_options)."""
    names = ", ".join(dropped)
    consequences = [counted] if dropped.keys() & {TOKEN_IDS, CONTINUOUS_USAGE} else []
    consequences += [
        f"{name}: {lost}"
        for name, lost in dropped.items()
        if name not in (TOKEN_IDS, CONTINUOUS_USAGE)
    ]
    return (
        f"the server refused {names} by name (HTTP 400): every request is sent without "
        f"{'it' if len(dropped) == 1 else 'them'}; " + "; ".join(consequences)
    )


async def _preflight_metrics(session: aiohttp.ClientSession, url: str) -> ServerSnapshot | None:
    """/metrics before the run: absent is fine; hanging stops the run (it would hang, or
    null the server-side fields, at every point)."""
    try:
        return await fetch_metrics(session, url)
    except TimeoutError:
        raise PreflightError(unanswered(session, url)) from None
    except REFUSED as exc:
        raise PreflightError(refused_line(url, exc)) from None
    except (aiohttp.ClientError, OSError):
        return None
