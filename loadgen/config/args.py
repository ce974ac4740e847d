"""argv (or the sidecar's JSON options) -> a validated RunSpec.

The only parser of run flags: the sidecar's options go through the very same parser
(`spec_from_options`), so both reject the same things with the same words. Invalid input
raises SpecError (exit status 2), one line saying what is wrong and what is allowed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from loadgen.config.dataset_format import FORMATS, TRACE_FORMATS, detect_format
from loadgen.config.dist import parse_dist
from loadgen.config.spec import (
    ENCODER_NAMES,
    ENDPOINTS,
    REASONING_EFFORTS,
    THINKING_MODES,
    RunSpec,
    SpecError,
    parse_conc,
    parse_header,
    parse_percentiles,
    parse_slos,
)


def default_results_dir(now: float | None = None) -> Path:
    return Path("results") / time.strftime("%Y%m%d-%H%M%S", time.localtime(now))


class _Parser(argparse.ArgumentParser):
    """Raises SpecError instead of printing usage and exiting, so errors stay one line."""

    def error(self, message: str) -> NoReturn:
        raise SpecError(message)


class _Help(argparse.HelpFormatter):
    """Every flag's help ends with its default (or says it is required), exactly once."""

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


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="loadgen",
        description="Measure an OpenAI-compatible (vLLM) server at controlled concurrency: "
        "TTFT, ITL, TPOT, E2EL, throughput, interactivity and MTP acceptance. Other commands: "
        "`loadgen sim --help` (simulator), `loadgen serve --help` (sidecar).",
        formatter_class=_Help,
    )
    _target_flags(p.add_argument_group("target"))
    _workload_flags(p.add_argument_group("workload"))
    _session_flags(p.add_argument_group("sessions (multi-turn, agentic trace replay)"))
    _results_flags(p.add_argument_group("results"))
    return p


def _session_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--dataset-format", choices=FORMATS, default="auto",
                   help="format of --dataset: messages, sharegpt (one conversation per "
                   "line), weka (AgentX agentic traces: a JSONL file or a directory of "
                   ".json traces), mooncake (JSONL); auto detects it")
    g.add_argument("--multi-turn", action="store_true",
                   help="play each messages/ShareGPT dataset conversation as a session: one "
                   "request per user turn, each sending the whole history so far")
    g.add_argument("--turns", default=None, metavar="DIST",
                   help="synthetic multi-turn sessions with this many turns: N, A..B "
                   "(uniform) or exp:MEAN; the first turn has --isl tokens")
    g.add_argument("--turn-tokens", default="256", metavar="DIST",
                   help="new user tokens per later turn (N, A..B or exp:MEAN)")
    g.add_argument("--think-time", default="0", metavar="DIST",
                   help="seconds between a turn's reply and the next turn (N, A..B, exp:MEAN)")
    g.add_argument("--sessions-per-conc", type=int, default=2, metavar="N",
                   help="synthetic sessions per point = conc x N")
    g.add_argument("--session-header", action="append", default=None, metavar="NAME",
                   help="header carrying the session id, repeatable (e.g. "
                   "X-Dynamo-Session-ID, X-SMG-Routing-Key); 'none' sends none "
                   "(default: X-Session-ID)")
    g.add_argument("--start-ratio", type=_typed(parse_ratio_pair), default=None,
                   metavar="LO,HI",
                   help="trace lanes start at a seeded turn in this fraction of their "
                   "trace, after a primer that sends its prefix (default: 0.25,0.75 for "
                   "weka traces, 0,0 otherwise)")
    g.add_argument("--idle-cap-system", type=float, default=10.0, metavar="SECONDS",
                   help="when nothing is in flight this long, send the next due turn now")
    g.add_argument("--idle-cap-tree", type=float, default=300.0, metavar="SECONDS",
                   help="cut any recorded gap of a session tree to this")
    g.add_argument("--no-cache-bust", action="store_true",
                   help="do not give each play of a session tree its own marker before its "
                   "first user turn (recycled plays then hit the previous play's cache)")


