"""End-to-end session runs against the real simulator with prefix caching on.

Trace replay must reproduce the trace (request count, each request's `in`/`out`, the
spawn/join order) and its theoretical prefix-hit tokens must equal what the simulator's
block cache hit (a large pool, the trace's block size, one prefill chunk per prompt)
and what the simulator reported per request in `cached_tokens`.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.args import spec_from_argv
from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.workload.sessions import Session
from loadgen.workload.tracegen import TraceShape, generate_traces
from loadgen.workload.traces import load_weka
from tests.support.paths import TRACES

CACHE_SIM = (
    "--enable-prefix-caching --enable-prompt-tokens-details --block-size 64 "
    "--max-num-batched-tokens 65536 --spec-tokens 0 --step-fixed-ms 1 "
    "--prefill-token-us 2 --decode-token-us 20 --spin-us 0"
)


async def run(
    tmp_path: Path, tokenizer: Tokenizer, *args: str, sim_args: str = CACHE_SIM
) -> tuple[dict[str, Any], list[RequestRecord]]:
    spec = spec_from_argv(
        [
            "--sim",
            "--sim-args",
            sim_args,
            "--results",
            str(tmp_path),
            "--no-progress",
            "--seed",
            "3",
            *args,
        ]
    )
    outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    assert outcome.exit_code == 0
    conc = spec.load.conc[0]
    result = orjson.loads((tmp_path / f"conc_{conc}.json").read_bytes())
    return result, read_jsonl(tmp_path / f"requests_conc_{conc}.jsonl")


def expected_turns(session: Session, prefix: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(session id suffix, turn) -> (in, out) for a session and all its subagents."""
    found = {}
    for number, turn in enumerate(session.turns):
        found[(prefix + (f"::{session.name}" if session.name else ""), number)] = (
            turn.input_len,
            turn.max_tokens,
        )
        for child in turn.spawns:
            found.update(expected_turns(child, prefix))
    return found


def check_dependency_order(
    session: Session, tree_id: str, by_turn: dict[tuple[str, int], RequestRecord]
) -> None:
    """No subagent before the turn that spawns it ends; no next parent turn before the
    subagents it waits for have ended."""
    own = tree_id + (f"::{session.name}" if session.name else "")
    for number, turn in enumerate(session.turns):
        spawner = by_turn[(own, number)]
        for child in turn.spawns:
            child_id = f"{tree_id}::{child.name}"
            first = by_turn[(child_id, 0)]
            assert first.start_ns >= spawner.end_ns, f"{child_id} started before its spawn"
            if number + 1 < len(session.turns):
                child_end = max(
                    r.end_ns
                    for (sid, _), r in by_turn.items()
                    if sid == child_id or sid.startswith(child_id + ".")
                )
                assert by_turn[(own, number + 1)].start_ns >= child_end, "joined too early"
            check_dependency_order(child, tree_id, by_turn)


def check_replay(trace_file: Path, result: dict[str, Any], records: list[RequestRecord]) -> None:
    trees = load_weka(trace_file)
    assert result["failed"] == 0
    assert len(records) == sum(tree.request_count() for tree in trees)
    by_turn = {}
    for record in records:
        assert record.session_id is not None and record.turn_index is not None
        by_turn[(record.session_id, record.turn_index)] = record
    assert len(by_turn) == len(records)  # each (session, turn) once
    for tree in trees:
        [tree_id] = {
            r.tree_id for r in records if r.tree_id and r.tree_id.endswith(":" + tree.tree_id)
        }
        for (session_id, turn), (tokens_in, tokens_out) in expected_turns(
            tree.root, tree_id
        ).items():
            record = by_turn[(session_id, turn)]
            assert (record.input_len, record.prompt_tokens) == (tokens_in, tokens_in)
            assert (record.max_tokens, record.completion_tokens) == (tokens_out, tokens_out)
        check_dependency_order(tree.root, tree_id, by_turn)
    # the trace's theoretical hits, the server's counters and the per-request usage agree
    assert result["theoretical_cached_tokens"] > 0
    assert result["theoretical_cached_tokens"] == result["server_prefix_cache_hits"]
    assert result["client_cached_tokens"] == result["server_prefix_cache_hits"]
    assert result["server_prefix_cache_queries"] == result["prompt_tokens_sent"]
    assert result["theoretical_prefix_hit_rate"] == result["server_prefix_hit_rate"]


