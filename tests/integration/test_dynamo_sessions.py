"""Sessions through a real Dynamo 1.4.2 frontend (two aggregated mocker workers): the
session id loadgen sends keeps a conversation on one worker when the router's session
affinity is on, and the prefix-hit figures read the KV router's own series.

What 1.4.2 reads (its frontend binary's header names, then measured here): the session id
from `x-dynamo-session-id`, falling back to `x-session-id` and `session-id`; affinity only
with `--router-session-affinity-ttl-secs` (off by default). loadgen sends both names by
default (config/session.py). Each cluster starts in ~4 s; each run takes a few seconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.results.jsonl import read_jsonl
from tests.support.dynamo_cluster import DynamoCluster, dynamo_env, skip_dynamo, start

pytestmark = pytest.mark.dynamo

BLOCK = 64  # the mocker's KV block size (its default)


def cluster(python: str, work_dir: Path, *frontend_args: str) -> Iterator[DynamoCluster]:
    try:
        started = start(python, work_dir, workers=2, frontend_args=frontend_args)
    except dynamo_env.PrepareError as error:
        skip_dynamo(str(error))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def affinity(
    dynamo_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DynamoCluster]:
    """Random routing, so only session affinity keeps a conversation on one worker."""
    yield from cluster(
        dynamo_python,
        tmp_path_factory.mktemp("dynamo-affinity"),
        *("--router-mode", "random", "--router-session-affinity-ttl-secs", "600"),
    )


@pytest.fixture(scope="module")
def kv_router(
    dynamo_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DynamoCluster]:
    yield from cluster(dynamo_python, tmp_path_factory.mktemp("dynamo-kv"), "--router-mode", "kv")


def generated(cluster: DynamoCluster) -> list[float]:
    """Each worker's served generate requests (its system port's own counter)."""
    counts = []
    for url in cluster.worker_metrics:
        text = cluster.get(url).decode()
        counts.append(
            sum(
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "dynamo_component_requests_total"
                and sample.labels.get("dynamo_endpoint") == "generate"
            )
        )
    return counts


def session_run(
    cluster: DynamoCluster, results: Path, turns: int, *args: str
) -> tuple[dict[str, Any], str]:
    """The point and the console's stdout."""
    done = cluster.run_loadgen(
        [
            *("--endpoint", "chat", "--isl", "256", "--osl", "8", "--turns", str(turns)),
            *("--turn-tokens", "64", "--warmup-per-conc", "0", "--results", str(results)),
            *args,
        ],
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    point: dict[str, Any] = orjson.loads(next(results.glob("conc_*.json")).read_bytes())
    assert point["completed"] == point["num_prompts"] and point["failed"] == 0
    return point, done.stdout


@pytest.mark.parametrize("headers", [(), ("X-Dynamo-Session-ID",), ("X-Session-ID",)])
def test_a_conversation_stays_on_one_worker(
    affinity: DynamoCluster, tmp_path: Path, headers: tuple[str, ...]
) -> None:
    """One conversation of 12 turns: every turn on the same worker, with loadgen's default
    headers and with each name alone (1.4.2 reads both)."""
    before = generated(affinity)
    named = [arg for name in headers for arg in ("--session-header", name)]
    session_run(affinity, tmp_path / "r", 12, "--conc", "1", "--sessions-per-conc", "1", *named)
    served = sorted(b - a for a, b in zip(before, generated(affinity), strict=True))
    assert served[-1] >= 12 and served[0] <= 1  # (+1: loadgen's preflight, no session)


def test_without_a_session_id_the_turns_spread(affinity: DynamoCluster, tmp_path: Path) -> None:
    """The same conversation with no session header: random routing spreads its turns
    (all 12 on one of two workers by chance: 2 in 4096), so the header is what held it."""
    before = generated(affinity)
    session_run(
        affinity,
        tmp_path / "r",
        12,
        "--conc",
        "1",
        "--sessions-per-conc",
        "1",
        "--session-header",
        "none",
    )
    served = [b - a for a, b in zip(before, generated(affinity), strict=True)]
    assert min(served) >= 1 and sum(served) >= 12


def test_prefix_hits_read_the_kv_router(kv_router: DynamoCluster, tmp_path: Path) -> None:
    """Four conversations of four turns: the router's mean predicted hit rate per routed
    request is the share of full blocks each turn's history (previous prompt and reply)
    fills; the mocker reports no cached tokens, so the frontend's figure is null, said."""
    point, stdout = session_run(
        kv_router,
        tmp_path / "r",
        4,
        "--conc",
        "2",
        "--sessions-per-conc",
        "2",
        *kv_router.role_args(),
    )
    records = read_jsonl(next((tmp_path / "r").glob("requests_conc_*.jsonl")))
    by_session: dict[str, list[Any]] = {}
    for record in records:
        by_session.setdefault(record.session_id or "", []).append(record)
    expected = []
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn_index or 0)
        expected.append(0.0)
        for previous, turn in itertools.pairwise(turns):
            history = (previous.prompt_tokens or 0) + previous.output_tokens
            expected.append((history // BLOCK) / -(-(turn.prompt_tokens or 0) // BLOCK))
    assert point["router_routed_requests"] == len(records) == 16
    # the workers were fresh at preflight (no vllm:* yet): read as vLLM, said as assumed
    server = orjson.loads((tmp_path / "r" / "run.json").read_bytes())["server"]
    assert server["engine"] == "vllm" and "no engine's yet" in server["engine_reason"]
    assert point["router_kv_hit_rate"] == pytest.approx(sum(expected) / len(expected), abs=0.02)
    assert point["router_kv_hit_rate"] > 0.5
    # the session table's "hit router" column (hit server: no engine prefix counters)
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if "hit router" in line)
    column = lines[head].split("  ").index("hit router")
    row = [cell.strip() for cell in lines[head + 2].split("  ") if cell.strip()]
    assert row[column] == f"{100 * point['router_kv_hit_rate']:.1f}%"
    assert point["frontend_cached_tokens"] is None and point["frontend_prefix_hit_rate"] is None
    assert "reported cached tokens for 0 of the 16" in point["frontend_prefix_null_reason"]
