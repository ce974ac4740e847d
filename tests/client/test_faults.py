"""Each simulator fault mode becomes the right ErrorKind, and nothing measured is lost."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.records import ErrorKind
from loadgen.results.jsonl import read_jsonl
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
)
CONC, PER_CONC = 4, 4


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


@pytest.mark.parametrize(
    ("fault", "kind", "mid_stream"),
    [
        (("--fault-500", "0.5"), ErrorKind.HTTP, False),
        (("--fault-abort", "0.5"), ErrorKind.DISCONNECT, True),
        (("--fault-malformed", "0.5"), ErrorKind.MALFORMED, True),
        (("--fault-stall", "0.5", "--stall-seconds", "3"), ErrorKind.TIMEOUT, True),
    ],
)
async def test_fault_mode(
    tmp_path: Path, tokenizer: Tokenizer, fault: tuple[str, ...], kind: ErrorKind, mid_stream: bool
) -> None:
    spec = RunSpec.flat(
        conc=(CONC,),
        isl=48,
        osl=32,
        prompts_per_conc=PER_CONC,
        warmup_per_conc=1,
        sim=True,
        sim_args=(*FAST_SIM, *fault),
        results_dir=tmp_path,
        request_timeout_s=1.0,
        progress=False,
    )
    outcome = await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    records = read_jsonl(tmp_path / f"requests_conc_{CONC}.jsonl")
    result = orjson.loads((tmp_path / f"conc_{CONC}.json").read_bytes())
    assert len(records) == CONC * PER_CONC == result["num_prompts"]  # nothing lost
    kinds = Counter(r.error for r in records if r.error is not None)
    assert set(kinds) == {kind}, kinds  # one cause, named right
    assert 0 < kinds[kind] < len(records)
    assert result["errors_by_kind"][kind.value] == kinds[kind] == result["failed"]
    assert result["completed"] == len(records) - kinds[kind]
    assert result["error_rate"] > spec.deadlines.max_error_rate and outcome.exit_code == 1
    assert outcome.failed_points == (CONC,)
    failed = [r for r in records if r.error is not None]
    assert all(r.error_detail for r in failed)
    if mid_stream:  # what arrived before the fault is kept
        assert any(r.chunk_tokens for r in failed)
    else:
        assert all(r.status == 500 and not r.chunk_tokens for r in failed)
    # The completed requests' figures do not include the failed ones.
    assert result["total_output_tokens"] == 32 * result["completed"]
    # warmup requests meet the same faults; they are counted, never mixed into the point
    assert 0 <= result["warmup_failed"] <= result["warmup_requests"] == CONC
