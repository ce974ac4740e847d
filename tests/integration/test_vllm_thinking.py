"""Thinking phases against a real vLLM 0.32 (CPU build) with a reasoning parser: the
tiny random-weight model has no end-of-thinking token of its own, so its server runs
vLLM's DeepSeek-R1 parser with a token of the tiny vocabulary as the end of thinking
(tests/support/vllm_servers.py, TINY_THINK_PARSER), and the requests bias that token
(logit_bias) so that it comes, at a seeded random place, within the output. The reasoning
then streams as vLLM's `reasoning`, the answer as content, as with DeepSeek-V4."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from loadgen.metrics.phases import PhaseMethod, request_phases
from loadgen.results.jsonl import read_jsonl
from tests.support.vllm_servers import TINY_THINK_END_ID, VllmServer, frontend_kept_awake

# exclusive: beside busy workers the CPU frontend lumps a whole response into one write
# (CI: TTFA p50 = TTFT p50), and a response read in one piece has one stamp. The
# measured run is in the call; the server's start (the setup, ~30 s) shares the machine.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900), pytest.mark.exclusive(setup=False)]

PROMPTS = 8


def test_a_reasoning_parser_run_has_ttfa_after_ttft_and_phases_that_add_up(
    vllm_thinking: VllmServer, tmp_path: Path
) -> None:
    results = tmp_path / "r"
    argv = [
        sys.executable,
        "-m",
        "loadgen",
        "--base-url",
        vllm_thinking.url,
        "--model",
        "tiny",
        "--encoder",
        "raw",
        "--tokenizer",
        str(vllm_thinking.model),
        "--endpoint",
        "chat",
        "--reasoning-effort",
        "high",
        "--record-outputs",
        "--temperature",
        "1.0",
        "--extra-body",
        json.dumps({"logit_bias": {str(TINY_THINK_END_ID): 5.0}}),
        "--isl",
        "64",
        "--osl",
        "64",
        "--conc",
        "2",
        "--num-prompts",
        str(PROMPTS),
        "--warmup-per-conc",
        "0",
        "--seed",
        "0",
        "--no-progress",
        "--request-timeout",
        "120",
        "--results",
        str(results),
    ]
    # vLLM's CPU frontend, left alone, often writes a whole response in one go at its end
    # (vllm_servers.frontend_kept_awake): every chunk then carries one stamp, TTFA = TTFT
    with frontend_kept_awake(vllm_thinking):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    print(done.stdout, done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_jsonl(results / "requests_conc_2.jsonl")
    assert len(records) == PROMPTS
    answered, pairs = 0, []
    for record in records:
        assert record.ok, record.error_detail
        phases = request_phases(record, thinking=True)
        assert phases.method is PhaseMethod.FIELDS, record.phase_marks
        assert phases.reasoning_tokens is not None and phases.answer_tokens is not None
        assert phases.reasoning_tokens + phases.answer_tokens == record.output_tokens
        if phases.ttfa_ms is not None:
            answered += 1
            # the first answer token after the first token; equal stamps where one read
            # brought both (the frontend's lumps, above)
            ttft_ms = (record.chunk_ns[0] - record.start_ns) / 1e6
            assert phases.ttfa_ms >= ttft_ms
            pairs.append((ttft_ms, phases.ttfa_ms))
            assert record.phase_marks[0] == 0 and len(record.phase_marks) == 2
    assert answered >= PROMPTS // 2
    point = orjson.loads((results / "conc_2.json").read_bytes())
    print(
        f"TTFT p50 {point['median_ttft_ms']:.1f} ms, TTFA p50 {point['median_ttfa_ms']:.1f} ms, "
        f"reasoning {point['total_reasoning_tokens']} / answer {point['total_answer_tokens']}, "
        f"methods {point['phase_methods']}, anomalies {point['phase_anomalies']}"
    )
    # over the same requests: the point's TTFT median is over all of them, its TTFA
    # median over those that answered, which may have been the quicker ones (CI: 89.0 ms
    # TTFA p50 against 90.0 ms TTFT p50, each request's TTFA after its TTFT)
    ttfts, ttfas = zip(*pairs, strict=True)
    assert float(np.median(ttfas)) > float(np.median(ttfts))
    assert point["total_reasoning_tokens"] + point["total_answer_tokens"] == sum(
        point["output_lens"]
    )
