"""Thinking phases against a real Dynamo 1.4.2 frontend and its mocker worker with the
mocker's own `--reasoning` (start and end thinking token ids, a thinking ratio). The
frontend has no reasoning parser for the mocker's model, so the reasoning streams as
content, `<think>` ... `</think>`, without token ids (the frontend refuses
return_token_ids): the phases come from where `</think>` came in the kept content
(`--record-outputs`, method `end_token_text`). The reasoning share must be the mocker's
thinking ratio, within 2%."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loadgen.metrics.phases import PhaseMethod, request_phases
from loadgen.results.jsonl import read_jsonl
from tests.support.dynamo_cluster import DynamoCluster, dynamo_env, start

pytestmark = pytest.mark.dynamo

THINKING_RATIO = 0.6
REASONING = {
    "start_thinking_token_id": 128821,  # DeepSeek-V4's <think>
    "end_thinking_token_id": 128822,  # and </think>
    "thinking_ratio": THINKING_RATIO,
}
OSL, PROMPTS = 100, 16


@pytest.fixture(scope="module")
def dynamo_thinking(
    dynamo_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DynamoCluster]:
    try:
        cluster = start(
            dynamo_python,
            tmp_path_factory.mktemp("dynamo-thinking"),
            mocker_args=["--reasoning", json.dumps(REASONING)],
        )
    except dynamo_env.PrepareError as error:
        pytest.skip(str(error))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_reasoning_share_is_the_mockers_thinking_ratio(
    dynamo_thinking: DynamoCluster, tmp_path: Path
) -> None:
    results = tmp_path / "r"
    done = dynamo_thinking.run_loadgen(
        [
            "--endpoint",
            "chat",
            "--reasoning-effort",
            "high",
            "--record-outputs",
            "--isl",
            "128",
            "--osl",
            str(OSL),
            "--conc",
            "4",
            "--num-prompts",
            str(PROMPTS),
            "--warmup-per-conc",
            "0",
            "--no-progress",
            "--results",
            str(results),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    point = orjson.loads((results / "conc_4.json").read_bytes())
    print(
        f"reasoning share {point['reasoning_share']:.4f} (thinking ratio {THINKING_RATIO}), "
        f"reasoning {point['total_reasoning_tokens']} / answer {point['total_answer_tokens']}, "
        f"TTFT p50 {point['median_ttft_ms']:.1f} ms, TTFA p50 {point['median_ttfa_ms']:.1f} ms"
    )
    assert point["phase_methods"] == {"end_token_text": PROMPTS}
    assert point["reasoning_share"] == pytest.approx(THINKING_RATIO, rel=0.02)
    assert point["total_reasoning_tokens"] + point["total_answer_tokens"] == sum(
        point["output_lens"]
    )
    for record in read_jsonl(results / "requests_conc_4.jsonl"):
        phases = request_phases(record, thinking=True)
        assert phases.method is PhaseMethod.END_TOKEN_TEXT
        assert phases.ttfa_ms is not None and phases.ttfr_ms is not None
        assert phases.ttfa_ms > phases.ttfr_ms  # the answer came after the reasoning
