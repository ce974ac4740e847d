"""Engine dialects: how each serving engine's Prometheus series map onto the figures loadgen
publishes (pure; names from tests/fixtures/engines/<engine>/, transcribed from each
engine's source at the commit named there).

Every server-side result field keeps vLLM's meaning on every engine: a dialect turns the
engine's snapshot into one with vLLM's sample names (`canonical`), so acceptance, the
latency means, the prefix hits and the gauges are computed by the same code for all. A
figure an engine does not export is absent from that snapshot, so its field is null, and
`missing` says why (recorded once in run.json and printed at preflight). Nothing is ever
derived from an engine's interval gauges (SGLang's spec_accept_length): a gauge is the
engine's average over a window loadgen does not know, not this point's figure.

The vLLM dialect is the identity: the reference path is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from loadgen.metrics.agentic import PREFIX_HITS, PREFIX_QUERIES
from loadgen.metrics.frontend import FRONTEND_PREFIX, FRONTEND_SERIES
from loadgen.metrics.server import (
    ATOM_DECODE_STEPS,
    KV_USAGE,
    LATENCY_HISTOGRAMS,
    RUNNING,
    SPEC_ACCEPTED,
    SPEC_ACCEPTED_PER_POS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    TRT_ACCEPTED_PER_POS,
    TRT_DRAFTED_PER_POS,
    WAITING,
    ServerSnapshot,
)

SERVER_ACCEPTANCE = "server_acceptance_length"  # and the other SERVER_KEYS of acceptance.py
NO_COUNTERS = "the engine exports no speculative-decoding counters"


def _histogram(engine_name: str, ours: str) -> dict[str, str]:
    return {engine_name + "_sum": ours + "_sum", engine_name + "_count": ours + "_count"}


def _no_derivation(
    _snapshot: ServerSnapshot,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    return {}, {}


def _trtllm_spec(snapshot: ServerSnapshot) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """TensorRT-LLM counts no draft steps; its per-position drafted counter does: every
    step with a draft drafts at position 0. All four figures come from the per-position
    pair (one family, logged at once per finished request), so they agree with each other."""
    drafted = snapshot.keyed.get(TRT_DRAFTED_PER_POS, {})
    accepted = snapshot.keyed.get(TRT_ACCEPTED_PER_POS, {})
    if "0" not in drafted:
        return {}, {}
    samples = {
        SPEC_DRAFTS: drafted["0"],
        SPEC_DRAFT_TOKENS: sum(drafted.values()),
        SPEC_ACCEPTED: sum(accepted.values()),
    }
    return samples, {SPEC_ACCEPTED_PER_POS: dict(accepted)}


def _atom_spec(snapshot: ServerSnapshot) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """ATOM counts steps by how many drafts each accepted (`accepted_tokens` = k, the bonus
    token not counted): their sum is the steps, and position i was accepted by every step
    with k > i. Its draft and accepted token counters are read as they are."""
    steps = snapshot.keyed.get(ATOM_DECODE_STEPS, {})
    if not steps:
        return {}, {}
    by_k = {int(k): n for k, n in steps.items()}
    k_max = max(by_k)
    per_position = {str(i): sum(n for k, n in by_k.items() if k > i) for i in range(k_max)}
    return {SPEC_DRAFTS: sum(by_k.values())}, {SPEC_ACCEPTED_PER_POS: per_position}


Derivation = Callable[[ServerSnapshot], tuple[dict[str, float], dict[str, dict[str, float]]]]


@dataclass(frozen=True, slots=True)
class EngineDialect:
    """One engine family: where its Prometheus text is, what of it maps to which of
    loadgen's figures, and what it cannot give."""

    name: str
    metrics_path: str  # on the server's root, when --server-metrics does not say
    prefix: str  # every series the engine names starts so (what --engine auto looks for)
    renames: Mapping[str, str] = field(default_factory=dict)  # engine sample -> vLLM sample
    derive: Derivation = _no_derivation  # vLLM samples built from several of the engine's
    # gauges watched during a point: engine name -> vLLM name (metrics/server.py WATCHED_GAUGES)
    gauges: Mapping[str, str] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)  # result field -> why it is null
    # request fields that make the engine return its per-request figures
    request_body: Mapping[str, Any] = field(default_factory=dict)
    # what the run loses when the server refuses them by name (client/preflight.py)
    request_body_lost: str = ""

    @property
    def identity(self) -> bool:
        return not self.renames and self.derive is _no_derivation

    def canonical(self, snapshot: ServerSnapshot) -> ServerSnapshot:
        """The snapshot under vLLM's names: what this dialect maps, nothing else (an
        engine series of the same meaning but another definition is left out)."""
        if self.identity:
            return snapshot
        samples = {
            ours: snapshot.samples[theirs]
            for theirs, ours in self.renames.items()
            if theirs in snapshot.samples
        }
        # a Dynamo frontend's and its router's series are no engine's: kept as they are
        # (metrics/frontend.py)
        samples.update(
            (name, value)
            for name, value in snapshot.samples.items()
            if name.startswith(FRONTEND_SERIES)
        )
        derived, keyed = self.derive(snapshot)
        samples.update(derived)
        return ServerSnapshot(samples=samples, keyed=keyed)

    def gauge_names(self) -> Mapping[str, str]:
        return self.gauges or {name: name for name in (KV_USAGE, WAITING, RUNNING)}

    def to_json(self) -> dict[str, Any]:
        return {"metrics_path": self.metrics_path, "unavailable": dict(self.missing)}


