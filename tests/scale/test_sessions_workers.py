"""Trace replay with --workers 2 against the real simulator (prefix caching on, block size
equal to the trace's): the same requests, sessions, trees and hit rates as one process,
each tree (and its subagents) played by one worker."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.args import spec_from_argv
from loadgen.config.parsers import SpecError
from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.run.sweep import SweepOptions
from loadgen.scale.sweep import run_sweep
from tests.support.paths import TRACES
from tests.support.session_figures import SAME, generated_trace

SIM = (
    "--enable-prompt-tokens-details --block-size 64 --max-num-batched-tokens 65536 "
    "--spec-tokens 0 --step-fixed-ms 1 --spin-us 0"
)


async def replay(
    out: Path, trace: Path, tokenizer: Tokenizer, workers: int
) -> tuple[dict[str, Any], list[RequestRecord]]:
    spec = spec_from_argv(
        [
            "--sim",
            "--sim-args",
            SIM,
            "--results",
            str(out),
            "--no-progress",
            "--seed",
            "9",
            "--conc",
            "4",
            "--dataset",
            str(trace),
            "--workers",
            str(workers),
            "--idle-cap-tree",
            "1",
        ]
    )
    assert (await run_sweep(spec, SweepOptions(tokenizer=tokenizer))).exit_code == 0
    return (
        orjson.loads((out / "conc_4.json").read_bytes()),
        read_jsonl(out / "requests_conc_4.jsonl"),
    )


async def test_two_workers_replay_what_one_process_does(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    trace = generated_trace(tmp_path / "gen.jsonl")
    one, one_records = await replay(tmp_path / "one", trace, tokenizer, 1)
    two, two_records = await replay(tmp_path / "two", trace, tokenizer, 2)
    assert one["replay_primers"] > 0 and one["subagent_session_ids"] > 0
    assert {k: one[k] for k in SAME} == {k: two[k] for k in SAME}
    assert one["server_prefix_cache_hits"] == one["theoretical_cached_tokens"] > 0
    # each request once, with its own index; each tree on one worker (index mod 2)
    assert len({r.request_id for r in two_records}) == len(two_records) == two["completed"]
    workers_of: dict[str, set[int]] = defaultdict(set)
    for record in two_records:
        assert record.tree_id is not None
        workers_of[record.tree_id.split(":", 1)[1]].add(record.request_id % 2)
    assert all(len(found) == 1 for found in workers_of.values())
    assert {w for found in workers_of.values() for w in found} == {0, 1}

    # the same turns were sent: (trace, session, turn) -> prompt length
    def turns(records: list[RequestRecord]) -> dict[tuple[str, int], int]:
        return {
            ((r.session_id or "").split(":", 1)[1], r.turn_index or 0): r.input_len for r in records
        }

    assert turns(one_records) == turns(two_records)


def test_refused_where_plays_would_share_a_cache_across_processes(tmp_path: Path) -> None:
    mooncake = TRACES / "mooncake_small.jsonl"
    with pytest.raises(SpecError, match="Mooncake"):
        spec_from_argv(["--sim", "--conc", "2", "--dataset", str(mooncake), "--workers", "2"])
    weka = mooncake.with_name("agentic_small.jsonl")
    with pytest.raises(SpecError, match="--no-cache-bust"):
        spec_from_argv(
            ["--sim", "--conc", "2", "--dataset", str(weka), "--workers", "2", "--no-cache-bust"]
        )
    with pytest.raises(SpecError, match="--shard with a Mooncake trace"):
        spec_from_argv(["--sim", "--conc", "2", "--dataset", str(mooncake), "--shard", "0/2"])
    with pytest.raises(SpecError, match="--shard with --no-cache-bust"):
        spec_from_argv(
            ["--sim", "--conc", "2", "--dataset", str(weka), "--shard", "0/2", "--no-cache-bust"]
        )
