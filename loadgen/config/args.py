"""argv (or the sidecar's JSON options) -> a validated RunSpec.

The only parser of run flags: the sidecar's options go through the very same parser
(`spec_from_options`), so both reject the same things with the same words. Invalid input
raises SpecError (exit status 2), one line saying what is wrong and what is allowed.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import orjson

from loadgen import __version__
from loadgen.config.compat import add_compat_flags, apply_compat, typed
from loadgen.config.golden import add_golden_flags, golden_fields
from loadgen.config.load_args import add_load_flags, load_fields
from loadgen.config.objectives import add_find_max_flags, find_max_fields, parse_slo_flag
from loadgen.config.parsers import (
    SpecError,
    check_api_key,
    parse_conc,
    parse_cpu_list,
    parse_extra_body,
    parse_header,
    parse_percentiles,
    parse_shard,
    parse_workers,
)
from loadgen.config.session_args import add_session_flags, dataset_format, session_fields
from loadgen.config.spec import (
    DEFAULT_HTTP_TIMEOUT_S,
    DEFAULT_STREAM_IDLE_TIMEOUT_S,
    ENCODER_NAMES,
    MAX_CONVERSATION_BYTES,
    MAX_DATASET_BYTES,
    MAX_SEED,
    REASONING_EFFORTS,
    THINKING_MODES,
    RunSpec,
)


def default_results_dir(now: float | None = None) -> Path:
    """./results/<timestamp>, with -2, -3, ... when a run started in the same second."""
    base = Path("results") / time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


class _Parser(argparse.ArgumentParser):
    """Raises SpecError instead of printing usage and exiting, so errors stay one line;
    an unknown flag gets the nearest real one, as a sweep file's unknown key does."""

    def __init__(self, **kwargs: Any) -> None:
        # `--is 1024` must not silently become --isl: abbreviations are off
        super().__init__(allow_abbrev=False, **kwargs)
        self.flags: list[str] = []

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument

        def recorded(*names: Any, **options: Any) -> Any:
            self.flags += [n for n in names if isinstance(n, str) and n.startswith("--")]
            return add(*names, **options)

        group.add_argument = recorded  # type: ignore[method-assign]
        return group

    def error(self, message: str) -> NoReturn:
        raise SpecError(message + _suggestion(message, self.flags))


def _suggestion(message: str, flags: list[str]) -> str:
    if not message.startswith("unrecognized arguments:"):
        return ""
    for word in message.split(":", 1)[1].split():
        flag = word.split("=", 1)[0]
        close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.6)
        if flag.startswith("--") and close:
            return f" (did you mean {close[0]}?)"
    return ""


class _Help(argparse.RawDescriptionHelpFormatter):
    """Every flag's help ends with its default (or says it is required), exactly once; the
    description and the command list are laid out by hand (textwrap), not re-wrapped."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or not action.option_strings or action.dest == "help":
            return text
        if action.required:
            return f"{text} (required)"
        default = action.default
        if isinstance(action, argparse._StoreTrueAction):
            return f"{text} (default: off)"
        if default is None or default in ("", [], {}):
            return f"{text} (default: none)"
        if isinstance(default, tuple):
            default = ",".join(f"{v:g}" for v in default)
        return f"{text} (default: {default})"


_typed = typed


def parse_endpoint(text: str) -> str:
    """`completions` or `chat`, or vLLM's paths /v1/completions and /v1/chat/completions."""
    name = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}.get(text, text)
    if name not in ("completions", "chat"):
        raise SpecError(
            f"--endpoint {text!r}: allowed: completions, chat (or vLLM's "
            "/v1/completions, /v1/chat/completions)"
        )
    return name


def parse_http_client(text: str) -> str:
    if text == "native":
        return text
    if text == "aiohttp":
        raise SpecError(
            "--http-client: the aiohttp comparison client moved to bench/ "
            "(bench/read_path.py --http-client aiohttp); loadgen measures with its native client"
        )
    raise SpecError(f"--http-client {text!r}: loadgen measures with its native client only")