async def test_handwritten_trace_with_nested_subagents(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    trace = TRACES / "agentic_small.jsonl"
    result, records = await run(
        tmp_path, tokenizer, "--conc", "2", "--dataset", str(trace), "--start-ratio", "0,0"
    )
    check_replay(trace, result, records)
    assert result["replay_subagents_started"] == 3
    assert result["subagent_session_ids"] == 3
    assert result["replay_max_live_trees"] == 2
    # prefix hits make prefill cheaper: a turn whose prefix is cached starts sooner
    assert result["server_prefix_hit_rate"] > 0.5


async def test_generated_traces_chat_endpoint(tmp_path: Path, tokenizer: Tokenizer) -> None:
    shape = TraceShape(
        requests=(3, 6),
        system_tokens=700,
        first_user_tokens=(30, 200),
        tool_result_tokens=(10, 250),
        output_tokens=(3, 12),
        think_time_s=0.01,
        api_time_s=0.05,
        subagent_prob=0.4,
        fanout=(1, 3),
        subagent_requests=(1, 3),
    )
    trace = tmp_path / "gen.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in generate_traces(5, 11, shape)))
    result, records = await run(
        tmp_path / "out",
        tokenizer,
        "--conc",
        "3",
        "--dataset",
        str(trace),
        "--start-ratio",
        "0,0",
        "--endpoint",
        "chat",
    )
    check_replay(trace, result, records)


@pytest.mark.exclusive
async def test_mooncake_replay_at_timestamps(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """Subject, besides what is sent: the replay's pacing. Sends due 30 ms apart are
    checked to 5 ms, so the loop must be on time: run alone, the offsets printed."""
    trace = TRACES / "mooncake_small.jsonl"
    sim = CACHE_SIM.replace("--block-size 64", "--block-size 512")
    result, records = await run(
        tmp_path, tokenizer, "--conc", "2", "--dataset", str(trace), sim_args=sim
    )
    assert [
        (r.input_len, r.completion_tokens) for r in sorted(records, key=lambda r: r.start_ns)
    ] == [(1200, 8), (1100, 6), (700, 5), (1536, 7)]
    starts = sorted(r.scheduled_ns for r in records)
    offsets_ms = [(s - starts[0]) / 1e6 for s in starts]
    print(f"mooncake replay: due at {', '.join(f'{ms:.1f}' for ms in offsets_ms)} ms")
    # due at the recorded offsets (scheduled_ns is the intended time, not the send)
    assert offsets_ms == pytest.approx([0, 30, 60, 90], abs=5)
    # request 2 shares blocks 0-1 (1024 tokens) with request 1; request 4 too
    assert result["theoretical_cached_tokens"] == 2048 == result["server_prefix_cache_hits"]


async def test_a_mooncake_arrival_after_the_duration_is_not_waited_for(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """Five records in the first 120 ms, the sixth 60 s later, --duration 2: the point
    waited the 60 s for it (round 4: 123 s for a --duration 8 point) and then did not send
    it, and no count said so. Now the wait ends with the point and the record is counted
    unsent. The subject is timing: the bound asserted is the sixth record's own time."""
    gap_s = 60.0
    trace = tmp_path / "gap.jsonl"
    lines = [(ms, 600 + ms, 4) for ms in (0, 30, 60, 90, 120)] + [(gap_s * 1000, 700, 4)]
    trace.write_bytes(
        b"".join(
            orjson.dumps(
                {"timestamp": ms, "input_length": isl, "output_length": osl, "hash_ids": [n]}
            )
            + b"\n"
            for n, (ms, isl, osl) in enumerate(lines)
        )
    )
    sim = CACHE_SIM.replace("--block-size 64", "--block-size 512")
    results = tmp_path / "results"
    result, records = await run(
        results,
        tokenizer,
        "--conc",
        "1",
        "--dataset",
        str(trace),
        "--duration",
        "2",
        sim_args=sim,
    )
    run_file = orjson.loads((results / "run.json").read_bytes())
    # the whole run (simulator start and preflight included) ended before the sixth was due
    assert run_file["finished_unix"] - run_file["started_unix"] < gap_s
    # every record due within the point was sent and measured; the sixth is counted unsent
    assert sorted(r.input_len for r in records) == [600, 630, 660, 690, 720]
    assert all(r.ok for r in records) and result["completed"] == 5
    assert result["replay_arrivals_unsent"] == 1


async def test_a_turn_due_after_the_duration_is_not_waited_for(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    """A think time of 60 s (no system idle cap to cut it) and --duration 2: the lane
    waited the 60 s for the second turn and then did not send it. Now the wait ends with
    the point. The subject is timing: the bound asserted is the think time itself."""
    think_s = 60.0
    results = tmp_path / "results"
    result, records = await run(
        results,
        tokenizer,
        "--conc",
        "1",
        "--isl",
        "64",
        "--osl",
        "4",
        "--turns",
        "2",
        "--think-time",
        f"{think_s:g}",
        "--idle-cap-system",
        "1000",
        "--duration",
        "2",
        sim_args=CACHE_SIM.replace("--block-size 64", ""),
    )
    run_file = orjson.loads((results / "run.json").read_bytes())
    assert run_file["finished_unix"] - run_file["started_unix"] < think_s
    assert [r.turn_index for r in records] == [0] and records[0].ok  # the first turn only
    assert result["replay_trees_started"] == 1 and result["replay_trees_completed"] == 0


async def test_start_offsets_send_primers_that_warm_the_cache(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    trace = TRACES / "agentic_small.jsonl"
    result, records = await run(
        tmp_path, tokenizer, "--conc", "2", "--dataset", str(trace), "--start-ratio", "0.5,0.5"
    )
    assert result["replay_primers"] == 2 and result["replay_primers_failed"] == 0
    roots: defaultdict[str | None, list[int]] = defaultdict(list)
    for record in records:
        if record.session_id == record.tree_id:
            assert record.turn_index is not None
            roots[record.tree_id].append(record.turn_index)
    # both traces have 3 root turns: each lane starts at turn int(0.5 * 3) = 1
    assert sorted(min(turns) for turns in roots.values()) == [1, 1]
    first = [r for r in records if r.session_id == r.tree_id and r.turn_index == 1]
    assert all((r.cached_tokens or 0) > 0 for r in first)  # the primer sent their prefix


async def test_synthetic_multi_turn_sessions_hit_the_prefix_cache(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    result, records = await run(
        tmp_path,
        tokenizer,
        "--conc",
        "2",
        "--isl",
        "300",
        "--osl",
        "16",
        "--turns",
        "3",
        "--turn-tokens",
        "50..80",
        "--think-time",
        "0.02",
        "--session-header",
        "X-Dynamo-Session-ID",
        sim_args=CACHE_SIM.replace("--block-size 64", ""),
    )
    assert result["completed"] == 4 * 3 and result["session_ids"] == 4
    assert result["prompt_tokens_mismatches"] == 0
    turns: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in records:
        turns[record.session_id or ""].append(record)
    for session in turns.values():
        session.sort(key=lambda r: r.turn_index or 0)
        assert [r.turn_index for r in session] == [0, 1, 2]
        assert session[0].input_len == 300
        # each turn resends the history: its prompt grows by the reply and the new message
        assert session[0].input_len < session[1].input_len < session[2].input_len
        assert all((r.cached_tokens or 0) > 0 for r in session[1:])
        assert all(b.start_ns - a.end_ns >= 20_000_000 for a, b in itertools.pairwise(session))
    assert result["client_cached_tokens"] == result["server_prefix_cache_hits"] > 0


async def test_plain_sim_caches_prefixes_by_default(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """`loadgen --sim --dataset` with no cache flag: the simulator caches as vLLM >= 0.8 does
    (block 16), so the server hit rate is above zero; cached_tokens stays opt-in."""
    trace = TRACES / "agentic_small.jsonl"
    result, _ = await run(
        tmp_path,
        tokenizer,
        "--conc",
        "2",
        "--dataset",
        str(trace),
        sim_args="--spec-tokens 0 --step-fixed-ms 1 --spin-us 0",
    )
    assert result["server_prefix_cache_hits"] > 0
    assert result["server_prefix_hit_rate"] > 0.5
    assert result["client_prefix_hit_rate"] is None  # no --enable-prompt-tokens-details