LATENCY = {metric: name for metric, name in LATENCY_HISTOGRAMS.items()}

VLLM = EngineDialect(name="vllm", metrics_path="/metrics", prefix="vllm:")

SGLANG = EngineDialect(
    name="sglang",
    metrics_path="/metrics",
    prefix="sglang:",
    renames={
        **_histogram("sglang:time_to_first_token_seconds", LATENCY["ttft"]),
        **_histogram("sglang:e2e_request_latency_seconds", LATENCY["e2el"]),
        **_histogram("sglang:queue_time_seconds", LATENCY["queue_time"]),
        "sglang:prompt_tokens_total": PREFIX_QUERIES,
        "sglang:cached_tokens_total": PREFIX_HITS,
    },
    gauges={
        "sglang:token_usage": KV_USAGE,
        "sglang:num_queue_reqs": WAITING,
        "sglang:num_running_reqs": RUNNING,
    },
    missing={
        SERVER_ACCEPTANCE: "SGLang exports acceptance only as gauges "
        "(sglang:spec_accept_length/_rate: the last logging interval's batch, not this "
        "point's); acceptance comes from the stream and from each request's "
        "sglext.spec_tokens_details (server_request_*)",
        "server_mean_itl_ms": "SGLang's inter_token_latency_seconds counts one observation "
        "per token (its mean is per token), not per step as vLLM's",
    },
    request_body={"return_spec_tokens_details": True},
    request_body_lost="the per-request acceptance fields (server_request_*) are null: "
    "SGLang returns each request's sglext.spec_tokens_details only when asked",
)

TRTLLM = EngineDialect(
    name="trtllm",
    metrics_path="/prometheus/metrics",
    prefix="trtllm_",
    renames={
        **_histogram("trtllm_time_to_first_token_seconds", LATENCY["ttft"]),
        **_histogram("trtllm_e2e_request_latency_seconds", LATENCY["e2el"]),
        **_histogram("trtllm_request_queue_time_seconds", LATENCY["queue_time"]),
        "trtllm_prompt_tokens_total": PREFIX_QUERIES,
        "trtllm_prompt_cached_tokens_total": PREFIX_HITS,
    },
    derive=_trtllm_spec,
    gauges={
        "trtllm_kv_cache_utilization": KV_USAGE,
        "trtllm_num_requests_waiting": WAITING,
        "trtllm_num_requests_running": RUNNING,
    },
    missing={
        "server_mean_itl_ms": "TensorRT-LLM exports no inter-token latency histogram "
        "(only per-request TPOT)",
        "server_request_acceptance_length": "TensorRT-LLM returns no per-request "
        "acceptance in its OpenAI responses",
    },
)