def parse_request_rate(text: str) -> float | None:
    """Requests/s; `inf` (vLLM's default: all at once, capped by the concurrency) is the
    closed loop, None."""
    try:
        rate = float(text)
    except ValueError:
        raise SpecError(f"--request-rate {text!r}: need a number of requests/s or inf") from None
    return None if rate == float("inf") else rate


# name -> what it does: loadgen.cli dispatches on it and `loadgen --help` lists it
COMMANDS = {
    "run": "measure a server (the default: `loadgen [run] --base-url URL ...`)",
    "sim": "serve the simulator (vLLM's API, MTP, prefix cache) on a port",
    "serve": "run the sidecar: a REST API that starts sweeps next to the server",
    "compare": "compare result directories on the console and as CSV/JSON",
    "report": "write one HTML report of result directories",
    "merge": "combine the result directories of a run's shards",
    "profile": "AIPerf's `profile --scenario inferencex-agentx-mvp` command line "
    "(InferenceX AgentX)",
}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="loadgen",
        description=textwrap.fill(
            "Measure an OpenAI-compatible (vLLM) server at controlled concurrency: TTFT, "
            "ITL, TPOT, E2EL, throughput, interactivity and MTP acceptance. `loadgen --config "
            "sweep.yaml [flags]` runs a sweep file's lanes (flags given apply to every lane).",
            88,
        ),
        epilog="commands (`loadgen COMMAND --help` for each):\n"
        + "\n".join(f"  {name:<9} {summary}" for name, summary in COMMANDS.items()),
        formatter_class=_Help,
    )
    p.add_argument("--version", action="version", version=f"loadgen {__version__}")
    _target_flags(p.add_argument_group("target"))
    _workload_flags(p.add_argument_group("workload"))
    add_session_flags(p.add_argument_group("sessions (multi-turn, agentic trace replay)"))
    _results_flags(p.add_argument_group("results"))
    add_load_flags(p.add_argument_group("load shape (over-saturation stop, slices, ramp-up)"))
    add_find_max_flags(p.add_argument_group("capacity search (README: capacity at an SLO)"))
    add_golden_flags(p.add_argument_group("acceptance conformance (InferenceX golden AL)"))
    add_compat_flags(p)
    _scale_flags(p.add_argument_group("scale out (README: workers and shards)"))
    return p


