"""The target and workload run flags: what is measured and what is sent (table entries,
config/fields.py), with the parsers only they use."""

from __future__ import annotations

import argparse
from pathlib import Path

from loadgen.config.fields import Field, flag
from loadgen.config.parsers import SpecError, parse_conc, parse_extra_body, parse_header
from loadgen.config.spec import (
    ENCODER_NAMES,
    MAX_CONVERSATION_BYTES,
    MAX_DATASET_BYTES,
    MAX_SEED,
    REASONING_EFFORTS,
    THINKING_MODES,
)


def parse_endpoint(text: str) -> str:
    """`completions` or `chat`, or vLLM's paths /v1/completions and /v1/chat/completions."""
    name = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}.get(text, text)
    if name not in ("completions", "chat"):
        raise SpecError(
            f"--endpoint {text!r}: allowed: completions, chat (or vLLM's "
            "/v1/completions, /v1/chat/completions)"
        )
    return name


def parse_request_rate(text: str) -> float | None:
    """Requests/s; `inf` (vLLM's default: all at once, capped by the concurrency) is the
    closed loop, None."""
    try:
        rate = float(text)
    except ValueError:
        raise SpecError(f"--request-rate {text!r}: need a number of requests/s or inf") from None
    return None if rate == float("inf") else rate


# name -> what it does: loadgen.cli dispatches on it and `loadgen --help` lists it


def parse_http_client(text: str) -> str:
    if text == "native":
        return text
    if text == "aiohttp":
        raise SpecError(
            "--http-client: the aiohttp comparison client moved to bench/ "
            "(bench/read_path.py --http-client aiohttp); loadgen measures with its native client"
        )
    raise SpecError(f"--http-client {text!r}: loadgen measures with its native client only")


TARGET_FIELDS: tuple[Field, ...] = (
    flag(
        "--base-url",
        metavar="URL",
        help="server root, e.g. http://127.0.0.1:8000 (required unless --sim)",
    ),
    flag(
        "--model",
        metavar="NAME",
        help="served model name (default: the only model the server serves)",
    ),
    flag(
        "--sim",
        action="store_true",
        help="start the embedded simulator (MTP, 2 draft tokens) on a free "
        "loopback port and measure it; results say target: simulator",
    ),
    flag(
        "--sim-args",
        shape="args",
        default="",
        metavar='"FLAGS"',
        help='extra `loadgen sim` flags for --sim, e.g. "--step-fixed-ms 5"',
    ),
    flag(
        "--api-key",
        metavar="KEY",
        help="bearer token (default: $OPENAI_API_KEY; never written to results)",
    ),
    flag(
        "--server-pid",
        type=int,
        default=None,
        metavar="PID",
        help="the server's process id, when it runs on this machine: the sweep "
        "stops (the point in progress kept, marked complete: false) as soon as "
        "it exits or stays stopped (SIGSTOP) for 2 s (default: none; without "
        "it a server that refuses or drops every connection for 1 s is "
        "taken as gone)",
    ),
    flag(
        "--header",
        shape="headers",
        action="extend",
        nargs="+",
        default=[],
        type=parse_header,
        metavar="K:V",
        help="extra request headers, repeatable, e.g. X-Session-Affinity:abc "
        "(K=V as vLLM works too) (default: none)",
    ),
    flag(
        "--server-metrics",
        action="append",
        default=[],
        metavar="URL",
        help="scrape this Prometheus /metrics instead of the target's, repeatable: "
        "the workers behind a router or a Dynamo frontend; counters are summed, "
        "each URL's own figures kept (a URL without a path gets /metrics; "
        "list the target too to keep it) (default: the target's)",
    ),
    flag(
        "--gpu-metrics",
        action="append",
        default=[],
        metavar="URL",
        help="a GPU exporter's Prometheus endpoint (NVIDIA dcgm-exporter, AMD "
        "device-metrics-exporter; `loadgen sim`'s /gpu/metrics; `sim` with --sim), "
        "repeatable: one per node; sampled during every point for energy per "
        "token (a URL without a path gets /metrics) (default: none)",
    ),
    flag(
        "--gpu-metrics-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between --gpu-metrics samples (at most 3: a longer gap "
        "makes a point's energy invalid, as in InferenceX)",
    ),
    flag(
        "--gpu-power-csv",
        type=Path,
        default=None,
        metavar="FILE",
        help="a GPU power telemetry CSV being recorded during the run, e.g. by "
        "`nvidia-smi --query-gpu=timestamp,index,power.draw --format=csv -lms "
        "500 -f FILE` (or amd-smi): each point's energy integrated from it, "
        "as InferenceX does (default: none)",
    ),
    # the aiohttp comparison client is bench/'s now; `native` still parses, for old scripts
    flag("--http-client", default="native", help=argparse.SUPPRESS),  # build_spec checks it,
)