ATOM = EngineDialect(
    name="atom",
    metrics_path="/metrics",
    prefix="atom:",
    renames={
        "atom:mtp_draft_tokens_total": SPEC_DRAFT_TOKENS,
        "atom:mtp_accepted_tokens_total": SPEC_ACCEPTED,
        "atom:prefix_cache_full_tokens_total": PREFIX_QUERIES,
        "atom:prefix_cache_cached_tokens_total": PREFIX_HITS,
    },
    derive=_atom_spec,
    gauges={
        "atom:kv_cache_usage_ratio": KV_USAGE,
        "atom:requests_waiting": WAITING,
        "atom:requests_running": RUNNING,
    },
    missing={
        **{
            f"server_mean_{metric}_ms": "ATOM exports no latency histograms"
            for metric in LATENCY_HISTOGRAMS
        },
        "server_request_acceptance_length": "ATOM returns no per-request acceptance",
    },
)

LLAMACPP = EngineDialect(
    name="llamacpp",
    metrics_path="/metrics",
    prefix="llamacpp:",
    renames={},
    derive=lambda _snapshot: ({}, {}),  # nothing of its own maps: not the identity
    gauges={
        "llamacpp:requests_deferred": WAITING,
        "llamacpp:requests_processing": RUNNING,
    },
    missing={
        SERVER_ACCEPTANCE: "llama.cpp's /metrics has no speculative-decoding counters "
        "(only each request's timings.draft_n/draft_n_accepted)",
        **{
            f"server_mean_{metric}_ms": "llama.cpp exports no latency histograms"
            for metric in LATENCY_HISTOGRAMS
        },
        "kv_cache_usage_mean": "llama.cpp exports no KV-cache usage gauge",
        "server_prefix_hit_rate": "llama.cpp exports no prefix-cache counters",
        "server_request_acceptance_length": "llama.cpp sends drafted and accepted tokens "
        "per request but not its draft steps, so no per-request acceptance length",
    },
)

# A Dynamo frontend (found by its own series, tests/fixtures/dynamo_1.4.2/, captured from
# the real 1.4.2 frontend): its /metrics has the frontend's series (metrics/frontend.py)
# and its router's, no engine's. The engine figures are its workers': each worker's
# system port serves its engine's series (a vLLM or mocker worker: vllm:*), read with
# that engine's dialect when given with --server-metrics.
WORKERS_NOT_READ = (
    "a Dynamo frontend's /metrics has no engine series: pass each worker's system port "
    "(DYN_SYSTEM_PORT) /metrics with --server-metrics"
)
DYNAMO = EngineDialect(
    name="dynamo",
    metrics_path="/metrics",
    prefix=FRONTEND_PREFIX,
    renames={},
    derive=lambda _snapshot: ({}, {}),  # only the frontend's own series: not the identity
    missing={
        SERVER_ACCEPTANCE: WORKERS_NOT_READ,
        **{f"server_mean_{metric}_ms": WORKERS_NOT_READ for metric in LATENCY_HISTOGRAMS},
        "kv_cache_usage_mean": WORKERS_NOT_READ,
        "server_prefix_hit_rate": WORKERS_NOT_READ,
        "server_request_acceptance_length": "Dynamo's frontend returns no per-request "
        "acceptance in its OpenAI responses",
    },
)

DIALECTS: Mapping[str, EngineDialect] = MappingProxyType(
    {d.name: d for d in (VLLM, SGLANG, TRTLLM, ATOM, LLAMACPP, DYNAMO)}
)


def dialect(name: str) -> EngineDialect:
    return DIALECTS[name]


def engine_by_names(names: Iterable[str]) -> EngineDialect | None:
    """The engine whose series these are (the first dialect whose prefix a name has),
    None when none is recognised. vLLM after the other engines: a Dynamo worker passes an
    engine's series through beside its own, and vLLM's names are never another engine's.
    Dynamo last: a frontend's series scraped beside its workers' leave the workers' engine
    to read them."""
    found = {d.name for name in names for d in DIALECTS.values() if name.startswith(d.prefix)}
    for name in ("sglang", "trtllm", "atom", "llamacpp", "vllm", "dynamo"):
        if name in found:
            return DIALECTS[name]
    return None
