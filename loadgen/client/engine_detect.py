"""Which engine serves the target (`--engine auto`), found once at preflight.

What each engine shows of itself, most telling first: the names of its Prometheus series
(`vllm:`, `sglang:`, `trtllm_` on /prometheus/metrics, `atom:`, `llamacpp:`, and a Dynamo
frontend's `dynamo_frontend_`, which names Dynamo when no engine's series are beside it), at each
--server-metrics URL or else the target's; then the endpoints only one engine has
(SGLang's /get_server_info, ATOM's /server_info with its dp_size). A server that shows
none of them (no /metrics, a frontend of its own) is read as vLLM, and the choice says it
was assumed. `--engine X` given by hand is checked against the same signs: a server that
plainly is another engine stops the run with one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from loadgen.client.http_session import MAX_JSON_BYTES, MAX_PAGE_BYTES, read_capped
from loadgen.config.redact import redact_url
from loadgen.errors import UsageError
from loadgen.metrics.engines import (
    ATOM,
    DYNAMO,
    SGLANG,
    TRTLLM,
    VLLM,
    EngineDialect,
    dialect,
    engine_by_names,
)
from loadgen.metrics.server import ServerSnapshot

PROBE_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ValueError)
# A Dynamo worker's system port serves its runtime's series (dynamo_work_handler_*, never
# the frontend's) from its start, and its engine's only from its first request on when
# the engine registers them lazily (Dynamo 1.4.2's mocker: tests/fixtures/dynamo_1.4.2/,
# its prefill worker never). Beside a frontend, such workers are no Dynamo "engine".
DYNAMO_WORKER_PREFIX = "dynamo_work_handler_"
FRESH_WORKERS = (
    f"serves a Dynamo frontend's ({DYNAMO.prefix}*) and workers' ({DYNAMO_WORKER_PREFIX}*) "
    "series but no engine's yet (a fresh Dynamo mocker worker serves its vllm:* only from "
    "its first request on; a prefill mocker never): the workers read as vLLM (assumed; "
    "--engine names theirs); a point before a worker's first request (no warmup) has its "
    "figures null"
)


class EngineMismatch(UsageError):
    """`--engine` names another engine than the server shows; str() is the line."""


@dataclass(frozen=True, slots=True)
class EngineChoice:
    dialect: EngineDialect
    reason: str  # why this engine: what the server showed, or that it was assumed
    shown: bool  # the server showed it (not assumed)


async def _get(session: aiohttp.ClientSession, url: str, limit: int) -> bytes | None:
    """The body of a 200 answer; None for any other status or failure (each probe is
    optional: the engine is found by what answers)."""
    try:
        async with session.get(url) as response:
            if response.status != 200:
                return None
            return await read_capped(response, limit)
    except PROBE_ERRORS:
        return None


def _series_names(body: bytes) -> set[str]:
    try:
        families = text_string_to_metric_families(body.decode("utf-8", "replace"))
        return {sample.name for family in families for sample in family.samples}
    except ValueError:  # JSON (trtllm-serve's /metrics) or a page: not Prometheus text
        return set()


def _json(body: bytes | None) -> Any:
    try:
        return None if body is None else orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _fresh_workers(scraped: ServerSnapshot) -> bool:
    return any(name.startswith(DYNAMO_WORKER_PREFIX) for name in scraped.samples)


async def detect_engine(
    session: aiohttp.ClientSession, base_url: str, scraped: ServerSnapshot | None, where: str
) -> EngineChoice:
    """The engine behind `base_url`, with the reason. `scraped` is what the preflight
    already read at `where` (the target's /metrics, or the --server-metrics URLs)."""
    found = None if scraped is None else engine_by_names(scraped.samples)
    if found is DYNAMO and scraped is not None and _fresh_workers(scraped):
        return EngineChoice(VLLM, f"{where} {FRESH_WORKERS}", False)
    if found is not None and scraped is not None:
        reason = f"{where} serves {found.prefix}* series"
        if found is not DYNAMO and any(n.startswith(DYNAMO.prefix) for n in scraped.samples):
            reason += f", and a Dynamo frontend's ({DYNAMO.prefix}*)"
        return EngineChoice(found, reason, True)
    url = base_url + TRTLLM.metrics_path
    body = await _get(session, url, MAX_PAGE_BYTES)
    found = None if body is None else engine_by_names(_series_names(body))
    if found is not None:
        return EngineChoice(found, f"{redact_url(url)} serves {found.prefix}* series", True)
    if isinstance(_json(await _get(session, base_url + "/get_server_info", MAX_JSON_BYTES)), dict):
        return EngineChoice(SGLANG, "/get_server_info answered (SGLang's endpoint)", True)
    info = _json(await _get(session, base_url + "/server_info", MAX_JSON_BYTES))
    if isinstance(info, dict) and {"dp_size", "model_id"} <= info.keys():
        return EngineChoice(ATOM, "/server_info answered with dp_size (ATOM's endpoint)", True)
    return EngineChoice(
        VLLM,
        "no engine's /metrics series or endpoint answered: read as vLLM (assumed)",
        False,
    )


def choose_engine(given: str, found: EngineChoice) -> EngineChoice:
    """`--engine auto`: what was found; else the given engine, unless the server plainly
    is another one (EngineMismatch). A Dynamo frontend is no engine: any given engine
    may be behind it."""
    if given == "auto":
        return found
    chosen = dialect(given)
    # a Dynamo frontend shows no engine of its own: its workers' engine is the user's to say
    if found.shown and found.dialect is DYNAMO and chosen is not DYNAMO:
        return EngineChoice(
            chosen, f"--engine {given}, behind a Dynamo frontend: {found.reason}", True
        )
    if found.shown and found.dialect is not chosen:
        name = found.dialect.name
        raise EngineMismatch(
            f"--engine {given}: the server is {name} ({found.reason}); "
            f"pass --engine {name} or --engine auto"
        )
    confirmed = f", confirmed: {found.reason}" if found.shown else ""
    return EngineChoice(chosen, f"--engine {given}{confirmed}", found.shown)
