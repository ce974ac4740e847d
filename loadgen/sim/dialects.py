"""`loadgen sim --engine sglang|trtllm|atom|llamacpp`: the simulator's /metrics in another
engine's dialect, rendered from the same vLLM instruments (sim/metrics.py), so the ground
truth is one and each dialect is a view of it.

Names, types and help texts are those of tests/fixtures/engines/<engine>/metrics.txt
(transcribed from each engine's source at the commit named there). Where an engine has no
counter the vLLM instruments hold, it has none here either; where it names a figure by
another count, the view derives it from vLLM's the way the engine counts it:
- TensorRT-LLM counts drafted and accepted tokens per `token_position`: every step drafts
  at each of the K positions, and position i is accepted where vLLM's per-position
  counter says.
- ATOM counts steps per number of drafts accepted (`accepted_tokens` = k): the steps that
  accepted at least k drafts minus those that accepted at least k + 1.
- SGLang's spec_accept_length/_rate are gauges; here they hold the acceptance since the
  simulator started (SGLang's hold its last logging interval's batch): a reader must not
  take them for a point's figure either way.
Differences from the engines, on purpose: label sets are kept as the engine's where the
fixture has them constant (a fixed rank or engine_type), and model_name stays; SGLang's
inter_token_latency_seconds is vLLM's per-step histogram here (SGLang's counts tokens),
which loadgen does not read on SGLang; prompt token counters count at prefix lookup
(vLLM's prefix_cache_queries), so the prefix hit ratio is the simulator's exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# (name as rendered, Prometheus type, help text) of one family
Family = tuple[str, str, str]
Samples = dict[str, list[tuple[dict[str, str], float]]]  # vLLM sample name -> samples


@dataclass(frozen=True, slots=True)
class Rename:
    """A vLLM family shown under the engine's name (samples keep their suffix)."""

    vllm: str  # vLLM family name, without _total for counters
    family: Family
    ranked: bool = True  # carries the dialect's constant labels (SGLang: scheduler series)


@dataclass(frozen=True, slots=True)
class SimDialect:
    name: str
    metrics_path: str
    renames: tuple[Rename, ...]
    labels: Mapping[str, str] = field(default_factory=dict)  # constant labels of the engine
    drop: tuple[str, ...] = ("engine",)  # vLLM labels the engine does not have
    derived: Callable[[Samples, Mapping[str, str]], list[str]] | None = None


def _total(samples: Samples, name: str) -> float:
    return sum(value for _labels, value in samples.get(name, ()))


def _per_position(samples: Samples) -> dict[int, float]:
    out: dict[int, float] = {}
    for labels, value in samples.get("vllm:spec_decode_num_accepted_tokens_per_pos_total", ()):
        position = int(labels["position"])
        out[position] = out.get(position, 0.0) + value
    return out


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _family(family: Family, rows: Sequence[tuple[Mapping[str, str], float]]) -> list[str]:
    name, kind, help_text = family
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{_labels(labels)} {value!r}" for labels, value in rows]
    return lines


def _sglang_spec(samples: Samples, labels: Mapping[str, str]) -> list[str]:
    drafts = _total(samples, "vllm:spec_decode_num_drafts_total")
    accepted = _total(samples, "vllm:spec_decode_num_accepted_tokens_total")
    draft_tokens = _total(samples, "vllm:spec_decode_num_draft_tokens_total")
    return _family(  # registered whether or not it drafts, as SGLang's (0 until it does)
        (
            "sglang:spec_accept_length",
            "gauge",
            "The average acceptance length of speculative decoding.",
        ),
        [(labels, 1.0 + accepted / drafts if drafts else 0.0)],
    ) + _family(
        (
            "sglang:spec_accept_rate",
            "gauge",
            "The average acceptance rate of speculative decoding "
            "(`accepted tokens / total draft tokens` in batch).",
        ),
        [(labels, accepted / draft_tokens if draft_tokens else 0.0)],
    )


def _trtllm_spec(samples: Samples, labels: Mapping[str, str]) -> list[str]:
    drafts = _total(samples, "vllm:spec_decode_num_drafts_total")
    per_position = _per_position(samples)
    if not per_position:
        return []
    drafted = [({**labels, "token_position": str(i)}, drafts) for i in sorted(per_position)]
    accepted = [
        ({**labels, "token_position": str(i)}, value) for i, value in sorted(per_position.items())
    ]
    return _family(
        (
            "trtllm_spec_decode_drafted_tokens_total",
            "counter",
            "Total drafted tokens per speculative decoding position.",
        ),
        drafted,
    ) + _family(
        (
            "trtllm_spec_decode_accepted_tokens_total",
            "counter",
            "Total accepted tokens per speculative decoding position.",
        ),
        accepted,
    )