WORKLOAD_FIELDS: tuple[Field, ...] = (
    flag(
        "--conc",
        shape="numbers",
        type=parse_conc,
        metavar="SPEC",
        help="concurrency points: 4..512 (powers of two), 8,16,64, or A..B:+S "
        "(required, or --max-concurrency)",
    ),
    flag(
        "--isl",
        type=int,
        metavar="TOKENS",
        help="input length in tokens (chat template and BOS included) (required "
        "unless --dataset: then each prompt's own length; for trace replay it "
        "only sizes the preflight probe)",
    ),
    flag(
        "--osl",
        type=int,
        metavar="TOKENS",
        help="output length in tokens (max_tokens, with ignore_eos) (required "
        "unless a ShareGPT --dataset: then each answer's length)",
    ),
    flag(
        "--range-ratio",
        type=float,
        default=None,
        metavar="R",
        help="lengths uniform in [R*L, L] for --isl and --osl (1.0 = exact) (default: 1.0)",
    ),
    flag(
        "--dataset",
        type=Path,
        metavar="FILE",
        help="prompts from a file instead of random ones: ShareGPT JSON "
        "(conversations of from/value; the first turn is the prompt, the second "
        "the reference answer) or JSONL, one OpenAI messages list (or {messages}, "
        "or vLLM custom {prompt, output_tokens}) per line; or agentic traces to "
        "replay as sessions (see --dataset-format, --multi-turn); read into "
        f"memory, so at most {MAX_DATASET_BYTES >> 30} GiB, each line at "
        f"most {MAX_CONVERSATION_BYTES >> 20} MiB (about 1M tokens) (default: none)",
    ),
    flag(
        "--endpoint",
        type=parse_endpoint,
        default=None,
        metavar="{completions,chat}",
        help="completions: loadgen encodes the prompt; chat: the server does "
        "(default: completions)",
    ),
    flag(
        "--encoder",
        choices=ENCODER_NAMES,
        default=None,
        help="prompt template loadgen applies (default: dsv4)",
    ),
    flag(
        "--thinking",
        choices=THINKING_MODES,
        default=None,
        help="DeepSeek-V4 thinking mode (default: thinking)",
    ),
    flag(
        "--reasoning-effort",
        choices=REASONING_EFFORTS,
        default=None,
        help="DeepSeek-V4 reasoning effort (default: none)",
    ),
    flag(
        "--prompts-per-conc",
        type=int,
        default=10,
        metavar="N",
        help="measured requests per point = conc x N",
    ),
    flag(
        "--warmup-per-conc",
        type=int,
        default=2,
        metavar="N",
        help="unrecorded warmup requests per point = conc x N (they also open the connections)",
    ),
    flag(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop sending new requests this long into a point (default: no limit)",
    ),
    flag(
        "--request-rate",
        type=parse_request_rate,
        default=None,
        metavar="REQ/S",
        help="open loop at this arrival rate, capped by --conc (default: closed loop, also `inf`)",
    ),
    flag(
        "--burstiness",
        type=float,
        default=1.0,
        metavar="SHAPE",
        help="gamma shape of open-loop arrival gaps (1.0 = Poisson)",
    ),
    flag("--temperature", type=float, default=0.0, help="sampling temperature"),
    flag(
        "--top-p",
        type=float,
        default=None,
        metavar="P",
        help="nucleus sampling top_p, sent in every body (acceptance depends on "
        "sampling) (default: not sent: the server's, 1.0 on vLLM)",
    ),
    flag("--seed", type=int, default=0, help=f"seed for prompts, lengths, arrivals, 0..{MAX_SEED}"),
    flag(
        "--extra-body",
        shape="body",
        type=parse_extra_body,
        default={},
        metavar="JSON",
        help="extra request-body fields, e.g. '{\"min_p\": 0.1}' (not those "
        "loadgen sets: model, prompt, max_tokens, stream, ...) (default: none)",
    ),
)