def _target_flags(t: argparse._ArgumentGroup) -> None:
    t.add_argument(
        "--base-url",
        metavar="URL",
        help="server root, e.g. http://127.0.0.1:8000 (required unless --sim)",
    )
    t.add_argument(
        "--model",
        metavar="NAME",
        help="served model name (default: the only model the server serves)",
    )
    t.add_argument(
        "--sim",
        action="store_true",
        help="start the embedded simulator (MTP, 2 draft tokens) on a free "
        "loopback port and measure it; results say target: simulator",
    )
    t.add_argument(
        "--sim-args",
        default="",
        metavar='"FLAGS"',
        help='extra `loadgen sim` flags for --sim, e.g. "--step-fixed-ms 5"',
    )
    t.add_argument(
        "--api-key",
        metavar="KEY",
        help="bearer token (default: $OPENAI_API_KEY; never written to results)",
    )
    t.add_argument(
        "--server-pid",
        type=int,
        default=None,
        metavar="PID",
        help="the server's process id, when it runs on this machine: the sweep "
        "stops (the point in progress kept, marked complete: false) as soon as "
        "it exits or stays stopped (SIGSTOP) for 2 s (default: none; without "
        "it a server that refuses or drops every connection for 1 s is "
        "taken as gone)",
    )
    t.add_argument(
        "--header",
        action="extend",
        nargs="+",
        default=[],
        type=_typed(parse_header),
        metavar="K:V",
        help="extra request headers, repeatable, e.g. X-Session-Affinity:abc "
        "(K=V as vLLM works too) (default: none)",
    )
    t.add_argument(
        "--server-metrics",
        action="append",
        default=[],
        metavar="URL",
        help="scrape this Prometheus /metrics instead of the target's, repeatable: "
        "the workers behind a router or a Dynamo frontend; counters are summed, "
        "each URL's own figures kept (a URL without a path gets /metrics; "
        "list the target too to keep it) (default: the target's)",
    )
    t.add_argument(
        "--gpu-metrics",
        action="append",
        default=[],
        metavar="URL",
        help="a GPU exporter's Prometheus endpoint (NVIDIA dcgm-exporter, AMD "
        "device-metrics-exporter; `loadgen sim`'s /gpu/metrics; `sim` with --sim), "
        "repeatable: one per node; sampled during every point for energy per "
        "token (a URL without a path gets /metrics) (default: none)",
    )
    t.add_argument(
        "--gpu-metrics-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between --gpu-metrics samples (at most 3: a longer gap "
        "makes a point's energy invalid, as in InferenceX)",
    )
    t.add_argument(
        "--gpu-power-csv",
        type=Path,
        default=None,
        metavar="FILE",
        help="a GPU power telemetry CSV being recorded during the run, e.g. by "
        "`nvidia-smi --query-gpu=timestamp,index,power.draw --format=csv -lms "
        "500 -f FILE` (or amd-smi): each point's energy integrated from it, "
        "as InferenceX does (default: none)",
    )
    # Gone: loadgen measures with its native client only. `native` is still accepted
    # (earlier scripts and sweep files keep working); anything else gets one line.
    t.add_argument("--http-client", default="native", help=argparse.SUPPRESS)


def _workload_flags(w: argparse._ArgumentGroup) -> None:
    w.add_argument(
        "--conc",
        type=_typed(parse_conc),
        metavar="SPEC",
        help="concurrency points: 4..512 (powers of two), 8,16,64, or A..B:+S "
        "(required, or --max-concurrency)",
    )
    w.add_argument(
        "--isl",
        type=int,
        metavar="TOKENS",
        help="input length in tokens (chat template and BOS included) (required "
        "unless --dataset: then each prompt's own length; for trace replay it "
        "only sizes the preflight probe)",
    )
    w.add_argument(
        "--osl",
        type=int,
        metavar="TOKENS",
        help="output length in tokens (max_tokens, with ignore_eos) (required "
        "unless a ShareGPT --dataset: then each answer's length)",
    )
    w.add_argument(
        "--range-ratio",
        type=float,
        default=None,
        metavar="R",
        help="lengths uniform in [R*L, L] for --isl and --osl (1.0 = exact) (default: 1.0)",
    )
    w.add_argument(
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
    )
    w.add_argument(
        "--endpoint",
        type=_typed(parse_endpoint),
        default=None,
        metavar="{completions,chat}",
        help="completions: loadgen encodes the prompt; chat: the server does "
        "(default: completions)",
    )
    w.add_argument(
        "--encoder",
        choices=ENCODER_NAMES,
        default=None,
        help="prompt template loadgen applies (default: dsv4)",
    )
    w.add_argument(
        "--thinking",
        choices=THINKING_MODES,
        default=None,
        help="DeepSeek-V4 thinking mode (default: thinking)",
    )
    w.add_argument(
        "--reasoning-effort",
        choices=REASONING_EFFORTS,
        default=None,
        help="DeepSeek-V4 reasoning effort (default: none)",
    )
    w.add_argument(
        "--prompts-per-conc",
        type=int,
        default=10,
        metavar="N",
        help="measured requests per point = conc x N",
    )
    w.add_argument(
        "--warmup-per-conc",
        type=int,
        default=2,
        metavar="N",
        help="unrecorded warmup requests per point = conc x N (they also open the connections)",
    )
    w.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop sending new requests this long into a point (default: no limit)",
    )
    w.add_argument(
        "--request-rate",
        type=_typed(parse_request_rate),
        default=None,
        metavar="REQ/S",
        help="open loop at this arrival rate, capped by --conc (default: closed loop, also `inf`)",
    )
    w.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        metavar="SHAPE",
        help="gamma shape of open-loop arrival gaps (1.0 = Poisson)",
    )
    w.add_argument("--temperature", type=float, default=0.0, help="sampling temperature")
    w.add_argument(
        "--top-p",
        type=float,
        default=None,
        metavar="P",
        help="nucleus sampling top_p, sent in every body (acceptance depends on "
        "sampling) (default: not sent: the server's, 1.0 on vLLM)",
    )
    w.add_argument(
        "--seed", type=int, default=0, help=f"seed for prompts, lengths, arrivals, 0..{MAX_SEED}"
    )
    w.add_argument(
        "--extra-body",
        type=_typed(parse_extra_body),
        default={},
        metavar="JSON",
        help="extra request-body fields, e.g. '{\"min_p\": 0.1}' (not those "
        "loadgen sets: model, prompt, max_tokens, stream, ...) (default: none)",
    )