def parse_ratio_pair(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise SpecError(f"--start-ratio {text!r}: expected LO,HI like 0.25,0.75") from None
    return low, high


def _target_flags(t: argparse._ArgumentGroup) -> None:
    t.add_argument("--base-url", metavar="URL", help="server root, e.g. http://127.0.0.1:8000 "
                   "(required unless --sim)")
    t.add_argument("--model", metavar="NAME",
                   help="served model name (default: the only model the server serves)")
    t.add_argument("--sim", action="store_true",
                   help="start the embedded simulator (MTP, 2 draft tokens) on a free "
                   "loopback port and measure it; results say target: simulator")
    t.add_argument("--sim-args", default="", metavar='"FLAGS"',
                   help="extra `loadgen sim` flags for --sim, e.g. \"--step-fixed-ms 5\"")
    t.add_argument("--api-key", metavar="KEY",
                   help="bearer token (default: $OPENAI_API_KEY; never written to results)")
    t.add_argument("--header", action="append", default=[], type=_typed(parse_header),
                   metavar="K:V",
                   help="extra request header, repeatable, e.g. X-Session-Affinity:abc "
                   "(default: none)")


def _workload_flags(w: argparse._ArgumentGroup) -> None:
    w.add_argument("--conc", required=True, type=_typed(parse_conc), metavar="SPEC",
                   help="concurrency points: 4..512 (powers of two), 8,16,64, or A..B:+S")
    w.add_argument("--isl", type=int, metavar="TOKENS",
                   help="input length in tokens (chat template and BOS included) "
                   "(required, except for trace replay)")
    w.add_argument("--osl", type=int, metavar="TOKENS",
                   help="output length in tokens (max_tokens, with ignore_eos) "
                   "(required, except for trace replay)")
    w.add_argument("--range-ratio", type=float, default=1.0, metavar="R",
                   help="lengths uniform in [R*L, L] for --isl and --osl (1.0 = exact)")
    w.add_argument("--dataset", type=Path, metavar="FILE.jsonl",
                   help="prompts from a file instead of random ones: OpenAI messages or ShareGPT "
                   "conversations, or agentic traces to replay (see --dataset-format)")
    w.add_argument("--endpoint", choices=ENDPOINTS, default="completions",
                   help="completions: loadgen encodes the prompt; chat: the server does")
    w.add_argument("--encoder", choices=ENCODER_NAMES, default="dsv4",
                   help="prompt template loadgen applies")
    w.add_argument("--thinking", choices=THINKING_MODES, default="thinking",
                   help="DeepSeek-V4 thinking mode")
    w.add_argument("--reasoning-effort", choices=REASONING_EFFORTS, default=None,
                   help="DeepSeek-V4 reasoning effort (default: none)")
    w.add_argument("--prompts-per-conc", type=int, default=10, metavar="N",
                   help="measured requests per point = conc x N")
    w.add_argument("--warmup-per-conc", type=int, default=2, metavar="N",
                   help="unrecorded warmup requests per point = conc x N (they also open "
                   "the connections)")
    w.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop sending new requests this long into a point (default: no limit)")
    w.add_argument("--request-rate", type=float, default=None, metavar="REQ/S",
                   help="open loop at this arrival rate, capped by --conc (default: closed loop)")
    w.add_argument("--burstiness", type=float, default=1.0, metavar="SHAPE",
                   help="gamma shape of open-loop arrival gaps (1.0 = Poisson)")
    w.add_argument("--temperature", type=float, default=0.0, help="sampling temperature")
    w.add_argument("--seed", type=int, default=0, help="seed for prompts, lengths, arrivals")


def _results_flags(r: argparse._ArgumentGroup) -> None:
    r.add_argument("--results", type=Path, default=None, metavar="DIR",
                   help="output directory (default: ./results/<timestamp>)")
    r.add_argument("--num-gpus", type=int, default=None, metavar="N",
                   help="GPUs behind the server, for per-GPU throughput")
    r.add_argument("--spec-tokens", type=int, default=None, metavar="K",
                   help="draft tokens per step for the acceptance rate (default: from the "
                   "server's /metrics)")
    r.add_argument("--slo", type=_typed(parse_slos), default={}, metavar="M=T,...",
                   help="goodput SLOs, e.g. ttft=2s,tpot=50ms (metrics ttft, tpot, itl, e2el; "
                   "units us, ms, s; bare numbers are ms) (default: none: no goodput "
                   "figure)")
    r.add_argument("--percentiles", type=_typed(parse_percentiles), default=None,
                   metavar="P,...",
                   help="percentiles to report (default: 50,90,99,99.9; session runs add "
                   "75,95)")
    r.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="give up on a request after this long (default: no timeout)")
    r.add_argument("--max-error-rate", type=float, default=None, metavar="FRACTION",
                   help="exit non-zero when a point's failed share exceeds this "
                   "(results are written anyway) (default: 0.05; 0.10 for session runs, "
                   "InferenceX's agentic gate)")
    r.add_argument("--tokenizer", metavar="PATH",
                   help="tokenizer.json or model dir (default: official DeepSeek-V4)")
    r.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    r.add_argument("--metrics-port", type=_typed(parse_port), default=None, metavar="PORT",
                   help="serve live Prometheus metrics on 127.0.0.1:PORT during the run "
                   "(0 = any free port, printed) (default: off)")


