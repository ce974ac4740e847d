"""`loadgen merge` summarizes from the typed run.json exactly as the run itself did: the
point context (lengths, percentiles, SLOs, the simulator's stream interval) comes from
the shard's run file, not from re-reading argv. Real CLI, embedded simulator."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.results.run_record import PER_SHARD, ShardInfo, decode_run, encode_run
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


def test_the_merged_run_file_is_the_run_record_it_reads_back_as(tmp_path: Path) -> None:
    """`loadgen merge` writes run.json from a RunRecord: decoding the file and encoding the
    record again gives its bytes, and it reads back as a merge (no shard index, the
    shards named, no attempt of its own, no per-shard setting)."""
    shard, merged = tmp_path / "shard", tmp_path / "merged"
    argv = ["--sim", "--sim-args", SIM, "--conc", "1,2", "--isl", "32", "--osl", "8"]
    argv += ["--prompts-per-conc", "2", "--warmup-per-conc", "0", "--workers", "1"]
    run = run_loadgen([*argv, "--no-progress", "--results", str(shard)])
    assert run.returncode == 0, run.stderr
    done = run_loadgen(["merge", str(shard), "--results", str(merged)])
    assert done.returncode == 0, done.stderr
    data = (merged / "run.json").read_bytes()
    record = decode_run(data, merged / "run.json")
    assert encode_run(record) == data
    assert record.merged and record.shard == ShardInfo(None, 1)
    assert [(m.path, m.shard) for m in record.merged_from] == [(str(shard), 0)]
    assert [(p.conc, p.complete, p.file) for p in record.points] == [
        (1, True, "conc_1.json"),
        (2, True, "conc_2.json"),
    ]
    assert record.attempts == () and record.started_unix is None
    written = orjson.loads(data)
    assert not PER_SHARD & written["settings"].keys()
    shard_run = decode_run((shard / "run.json").read_bytes(), shard / "run.json")
    assert record.settings.differing(shard_run.settings, PER_SHARD) == []