def _atom_spec(samples: Samples, labels: Mapping[str, str]) -> list[str]:
    drafts = _total(samples, "vllm:spec_decode_num_drafts_total")
    per_position = _per_position(samples)
    if not per_position:
        return []
    k = max(per_position) + 1
    at_least = [drafts] + [per_position.get(i, 0.0) for i in range(k)] + [0.0]
    steps = [
        ({**labels, "accepted_tokens": str(j)}, at_least[j] - at_least[j + 1]) for j in range(k + 1)
    ]
    accepted = _total(samples, "vllm:spec_decode_num_accepted_tokens_total")
    draft_tokens = _total(samples, "vllm:spec_decode_num_draft_tokens_total")
    return (
        _family(
            (
                "atom:mtp_acceptance_rate",
                "gauge",
                "Fraction of speculative draft tokens accepted.",
            ),
            [(labels, accepted / draft_tokens if draft_tokens else 0.0)],
        )
        + _family(
            (
                "atom:mtp_average_tokens_per_forward",
                "gauge",
                "Average emitted tokens per speculative decode forward.",
            ),
            [(labels, 1.0 + accepted / drafts if drafts else 0.0)],
        )
        + _family(
            (
                "atom:mtp_decode_steps_total",
                "counter",
                "Number of speculative decode steps by accepted bonus-token count.",
            ),
            steps,
        )
    )


def _r(vllm: str, name: str, kind: str, help_text: str, *, ranked: bool = True) -> Rename:
    return Rename(vllm, (name, kind, help_text), ranked)


def _histograms(
    engine: Mapping[str, tuple[str, str]], *, ranked: bool = True
) -> tuple[Rename, ...]:
    return tuple(_r(v, name, "histogram", doc, ranked=ranked) for v, (name, doc) in engine.items())


SGLANG = SimDialect(
    name="sglang",
    metrics_path="/metrics",
    labels={"moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"},
    renames=(
        _r(
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "gauge",
            "The number of running requests.",
        ),
        _r(
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "gauge",
            "The number of requests in the waiting queue.",
        ),
        _r("vllm:kv_cache_usage_perc", "sglang:token_usage", "gauge", "The token usage."),
        _r(
            "vllm:prefix_cache_queries",
            "sglang:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            ranked=False,
        ),
        _r(
            "vllm:generation_tokens",
            "sglang:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            ranked=False,
        ),
        _r(
            "vllm:prefix_cache_hits",
            "sglang:cached_tokens_total",
            "counter",
            "Number of cached prompt tokens.",
            ranked=False,
        ),
        *_histograms(
            {
                "vllm:time_to_first_token_seconds": (
                    "sglang:time_to_first_token_seconds",
                    "Histogram of time to first token in seconds.",
                ),
                "vllm:inter_token_latency_seconds": (
                    "sglang:inter_token_latency_seconds",
                    "Histogram of inter-token latency in seconds.",
                ),
                "vllm:e2e_request_latency_seconds": (
                    "sglang:e2e_request_latency_seconds",
                    "Histogram of End-to-end request latency in seconds",
                ),
            },
            ranked=False,
        ),
        _r(
            "vllm:request_queue_time_seconds",
            "sglang:queue_time_seconds",
            "histogram",
            "Histogram of queueing time in seconds.",
        ),
    ),
    derived=_sglang_spec,
)

TRTLLM = SimDialect(
    name="trtllm",
    metrics_path="/prometheus/metrics",
    labels={"engine_type": "trtllm"},
    renames=(
        _r(
            "vllm:num_requests_running",
            "trtllm_num_requests_running",
            "gauge",
            "Number of active requests",
        ),
        _r(
            "vllm:num_requests_waiting",
            "trtllm_num_requests_waiting",
            "gauge",
            "Number of queued requests",
        ),
        _r(
            "vllm:kv_cache_usage_perc",
            "trtllm_kv_cache_utilization",
            "gauge",
            "KV cache utilization",
        ),
        _r(
            "vllm:prefix_cache_queries",
            "trtllm_prompt_tokens_total",
            "counter",
            "Cumulative number of prompt (input) tokens processed.",
        ),
        _r(
            "vllm:prefix_cache_hits",
            "trtllm_prompt_cached_tokens_total",
            "counter",
            "Process-lifetime total prompt tokens served from KV cache.",
        ),
        _r(
            "vllm:spec_decode_num_draft_tokens",
            "trtllm_spec_decode_num_draft_tokens_total",
            "counter",
            "Total number of draft tokens in speculative decoding",
        ),
        _r(
            "vllm:spec_decode_num_accepted_tokens",
            "trtllm_spec_decode_num_accepted_tokens_total",
            "counter",
            "Total number of accepted tokens in speculative decoding",
        ),
        *_histograms(
            {
                "vllm:time_to_first_token_seconds": (
                    "trtllm_time_to_first_token_seconds",
                    "Histogram of time to first token in seconds.",
                ),
                "vllm:e2e_request_latency_seconds": (
                    "trtllm_e2e_request_latency_seconds",
                    "Histogram of end to end request latency in seconds.",
                ),
                "vllm:request_queue_time_seconds": (
                    "trtllm_request_queue_time_seconds",
                    "Histogram of time spent in WAITING phase for request.",
                ),
            }
        ),
    ),
    derived=_trtllm_spec,
)