def _results_flags(r: argparse._ArgumentGroup) -> None:
    r.add_argument(
        "--results",
        type=Path,
        default=None,
        metavar="DIR",
        help="output directory; one that already holds a run is refused "
        "(default: ./results/<timestamp>)",
    )
    r.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the interrupted sweep in DIR from its first incomplete "
        "point; give the same flags as the first run (default: none)",
    )
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --results DIR (its result files are deleted first)",
    )
    r.add_argument(
        "--num-gpus",
        type=int,
        default=None,
        metavar="N",
        help="GPUs behind the server, for per-GPU throughput",
    )
    r.add_argument(
        "--spec-tokens",
        type=int,
        default=None,
        metavar="K",
        help="draft tokens per step for the acceptance rate (default: from the server's /metrics)",
    )
    r.add_argument(
        "--slo",
        type=_typed(parse_slo_flag),
        default={},
        metavar="M=T,...",
        help="goodput SLOs, e.g. ttft=2s,tpot=50ms (metrics ttft, tpot, itl, e2el; "
        "units us, ms, s; bare numbers are ms); with --find-max also objectives "
        "per percentile, ttft:p99=2s (plain M=T: p99) (default: none: no "
        "goodput figure)",
    )
    r.add_argument(
        "--trials",
        type=int,
        default=1,
        metavar="N",
        help="measure every point N times (fresh connections, a seed per trial) "
        "and report each headline figure's mean, sd, CV and 95%% CI (default: 1)",
    )
    r.add_argument(
        "--percentiles",
        type=_typed(parse_percentiles),
        default=None,
        metavar="P,...",
        help="percentiles to report (default: 50,90,99,99.9; session runs add 75,95)",
    )
    r.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give up on a streamed request this long after it was sent, "
        "however steadily it streams (default: no timeout)",
    )
    r.add_argument(
        "--stream-idle-timeout",
        type=float,
        default=DEFAULT_STREAM_IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help="a streamed request that receives no byte for this long (waiting "
        "for the first token included) ends as a timeout",
    )
    r.add_argument(
        "--http-timeout",
        type=float,
        default=DEFAULT_HTTP_TIMEOUT_S,
        metavar="SECONDS",
        help="deadline of each non-streaming call: /v1/models, /version, "
        "/tokenize, /metrics scrapes",
    )
    r.add_argument(
        "--max-error-rate",
        type=float,
        default=None,
        metavar="FRACTION",
        help="exit non-zero when a point's failed share exceeds this "
        "(results are written anyway) (default: 0.05; 0.10 for session runs, "
        "InferenceX's agentic gate)",
    )
    r.add_argument(
        "--tokenizer",
        metavar="PATH|ORG/NAME",
        help="tokenizer.json, model dir or Hugging Face Hub id (HF cache and "
        "HF_HUB_OFFLINE honoured) (default: official DeepSeek-V4)",
    )
    r.add_argument(
        "--aiperf-artifacts",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write each point as AIPerf's profile_export.jsonl, "
        "profile_export_aiperf.json and server_metrics_export.json (the server "
        "scraped every second) for InferenceX's agentic aggregation; several "
        "points: DIR/conc_<N>/ (default: off)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    r.add_argument(
        "--metrics-port",
        type=_typed(parse_port),
        default=None,
        metavar="PORT",
        help="serve live Prometheus metrics on 127.0.0.1:PORT during the run "
        "(0 = any free port, printed) (default: off)",
    )
    r.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --metrics-port; 0.0.0.0 lets Prometheus in a cluster "
        "scrape a loadgen pod",
    )