def _spec(args: argparse.Namespace, env: Mapping[str, str]) -> RunSpec:
    if args.sim and args.base_url:
        raise SpecError("--sim and --base-url exclude each other: --sim measures the simulator")
    try:
        sim_args = tuple(shlex.split(args.sim_args))
    except ValueError as exc:
        raise SpecError(f"--sim-args {args.sim_args!r}: {exc}") from None
    taken = [a for a in sim_args if a.split("=")[0] in ("--host", "--port")]
    if taken:
        raise SpecError(f"--sim-args: {taken[0]} is chosen by loadgen (a free loopback port)")
    for flag, text, integer in (("--turns", args.turns, True),
                                ("--turn-tokens", args.turn_tokens, True),
                                ("--think-time", args.think_time, False)):
        if text is not None:
            parse_dist(text, what=flag, integer=integer)
    fmt = args.dataset_format
    if args.dataset is not None and fmt == "auto" and args.dataset.exists():
        fmt = detect_format(args.dataset)
    sessions = args.turns is not None or args.multi_turn or fmt in TRACE_FORMATS
    isl, osl = args.isl, args.osl
    if fmt in TRACE_FORMATS:  # lengths come from the trace; these only size the probe
        isl, osl = isl or 256, osl or 64
    if isl is None or osl is None:
        raise SpecError("--isl and --osl are required (except for trace replay)")
    percentiles = args.percentiles or (
        (50.0, 75.0, 90.0, 95.0, 99.0, 99.9) if sessions else (50.0, 90.0, 99.0, 99.9))
    headers = tuple(args.session_header or ("X-Session-ID",))
    return RunSpec(
        conc=args.conc, isl=isl, osl=osl, base_url=args.base_url, model=args.model,
        endpoint=args.endpoint, encoder=args.encoder, thinking=args.thinking,
        reasoning_effort=args.reasoning_effort, prompts_per_conc=args.prompts_per_conc,
        warmup_per_conc=args.warmup_per_conc, duration_s=args.duration,
        range_ratio=args.range_ratio, dataset=args.dataset, request_rate=args.request_rate,
        burstiness=args.burstiness, temperature=args.temperature, seed=args.seed,
        num_gpus=args.num_gpus, spec_tokens=args.spec_tokens, slos_ms=args.slo,
        percentiles=percentiles, request_timeout_s=args.request_timeout,
        max_error_rate=(args.max_error_rate if args.max_error_rate is not None
                        else 0.10 if sessions else 0.05),
        results_dir=args.results or default_results_dir(),
        tokenizer=args.tokenizer, api_key=args.api_key or env.get("OPENAI_API_KEY"),
        headers=tuple(args.header), sim=args.sim, sim_args=sim_args,
        progress=not args.no_progress, dataset_format=fmt, multi_turn=args.multi_turn,
        turns=args.turns, turn_tokens=args.turn_tokens, think_time=args.think_time,
        sessions_per_conc=args.sessions_per_conc,
        session_headers=() if headers == ("none",) else headers,
        start_ratio=args.start_ratio, idle_cap_system_s=args.idle_cap_system,
        idle_cap_tree_s=args.idle_cap_tree, cache_bust=not args.no_cache_bust,
    )


def spec_from_argv(argv: Sequence[str], env: Mapping[str, str] | None = None) -> RunSpec:
    return parse_run_args(argv, os.environ if env is None else env)[0]


def parse_run_args(argv: Sequence[str], env: Mapping[str, str]) -> tuple[RunSpec, int | None]:
    """(the run, the --metrics-port to serve live metrics on, if any)."""
    args = build_parser().parse_args(list(argv))
    return _spec(args, env), args.metrics_port


def parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise SpecError(f"--metrics-port {text!r}: need a port number 0..65535") from None
    if not 0 <= port <= 65535:
        raise SpecError(f"--metrics-port {port}: need 0..65535")
    return port


def _option_argv(name: str, value: Any) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, Mapping):  # slo
        return [flag, ",".join(f"{k}={v}" for k, v in value.items())]
    if isinstance(value, list | tuple):
        if name == "header":
            return [part for item in value for part in (flag, str(item))]
        return [flag, ",".join(str(v) for v in value)]
    return [flag, str(value)]


def spec_from_options(options: Mapping[str, Any]) -> RunSpec:
    """The sidecar's JSON options (flag names, `-` or `_`), validated like argv."""
    parser = build_parser()
    known = {action.dest for action in parser._actions} - {"help"}
    argv: list[str] = []
    for key, value in options.items():
        name = key.replace("-", "_")
        name = {"results_dir": "results", "headers": "header"}.get(name, name)
        if name not in known:
            raise SpecError(f"unknown option {key!r}; allowed: {', '.join(sorted(known))}")
        argv += _option_argv(name, value)
    return spec_from_argv(argv)