ATOM = SimDialect(
    name="atom",
    metrics_path="/metrics",
    drop=("engine", "model_name"),
    renames=(
        _r(
            "vllm:num_requests_running",
            "atom:requests_running",
            "gauge",
            "Number of requests currently running across data-parallel ranks.",
        ),
        _r(
            "vllm:num_requests_waiting",
            "atom:requests_waiting",
            "gauge",
            "Number of requests waiting across data-parallel ranks.",
        ),
        _r(
            "vllm:kv_cache_usage_perc",
            "atom:kv_cache_usage_ratio",
            "gauge",
            "Fraction of KV-cache blocks currently allocated.",
        ),
        _r(
            "vllm:prefix_cache_queries",
            "atom:prefix_cache_full_tokens_total",
            "counter",
            "Number of prompt tokens considered by prefix-cache accounting.",
        ),
        _r(
            "vllm:prefix_cache_hits",
            "atom:prefix_cache_cached_tokens_total",
            "counter",
            "Number of prompt tokens served from the admitted prefix cache.",
        ),
        _r(
            "vllm:spec_decode_num_draft_tokens",
            "atom:mtp_draft_tokens_total",
            "counter",
            "Number of speculative draft tokens considered.",
        ),
        _r(
            "vllm:spec_decode_num_accepted_tokens",
            "atom:mtp_accepted_tokens_total",
            "counter",
            "Number of accepted speculative bonus tokens.",
        ),
    ),
    derived=_atom_spec,
)

LLAMACPP = SimDialect(
    name="llamacpp",
    metrics_path="/metrics",
    drop=("engine", "model_name"),
    renames=(
        _r(
            "vllm:prompt_tokens",
            "llamacpp:prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
        ),
        _r(
            "vllm:generation_tokens",
            "llamacpp:tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
        ),
        _r(
            "vllm:num_requests_running",
            "llamacpp:requests_processing",
            "gauge",
            "Number of requests processing.",
        ),
        _r(
            "vllm:num_requests_waiting",
            "llamacpp:requests_deferred",
            "gauge",
            "Number of requests deferred.",
        ),
    ),
)

SIM_DIALECTS: Mapping[str, SimDialect] = {d.name: d for d in (SGLANG, TRTLLM, ATOM, LLAMACPP)}


def _kept(dialect: SimDialect, labels: Mapping[str, str], ranked: bool) -> dict[str, str]:
    kept = {k: v for k, v in labels.items() if k not in dialect.drop}
    return {**kept, **dialect.labels} if ranked else kept


def render(dialect: SimDialect, vllm_text: str) -> str:
    """The vLLM instruments' exposition text shown in `dialect`."""
    samples: Samples = {}
    model_labels: dict[str, str] = {}
    for family in text_string_to_metric_families(vllm_text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
            if "model_name" in sample.labels:
                model_labels = {"model_name": sample.labels["model_name"]}
    lines: list[str] = []
    for rename in dialect.renames:
        name, kind, help_text = rename.family
        if kind == "histogram":
            rows = [
                (name + suffix, _kept(dialect, labels, rename.ranked), value)
                for suffix in ("_bucket", "_count", "_sum")
                for labels, value in samples.get(rename.vllm + suffix, ())
            ]
        else:
            vllm_sample = rename.vllm + ("_total" if kind == "counter" else "")
            rows = [
                (name, _kept(dialect, labels, rename.ranked), value)
                for labels, value in samples.get(vllm_sample, ())
            ]
        if rows:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            lines += [f"{n}{_labels(labels)} {value!r}" for n, labels, value in rows]
    if dialect.derived is not None:
        constant = {} if "model_name" in dialect.drop else model_labels
        lines += dialect.derived(samples, {**constant, **dialect.labels})
    return "\n".join(lines) + "\n"