def _scale_flags(s: argparse._ArgumentGroup) -> None:
    s.add_argument(
        "--workers",
        type=_typed(parse_workers),
        default=1,
        metavar="N|auto",
        help="client processes on this machine, each with its own event loop, "
        "connections and share of every point's concurrency; auto picks from the "
        "cores and the largest --conc and says what it chose (1 = this process)",
    )
    s.add_argument(
        "--cpu-affinity",
        type=_typed(parse_cpu_list),
        default=(),
        metavar="CPUS",
        help="pin worker i to the i-th CPU of this list (taskset syntax, e.g. 2-7) "
        "(default: not pinned)",
    )
    s.add_argument(
        "--shard",
        type=_typed(parse_shard),
        default=(0, 1),
        metavar="I/N",
        help="run shard I (from 0) of N of every point, for `loadgen merge` to "
        "combine with the other shards' results (default: 0/1, the whole point)",
    )
    s.add_argument(
        "--shard-sync",
        type=Path,
        default=None,
        metavar="DIR",
        help="a directory every shard can write (e.g. on the shared results "
        "volume), empty for each run: shards start each point's measured phase "
        "together, so their points overlap (default: shards run independently)",
    )


def _spec(args: argparse.Namespace, env: Mapping[str, str]) -> RunSpec:
    compat = apply_compat(args)
    if args.conc is None:
        raise SpecError("--conc is required (or --max-concurrency), e.g. --conc 4..512")
    if args.sim and args.base_url:
        raise SpecError("--sim and --base-url exclude each other: --sim measures the simulator")
    try:
        sim_args = tuple(shlex.split(args.sim_args))
    except ValueError as exc:
        raise SpecError(f"--sim-args {args.sim_args!r}: {exc}") from None
    taken = [a for a in sim_args if a.split("=")[0] in ("--host", "--port")]
    if taken:
        raise SpecError(f"--sim-args: {taken[0]} is chosen by loadgen (a free loopback port)")
    if args.sim and args.model and not any(a.split("=")[0] == "--model" for a in sim_args):
        sim_args = ("--model", args.model, *sim_args)  # the simulator serves the name asked for
    if args.resume is not None and args.results is not None and args.results != args.resume:
        raise SpecError(
            f"--resume {args.resume} continues the run in that directory; "
            f"drop --results {args.results}"
        )
    results = args.resume or args.results or default_results_dir()
    fmt = dataset_format(args, compat.pop("dataset_format"))
    return RunSpec(
        conc=args.conc,
        base_url=args.base_url,
        model=args.model,
        endpoint=args.endpoint or "completions",
        encoder=args.encoder or "dsv4",
        thinking=args.thinking or "thinking",
        reasoning_effort=args.reasoning_effort,
        prompts_per_conc=args.prompts_per_conc,
        warmup_per_conc=args.warmup_per_conc,
        duration_s=args.duration,
        range_ratio=1.0 if args.range_ratio is None else args.range_ratio,
        dataset=args.dataset,
        request_rate=args.request_rate,
        burstiness=args.burstiness,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        num_gpus=args.num_gpus,
        spec_tokens=args.spec_tokens,
        **find_max_fields(args),
        request_timeout_s=args.request_timeout,
        http_timeout_s=args.http_timeout,
        stream_idle_timeout_s=args.stream_idle_timeout,
        results_dir=results,
        tokenizer=args.tokenizer,
        api_key=_api_key(args.api_key or env.get("OPENAI_API_KEY")),
        headers=tuple(args.header),
        sim=args.sim,
        sim_args=sim_args,
        progress=not args.no_progress,
        server_metrics=tuple(args.server_metrics),
        gpu_metrics=tuple(args.gpu_metrics),
        gpu_metrics_interval_s=args.gpu_metrics_interval,
        gpu_power_csv=args.gpu_power_csv,
        extra_body=args.extra_body,
        workers=args.workers,
        cpu_affinity=tuple(args.cpu_affinity),
        shard_index=args.shard[0],
        shard_count=args.shard[1],
        shard_sync=args.shard_sync,
        server_pid=args.server_pid,
        trials=args.trials,
        resume=args.resume is not None,
        overwrite=args.overwrite,
        http_client=parse_http_client(args.http_client),
        aiperf_artifacts=args.aiperf_artifacts,
        **compat,
        **session_fields(args, fmt),
        **golden_fields(args, args.thinking or "thinking", args.spec_tokens),
        **load_fields(args),
    )


