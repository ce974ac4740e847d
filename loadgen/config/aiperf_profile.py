"""`loadgen profile --scenario inferencex-agentx-mvp ...`: the AIPerf command line InferenceX
types for its AgentX lanes (benchmarks/benchmark_lib.sh, `build_replay_cmd`), each flag
meaning what it means to AIPerf, translated into the typed values of loadgen's own options
(so one validation applies) and the scenario's locked rules applied on top.

Locked by the scenario (AIPerf's inferencex-agentx-mvp plugin): streaming and ignore_eos
(loadgen always does both), the trace's recorded delays honoured, the 10 s whole-system
idle cap, a first-turn prefix cache bust per play, and a measured phase of at least 900 s
unless `--unsafe-override`, which then marks every result `submission_valid: false`.
A flag accepted but without effect on loadgen is said once, as for vLLM's flags.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.config.build_spec import check_machine, settings_from_values
from loadgen.config.fields import default_of
from loadgen.config.parsers import SpecError
from loadgen.config.spec import RunSpec
from loadgen.config.table import argv_values
from loadgen.config.workload import WorkloadSpec
from loadgen.tokenizer import TokenizerError, load_tokenizer, verify_dsv4_special_tokens

SCENARIO = "inferencex-agentx-mvp"
MIN_DURATION_S = 900.0
IDLE_CAP_SYSTEM_S = 10.0
GROUP = "AIPerf profile (InferenceX build_replay_cmd)"
ENDPOINT_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
# AIPerf's loader names whose Hub dataset does not follow the naming rule (_public_repo)
LOADER_EXCEPTIONS = {
    "semianalysis_cc_traces_weka_with_subagents": "semianalysisai/cc-traces-weka-061526",
    "semianalysis_cc_traces_weka_with_subagents_256k": "semianalysisai/cc-traces-weka-061526-256k",
}
LOADER_PREFIX = "semianalysis_cc_traces_weka"
IGNORED = {
    "stats_interval": "loadgen's progress line is live; no periodic stats block",
    "warmup_requests_per_lane": "loadgen primes each lane with one request (its start "
    "turn's prefix, max_tokens 1), then measures",
    "warmup_grace_period": "primers run to their end (bounded by --stream-idle-timeout)",
    "use_server_token_count": "loadgen counts output tokens from the server's usage "
    "already, and input tokens itself (exact, from the trace)",
    "num_dataset_entries": "every trace of the dataset is loaded",
    "no_gpu_telemetry": "loadgen collects no GPU telemetry",
    "tokenizer_trust_remote_code": "loadgen runs no model code",
    "use_dynamo_conv_aware_routing": "loadgen sends each session's id in X-Session-ID "
    "and X-Dynamo-Session-ID (Dynamo's router routes by it when started with "
    "--router-session-affinity-ttl-secs), not nvext.session_control",
    "dynamo_session_timeout_seconds": "loadgen opens no router session lease",
}
FLAG_IGNORED = (
    "use_server_token_count",
    "no_gpu_telemetry",
    "tokenizer_trust_remote_code",
    "use_dynamo_conv_aware_routing",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen profile",
        description="AIPerf's `profile` command line, as InferenceX "
        "runs it for AgentX trace replay; the results are loadgen's, plus AIPerf's artifact "
        "files in --output-artifact-dir (docs/sessions.md, 'InferenceX AgentX').",
    )
    g = p.add_argument_group(GROUP)
    g.add_argument("--scenario", required=True, choices=(SCENARIO,))
    g.add_argument("--url", required=True, help="the server (http:// is added when missing)")
    g.add_argument("--endpoint", default="/v1/chat/completions", choices=tuple(ENDPOINT_PATHS))
    g.add_argument("--endpoint-type", default="chat", choices=("chat", "completions"))
    g.add_argument("--streaming", action="store_true", help="accepted: locked on")
    g.add_argument("--model", required=True)
    g.add_argument("--tokenizer", default=None, help="= loadgen --tokenizer")
    g.add_argument("--concurrency", type=int, required=True, help="= --conc")
    g.add_argument(
        "--benchmark-duration",
        type=float,
        required=True,
        metavar="SECONDS",
        help=f"= --duration; at least {MIN_DURATION_S:g} unless --unsafe-override",
    )
    g.add_argument("--random-seed", type=int, default=0, help="= --seed")
    g.add_argument(
        "--failed-request-threshold",
        type=float,
        default=None,
        metavar="FRACTION",
        help="= --max-error-rate (checked when the point ends, not live)",
    )
    g.add_argument("--trajectory-start-min-ratio", type=float, default=0.25)
    g.add_argument("--trajectory-start-max-ratio", type=float, default=0.75)
    g.add_argument(
        "--trace-idle-gap-cap-seconds", type=float, default=300.0, help="= --idle-cap-tree"
    )
    g.add_argument(
        "--max-context-length",
        type=int,
        default=None,
        metavar="TOKENS",
        help="the server's context: requests at or over it count as context "
        "overflow in submission_valid",
    )
    g.add_argument(
        "--slice-duration",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="interval of the server series in server_metrics_export.json",
    )
    g.add_argument(
        "--server-metrics",
        nargs="+",
        action="extend",
        default=[],
        metavar="URL",
        help="= --server-metrics, one or more URLs",
    )
    g.add_argument(
        "--output-artifact-dir",
        type=Path,
        required=True,
        metavar="DIR",
        help="AIPerf's artifacts here (= --aiperf-artifacts); loadgen's own "
        "result files in DIR/loadgen",
    )
    g.add_argument(
        "--unsafe-override",
        action="store_true",
        help=f"allow a run shorter than {MIN_DURATION_S:g} s; every result is then "
        "submission_valid: false",
    )
    g.add_argument(
        "--public-dataset",
        required=True,
        metavar="NAME|ORG/NAME|PATH",
        help="an AIPerf loader name or Hub dataset id, read from the Hugging Face "
        "cache (HF_HUB_CACHE, HF_HOME), or a local trace file or directory",
    )
    g.add_argument(
        "--extra-inputs",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY:VALUE|JSON",
        help="extra request-body fields (= --extra-body)",
    )
    for name in IGNORED:
        flag = "--" + name.replace("_", "-")
        g.add_argument(
            flag,
            **({"action": "store_true"} if name in FLAG_IGNORED else {"default": None}),
            help="accepted and ignored",
        )
    return p


def hub_cache() -> Path:
    env = os.environ
    if env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env.get("HF_HUB_CACHE") or env["HUGGINGFACE_HUB_CACHE"])
    home = env.get("HF_HOME")
    return Path(home) / "hub" if home else Path.home() / ".cache" / "huggingface" / "hub"


def dataset_repo(name: str) -> str:
    """A loader name's Hub dataset (AIPerf's naming), or the id itself."""
    if name in LOADER_EXCEPTIONS:
        return LOADER_EXCEPTIONS[name]
    if name.startswith(LOADER_PREFIX):
        return "semianalysisai/cc-traces-weka" + name[len(LOADER_PREFIX) :].replace("_", "-")
    return name


def resolve_dataset(name: str) -> Path:
    """A local path as it is; else the newest cached snapshot of the Hub dataset: its one
    .jsonl file, or the directory of its .json traces."""
    local = Path(name).expanduser()
    if local.exists():
        return local
    repo = dataset_repo(name)
    if repo.count("/") != 1:
        raise SpecError(
            f"--public-dataset {name}: no such file, and not a loader name or "
            "Hub dataset id (org/name)"
        )
    snapshots = hub_cache() / f"datasets--{repo.replace('/', '--')}" / "snapshots"
    found = sorted(
        (p for p in snapshots.glob("*") if p.is_dir()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for snapshot in found:
        jsonl = sorted(snapshot.rglob("*.jsonl"))
        if len(jsonl) == 1:
            return jsonl[0]
        if any(snapshot.glob("*.json")):
            return snapshot
    raise SpecError(
        f"--public-dataset {name}: {repo} is not in the Hugging Face cache "
        f"({snapshots}); fetch it first: hf download --repo-type dataset {repo}"
    )


def parse_extra_inputs(items: Sequence[str]) -> dict[str, Any]:
    """AIPerf's --extra-inputs: a JSON object, or KEY:VALUE pairs (VALUE read as JSON when
    it is, e.g. true or 0.5, else kept as text)."""
    body: dict[str, Any] = {}
    for item in items:
        if item.lstrip().startswith("{"):
            try:
                parsed = json.loads(item)
            except json.JSONDecodeError as exc:
                raise SpecError(f"--extra-inputs {item!r}: not a JSON object ({exc})") from None
            body.update(parsed)
            continue
        key, sep, text = item.partition(":")
        if not sep or not key:
            raise SpecError(f"--extra-inputs {item!r}: expected KEY:VALUE or a JSON object")
        try:
            body[key] = json.loads(text)
        except json.JSONDecodeError:
            body[key] = text
    return body


def _url(text: str) -> str:
    return text if text.startswith(("http://", "https://")) else f"http://{text}"


def _values(args: argparse.Namespace) -> dict[str, Any]:
    """The run options (dest -> typed value) the AIPerf flags stand for, the scenario's
    locked ones included."""
    endpoint = ENDPOINT_PATHS[args.endpoint]
    if endpoint != args.endpoint_type:
        raise SpecError(
            f"--endpoint {args.endpoint} and --endpoint-type {args.endpoint_type} "
            "name different APIs: give matching ones"
        )
    if args.benchmark_duration < MIN_DURATION_S and not args.unsafe_override:
        raise SpecError(
            f"--benchmark-duration {args.benchmark_duration:g}: the {SCENARIO} "
            f"scenario needs at least {MIN_DURATION_S:g} s (or --unsafe-override, "
            "which marks the results submission_valid: false)"
        )
    values: dict[str, Any] = {
        "base_url": _url(args.url),
        "endpoint": endpoint,
        "model": args.model,
        "conc": (args.concurrency,),
        "duration": args.benchmark_duration,
        "seed": args.random_seed,
        "dataset": resolve_dataset(args.public_dataset),
        "dataset_format": "weka",
        "start_ratio": (args.trajectory_start_min_ratio, args.trajectory_start_max_ratio),
        "idle_cap_tree": args.trace_idle_gap_cap_seconds,
        "idle_cap_system": IDLE_CAP_SYSTEM_S,  # locked
        "aiperf_artifacts": args.output_artifact_dir,
        "results": args.output_artifact_dir / "loadgen",
        "server_metrics": list(args.server_metrics),
    }
    if args.tokenizer:
        values.update(tokenizer=args.tokenizer, encoder=_encoder(args.tokenizer))
    if args.failed_request_threshold is not None:
        values["max_error_rate"] = args.failed_request_threshold
    extra = parse_extra_inputs(args.extra_inputs)
    if extra.pop("ignore_eos", True) is not True:
        raise SpecError(f"--extra-inputs ignore_eos: the {SCENARIO} scenario locks it on")
    if extra:
        values["extra_body"] = extra
    return values


def _encoder(tokenizer: str) -> str:
    """dsv4 for DeepSeek-V4's tokenizer (loadgen counts the prompt as the server renders
    it), raw for any other: AIPerf sends chat messages as they are and counts them with
    --tokenizer, and a --tokenizer of another model must run as typed."""
    loaded = load_tokenizer(tokenizer, check_dsv4=False)  # unloadable: its one error line
    try:
        verify_dsv4_special_tokens(loaded)
    except TokenizerError:
        return "raw"
    return "dsv4"


def _notes(args: argparse.Namespace, encoder: str) -> tuple[str, ...]:
    given = [name for name in IGNORED if getattr(args, name) not in (None, False)]
    notes = [
        f"--{name.replace('_', '-')} is accepted and ignored: {IGNORED[name]}" for name in given
    ]
    if encoder == "raw":
        notes.append(
            f"--tokenizer {args.tokenizer} is not DeepSeek-V4's: messages are sent "
            "and counted as they are (loadgen --encoder raw), as AIPerf does"
        )
    return tuple(notes)


def profile_spec(
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, extra: Sequence[str] = ()
) -> RunSpec:
    """The RunSpec of a `loadgen profile` command line (`extra`: loadgen flags a test
    adds, e.g. --no-progress)."""
    args = build_parser().parse_args(list(argv))
    values = {**_values(args), **argv_values(extra)}
    settings = settings_from_values(values, os.environ if env is None else env)
    encoder = settings.get("encoder", default_of(WorkloadSpec, "encoder"))
    settings.update(
        scenario=SCENARIO,
        unsafe_override=args.unsafe_override,
        max_context_length=args.max_context_length,
        series_interval_s=args.slice_duration,
        ignored_flags=(*settings.get("ignored_flags", ()), *_notes(args, encoder)),
    )
    spec = RunSpec.flat(**settings)
    check_machine(spec)
    return spec
