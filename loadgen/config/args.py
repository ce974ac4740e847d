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

from loadgen.config.spec import (
    ENCODER_NAMES,
    ENDPOINTS,
    HTTP_CLIENTS,
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
    _results_flags(p.add_argument_group("results"))
    return p


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
    t.add_argument("--http-client", choices=HTTP_CLIENTS, default="native",
                   help="client of the measured streams: native (loadgen's own HTTP/1.1 "
                   "reader on uvloop + llhttp, ~half the CPU per chunk) or aiohttp (the "
                   "previous path, kept for comparison); preflight and /metrics scrapes "
                   "always use aiohttp")


def _workload_flags(w: argparse._ArgumentGroup) -> None:
    w.add_argument("--conc", required=True, type=_typed(parse_conc), metavar="SPEC",
                   help="concurrency points: 4..512 (powers of two), 8,16,64, or A..B:+S")
    w.add_argument("--isl", required=True, type=int, metavar="TOKENS",
                   help="input length in tokens (chat template and BOS included)")
    w.add_argument("--osl", required=True, type=int, metavar="TOKENS",
                   help="output length in tokens (max_tokens, with ignore_eos)")
    w.add_argument("--range-ratio", type=float, default=1.0, metavar="R",
                   help="lengths uniform in [R*L, L] for --isl and --osl (1.0 = exact)")
    w.add_argument("--dataset", type=Path, metavar="FILE.jsonl",
                   help="one OpenAI messages list per line instead of random prompts")
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
    r.add_argument("--percentiles", type=_typed(parse_percentiles),
                   default=(50.0, 90.0, 99.0, 99.9), metavar="P,...",
                   help="percentiles to report, e.g. 50,90,99,99.9")
    r.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="give up on a request after this long (default: no timeout)")
    r.add_argument("--max-error-rate", type=float, default=0.05, metavar="FRACTION",
                   help="exit non-zero when a point's failed share exceeds this "
                   "(results are written anyway)")
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
    return RunSpec(
        conc=args.conc, isl=args.isl, osl=args.osl, base_url=args.base_url, model=args.model,
        endpoint=args.endpoint, encoder=args.encoder, thinking=args.thinking,
        reasoning_effort=args.reasoning_effort, prompts_per_conc=args.prompts_per_conc,
        warmup_per_conc=args.warmup_per_conc, duration_s=args.duration,
        range_ratio=args.range_ratio, dataset=args.dataset, request_rate=args.request_rate,
        burstiness=args.burstiness, temperature=args.temperature, seed=args.seed,
        num_gpus=args.num_gpus, spec_tokens=args.spec_tokens, slos_ms=args.slo,
        percentiles=args.percentiles, request_timeout_s=args.request_timeout,
        max_error_rate=args.max_error_rate, results_dir=args.results or default_results_dir(),
        tokenizer=args.tokenizer, api_key=args.api_key or env.get("OPENAI_API_KEY"),
        headers=tuple(args.header), sim=args.sim, sim_args=sim_args,
        progress=not args.no_progress, http_client=args.http_client,
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