def _api_key(key: str | None) -> str | None:
    """Surrounding whitespace stripped (a secret file's newline); empty means none."""
    if key is None:
        return None
    return check_api_key(key) or None


def spec_from_argv(argv: Sequence[str], env: Mapping[str, str] | None = None) -> RunSpec:
    return parse_run_args(argv, os.environ if env is None else env)[0]


def parse_run_args(
    argv: Sequence[str],
    env: Mapping[str, str],
) -> tuple[RunSpec, int | None, str]:
    """(the run, the --metrics-port to serve live metrics on, if any, and its host)."""
    args = build_parser().parse_args(list(argv))
    return _spec(args, env), args.metrics_port, args.metrics_host


def parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise SpecError(f"--metrics-port {text!r}: need a port number 0..65535") from None
    if not 0 <= port <= 65535:
        raise SpecError(f"--metrics-port {port}: need 0..65535")
    return port


def option_argv(name: str, value: Any) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if name == "extra_body" and isinstance(value, Mapping):
        return [flag, orjson.dumps(dict(value)).decode()]
    if name == "sim_args" and isinstance(value, list | tuple):
        return [flag, shlex.join(str(v) for v in value)]
    if isinstance(value, Mapping):  # slo, header
        if name == "header":
            return [part for k, v in value.items() for part in (flag, f"{k}:{v}")]
        return [flag, ",".join(f"{k}={v}" for k, v in value.items())]
    if isinstance(value, list | tuple):
        if name in REPEATED_OPTIONS:
            return [part for item in value for part in (flag, str(item))]
        return [flag, ",".join(str(v) for v in value)]
    return [flag, str(value)]


# JSON list options given as one flag per item (their items may hold commas).
REPEATED_OPTIONS = frozenset({"header", "server_metrics", "gpu_metrics", "goodput", "metadata"})


def option_dest(key: str) -> str:
    """An option's argparse dest: flag names with `-` or `_`, plus the API's aliases."""
    name = key.replace("-", "_")
    return {"results_dir": "results", "headers": "header"}.get(name, name)


def options_argv(options: Mapping[str, Any]) -> list[str]:
    """Run options (flag names -> values, as JSON or YAML give them) as argv."""
    parser = build_parser()
    known = {action.dest for action in parser._actions} - {"help"}
    argv: list[str] = []
    for key, value in options.items():
        name = option_dest(key)
        if name not in known:
            raise SpecError(f"unknown option {key!r}; allowed: {', '.join(sorted(known))}")
        argv += option_argv(name, value)
    return argv


def spec_from_options(options: Mapping[str, Any]) -> RunSpec:
    """The sidecar's JSON options (flag names, `-` or `_`), validated like argv."""
    return spec_from_argv(options_argv(options))
