"""End-to-end: with token_ids and continuous usage unavailable, loadgen counts logprobs.

The simulator's --reject-params answers 400 to requests using vLLM's return_token_ids or
continuous_usage_stats (as a server without those extensions would), so preflight falls
back to its third option set (logprobs) and every chunk is counted from logprobs entries.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.records import TokenSource
from loadgen.results.jsonl import read_jsonl
from loadgen.run.ids import x_request_id
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.tokenizer import load_tokenizer

FAST_SIM = (
    "--step-fixed-ms",
    "2",
    "--decode-token-us",
    "20",
    "--prefill-token-us",
    "2",
    "--spin-us",
    "0",
    "--seed",
    "7",
    "--reject-params",
    "return_token_ids,continuous_usage_stats",
)


async def test_tokens_counted_from_logprobs_when_ids_and_usage_are_rejected(tmp_path: Path) -> None:
    tokenizer: Tokenizer = load_tokenizer()
    trace = tmp_path / "trace.jsonl"
    spec = RunSpec.flat(
        conc=(2,),
        isl=64,
        osl=32,
        prompts_per_conc=3,
        warmup_per_conc=1,
        sim=True,
        sim_args=(*FAST_SIM, "--trace", str(trace)),
        results_dir=tmp_path / "results",
        progress=False,
    )
    outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    assert outcome.exit_code == 0
    run = orjson.loads((outcome.results_dir / "run.json").read_bytes())
    assert run["server"]["token_source"] == "logprobs"
    records = read_jsonl(outcome.results_dir / "requests_conc_2.jsonl")
    assert len(records) == 6
    truth = {}
    for line in trace.read_bytes().splitlines():
        entry = orjson.loads(line)
        truth[entry["x_request_id"]] = [c[2] for c in entry["chunks"] if c[2] > 0]
    for record in records:
        assert record.ok and record.token_source is TokenSource.LOGPROBS
        assert sum(record.chunk_tokens) == record.completion_tokens == 32
        # the per-chunk counts are exactly what the simulator sent (MTP: 1..3 tokens)
        key = x_request_id(outcome.run_id, 2, record.request_id)
        assert list(record.chunk_tokens) == truth[key]
        assert max(record.chunk_tokens) > 1
