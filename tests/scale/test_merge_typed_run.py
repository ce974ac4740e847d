"""`loadgen merge` summarizes from the typed run.json exactly as the run itself did: the
point context (lengths, percentiles, SLOs, the simulator's stream interval) comes from
the shard's run file, not from re-reading argv. Real CLI, embedded simulator."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.support.procs import run_loadgen

# Every stream chunk merges two engine steps that each emit one token (no draft
# accepted): no chunk is oversized, so only the known stream interval voids the stream AL.
SIM = "--stream-interval 2 --spec-tokens 2 --acceptance 0,0 --step-fixed-ms 2 "
SIM += "--decode-token-us 20 --prefill-token-us 2 --spin-us 0"


def test_a_merged_shard_is_summarized_as_its_run_was(tmp_path: Path) -> None:
    shard, merged = tmp_path / "shard", tmp_path / "merged"
    argv = ["--sim", "--sim-args", SIM, "--conc", "2", "--isl", "32", "--osl", "24"]
    argv += ["--prompts-per-conc", "3", "--warmup-per-conc", "0", "--percentiles", "50,95"]
    run = run_loadgen([*argv, "--slo", "ttft=5000", "--no-progress", "--results", str(shard)])
    assert run.returncode == 0, run.stderr
    assert orjson.loads((shard / "run.json").read_bytes())["server"]["stream_interval"] == 2
    done = run_loadgen(["merge", str(shard), "--results", str(merged)])
    assert done.returncode == 0, done.stderr
    before = orjson.loads((shard / "conc_2.json").read_bytes())
    after = orjson.loads((merged / "conc_2.json").read_bytes())
    assert before["stream_acceptance_invalid_reason"] == (
        "the server streams every 2 engine steps: each chunk merges steps"
    )
    assert {k for k in before if before[k] != after.get(k)} == {"run_id"}
