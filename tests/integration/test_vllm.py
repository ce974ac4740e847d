"""loadgen against a real vLLM 0.32 OpenAI server (CPU build, tiny random-weight Llama).

Servers come from conftest.py (one live at a time). Tests 1-3 and 5 run the `loadgen` CLI
as a subprocess, exactly as a user would, and read its result files; test 4 also drives
loadgen's transport directly to compare two token-count sources on identical requests.
The tiny model has its own tokenizer, so loadgen runs with `--encoder raw --tokenizer
<model dir>`: prompts are exactly --isl tokens by the server's own count.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from loadgen.records import RequestRecord, TokenSource
from tests.support.vllm_runs import point, records, run_loadgen, server_counter
from tests.support.vllm_servers import SPEC_TOKENS, ServerPool, VllmServer, frontend_kept_awake

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1500)]

ISL, OSL = 256, 64
CONC = (1, 2, 4, 8)
PROMPTS_PER_CONC = 3  # 45 measured requests over 1..8: every point has >= 3 of them
K = SPEC_TOKENS


def sweep(server: VllmServer, results: Path, *extra: str, conc: str = "1..8") -> None:
    done = run_loadgen(
        server,
        results,
        "--conc",
        conc,
        "--isl",
        str(ISL),
        "--osl",
        str(OSL),
        "--prompts-per-conc",
        str(PROMPTS_PER_CONC),
        "--warmup-per-conc",
        "1",
        *extra,
    )  # a later --warmup-per-conc or --prompts-per-conc in extra wins
    assert done.returncode == 0, f"loadgen failed (log {server.log}):\n{done.stderr[-3000:]}"


def assert_exact_counts(
    result: dict[str, Any],
    recs: Sequence[RequestRecord],
    conc: int,
    per_conc: int = PROMPTS_PER_CONC,
) -> None:
    planned = conc * per_conc
    assert result["num_prompts"] == planned and result["completed"] == planned, result
    assert len(recs) == planned and all(r.ok for r in recs), [r.error_detail for r in recs]
    # ignore_eos + max_tokens: every request is exactly OSL tokens, by the server's usage
    # and by the summed chunk counts; every prompt is exactly ISL tokens by the server.
    assert result["total_output_tokens"] == planned * OSL
    assert result["total_input_tokens"] == planned * ISL
    for r in recs:
        assert (r.prompt_tokens, r.completion_tokens, sum(r.chunk_tokens)) == (ISL, OSL, OSL)
        assert r.token_source is TokenSource.TOKEN_IDS


def coalesced_chunks(recs: Sequence[RequestRecord]) -> int:
    """Decode chunks with more tokens than one step can emit (K+1): vLLM merged steps.

    vLLM's frontend merges the outputs of consecutive engine steps into one event when it
    falls behind the engine (RequestOutputCollector), e.g. while it tokenizes a newly
    arrived prompt. On this shared 2-core machine that happens in a few percent of the
    steps at concurrency 1-2, where an engine step takes only 2-4 ms.
    """
    return sum(1 for r in recs for n in r.chunk_tokens[1:] if n > K + 1)


def test_draft_model_acceptance_is_exact_and_matches_server_counters(
    vllm_draft: VllmServer, tmp_path: Path
) -> None:
    """draft == target: every draft token is accepted, so each decode step emits K+1."""
    sweep(vllm_draft, tmp_path)
    steps = -(-(OSL - 1) // (K + 1))  # decode steps after the prefill token: ceil(63/4) = 16
    step_ends = {1 + (K + 1) * j for j in range(steps)} | {OSL}
    for conc in CONC:
        result, recs = point(tmp_path, conc), records(tmp_path, conc)
        assert_exact_counts(result, recs, conc)
        for r in recs:
            # Every chunk ends where a step ends (1, 5, 9, ..., 61, 64): each step carried
            # exactly K+1 tokens, whether or not vLLM merged some steps into one event.
            ends = set(itertools.accumulate(r.chunk_tokens))
            assert ends <= step_ends, r.chunk_tokens
        # The server's own counters over exactly this point's measured requests: one
        # draft per decode step, all K tokens accepted (also in the max_tokens-cut step).
        drafts = result["server_spec_decode_drafts"]
        assert drafts == steps * len(recs)
        assert result["server_spec_decode_draft_tokens"] == K * drafts
        assert result["server_spec_decode_accepted_tokens"] == K * drafts
        assert result["server_acceptance_length"] == K + 1.0
        assert result["server_acceptance_per_position"] == [1.0] * K
        assert result["server_spec_tokens"] == K
        # The stream: exactly K+1 per decode chunk, equal to the server, unless vLLM merged
        # steps; loadgen must then count every merged chunk, publish no stream AL and
        # fall back to the server's.
        merged = coalesced_chunks(recs)
        assert result["stream_acceptance_oversized_chunks"] == merged
        if merged == 0:
            assert result["stream_acceptance_length"] == K + 1.0
            assert result["stream_acceptance_per_position"] == [1.0] * K
            assert result["acceptance_length_diff"] == 0.0
            assert result["acceptance_length_source"] == "stream"
        else:
            assert result["stream_acceptance_length"] is None
            assert result["stream_acceptance_invalid_reason"] is not None
            assert result["acceptance_length_source"] == "server_per_request"
        assert_per_request_stats(result, recs, steps)


def assert_per_request_stats(
    result: dict[str, Any], recs: Sequence[RequestRecord], steps: int
) -> None:
    """vLLM's per-request metrics (--per-request-spec-decode-metrics detailed
    --enable-per-request-metrics): every request's own histogram says all K drafts were
    accepted in each of its steps, so the third AL source is 4.0 too; and the client's TTFT
    is more than the server's queue and engine time (same host clock)."""
    for r in recs:
        stats, timings = r.server_spec_decode, r.server_timings
        assert stats is not None and timings is not None, r
        assert stats.acceptance_histogram == (0,) * K + (steps,)
        assert stats.mean_acceptance_length == K + 1.0 and stats.num_spec_tokens == K
        assert stats.per_step_accepted == (K,) * steps
        assert timings.time_to_first_token_ms is not None and timings.queue_time_ms is not None
        client_ttft_ms = (r.chunk_ns[0] - r.start_ns) / 1e6
        assert client_ttft_ms > timings.time_to_first_token_ms + timings.queue_time_ms
    assert result["server_request_acceptance_length"] == K + 1.0
    assert result["server_request_acceptance_per_position"] == [1.0] * K
    assert result["server_request_spec_steps"] == result["server_spec_decode_drafts"]
    assert result["server_request_al_min"] == result["server_request_al_max"] == K + 1.0
    assert result["server_timing_requests"] == len(recs)
    assert result["mean_ttft_outside_server_ms"] > 0
    print(
        f"conc {result['max_concurrency']}: TTFT {result['mean_ttft_ms']:.2f} ms = server "
        f"{result['mean_server_request_ttft_ms']:.2f} + queue "
        f"{result['mean_server_request_queue_time_ms']:.2f} + outside "
        f"{result['mean_ttft_outside_server_ms']:.2f} (means)"
    )


def test_ngram_stream_and_server_acceptance_agree(vllm_ngram: VllmServer, tmp_path: Path) -> None:
    """Partial acceptance: the stream and the server agree on the accepted tokens.

    The acceptance *lengths* are not comparable under ngram: the server divides by
    drafts, the stream by decode chunks, and the prompt-lookup proposer skips every step
    whose context has no match (that chunk carries 1 token and no draft is counted). What
    both sides count is accepted tokens. Each decode step emits 1 + the tokens accepted
    in it, so over the stream's decode chunks sum(tokens - 1) = accepted + merged, where
    merged = steps - chunks counts steps vLLM folded into a previous event (see
    coalesced_chunks); the steps come from vLLM's inter-token-latency histogram, which
    observes once per decode step of each request. The server's counter also includes
    tokens accepted in each request's last step beyond max_tokens, at most K per request:
        0 <= server_accepted - (stream_sum - merged) <= K x requests.
    The histogram count is scraped around the whole CLI run, so it also holds the
    preflight probe's 1-3 decode steps (max_tokens 4); the bounds allow for that.
    """
    itl_count = "vllm:inter_token_latency_seconds_count"
    steps_before = server_counter(vllm_ngram, itl_count)
    sweep(vllm_ngram, tmp_path, "--warmup-per-conc", "0")
    steps = server_counter(vllm_ngram, itl_count) - steps_before
    stream_sum = chunks = requests = server_accepted = 0
    for conc in CONC:
        result, recs = point(tmp_path, conc), records(tmp_path, conc)
        assert_exact_counts(result, recs, conc)
        requests += len(recs)
        chunks += sum(len(r.chunk_tokens) - 1 for r in recs)
        stream_sum += sum(n - 1 for r in recs for n in r.chunk_tokens[1:])
        server_accepted += result["server_spec_decode_accepted_tokens"] or 0
        keys = ["server_acceptance_per_position"]
        if result["stream_acceptance_invalid_reason"] is None:  # else a merge voided it
            keys.append("stream_acceptance_per_position")
        for key in keys:
            rates = result[key]
            assert rates is not None and len(rates) == K, (key, rates)
            assert all(a >= b for a, b in itertools.pairwise(rates)), (key, rates)
        assert 0.0 <= result["server_acceptance_rate"] <= 1.0
    probe_steps = (1, 3)
    merged_low, merged_high = steps - chunks - probe_steps[1], steps - chunks - probe_steps[0]
    assert merged_high >= 0, (steps, chunks)
    assert server_accepted - (stream_sum - merged_low) <= K * requests, (
        server_accepted,
        stream_sum,
        merged_low,
    )
    assert server_accepted - (stream_sum - merged_high) >= 0, (
        server_accepted,
        stream_sum,
        merged_high,
    )
    # The random-weight model repeats itself, so prompt lookup finds matches: the check
    # would be vacuous if nothing was accepted.
    assert server_accepted > 0
    # --engine auto finds real vLLM by its /metrics names, and nothing is left null for it
    server = json.loads((tmp_path / "run.json").read_text())["server"]
    assert server["engine"] == "vllm", server
    assert server["engine_reason"].endswith("/metrics serves vllm:* series")
    assert server["engine_unavailable"] == {}


def test_chat_endpoint_and_token_count_sources(vllm_ngram: VllmServer, tmp_path: Path) -> None:
    """Chat with the server's template, and token_ids vs usage deltas on the same requests."""
    results = tmp_path / "chat"
    done = run_loadgen(
        vllm_ngram,
        results,
        "--endpoint",
        "chat",
        "--conc",
        "1,4",
        "--isl",
        str(ISL),
        "--osl",
        str(OSL),
        "--prompts-per-conc",
        "2",
        "--warmup-per-conc",
        "0",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # The server wraps the raw content in its chat template: a fixed number of tokens
    # around any content that starts with a letter or space (specials split the rest).
    content = "hello"
    wrapped = vllm_ngram.post_json(
        "/tokenize", {"model": "tiny", "messages": [{"role": "user", "content": content}]}
    )["count"]
    bare = vllm_ngram.post_json(
        "/tokenize", {"model": "tiny", "prompt": content, "add_special_tokens": False}
    )["count"]
    overhead = wrapped - bare
    assert overhead > 0
    for conc in (1, 4):
        recs = records(results, conc)
        assert len(recs) == 2 * conc and all(r.ok for r in recs)
        for r in recs:
            assert r.completion_tokens == OSL and sum(r.chunk_tokens) == OSL
            assert r.prompt_tokens == r.input_len + overhead, (r.prompt_tokens, r.input_len)
        assert point(results, conc)["total_output_tokens"] == 2 * conc * OSL

    # End to end: the transport picks token_ids when the server sends them and usage
    # deltas when it does not; both give every token.
    prompts = raw_prompts(vllm_ngram, count=3)
    by_ids, by_usage = send_with_each_source(vllm_ngram, prompts)
    for ids, usage in zip(by_ids, by_usage, strict=True):
        assert ids.token_source is TokenSource.TOKEN_IDS
        assert usage.token_source is TokenSource.USAGE
        assert sum(ids.chunk_tokens) == sum(usage.chunk_tokens) == OSL
        assert ids.completion_tokens == usage.completion_tokens == OSL
    # Chunk for chunk, on the very same bytes (two requests can differ in how vLLM merges
    # steps): one response carrying both token_ids and cumulative usage, counted once from
    # the ids and once with the ids removed, through loadgen's own decoder and counter.
    from_ids, from_usage = count_both_ways(vllm_ngram, prompts[0].text)
    assert from_ids == from_usage
    assert sum(from_ids) == OSL
    assert any(n > 1 for n in from_ids)  # prompt lookup made multi-token chunks


def test_the_native_client_measures_real_vllm_exactly(
    vllm_ngram: VllmServer, tmp_path: Path
) -> None:
    """loadgen's one client of the measured streams gives exact counts and says so in
    the file (the aiohttp comparison client is bench/'s now: bench/read_path.py)."""
    sweep(vllm_ngram, tmp_path, conc="2")
    recs = records(tmp_path, 2)
    result = point(tmp_path, 2)
    assert_exact_counts(result, recs, 2)
    assert result["http_client"] == "native"  # the file names the client that timed it
    # plain http: the native client's stamps are the kernel's
    assert result["arrival_stamps"] == "kernel"
    assert result["arrival_stamp_sources"] == {"kernel": len(recs)}
    assert all(r.connect_ns == 0 for r in recs)  # the warmup opened the connections


def raw_prompts(server: VllmServer, count: int) -> list[Any]:
    import numpy as np

    from loadgen.tokenizer import load_tokenizer
    from loadgen.workload.prompts import synthesize_prompts

    tokenizer = load_tokenizer(str(server.model), check_dsv4=False)
    return synthesize_prompts(
        [ISL] * count,
        encoder="raw",
        thinking_mode="chat",
        reasoning_effort=None,
        tokenizer=tokenizer,
        rng=np.random.default_rng(7),
    )


def without_token_ids(data: bytes) -> bytes:
    """The same event as if the request had not asked for token ids (vLLM then sends null)."""
    if data == b"[DONE]":
        return data
    event = json.loads(data)
    for choice in event.get("choices", []):
        if "token_ids" in choice:
            choice["token_ids"] = None
    return json.dumps(event).encode()


def count_both_ways(server: VllmServer, prompt: str) -> tuple[list[int], list[int]]:
    import urllib.request

    from loadgen.client.events import TokenCounter, decode_event
    from loadgen.client.sse import SseFramer
    from loadgen.workload.bodies import BodyOptions, completion_body, encode_body

    options = BodyOptions(endpoint="completions", model="tiny")  # token ids + usage
    request = urllib.request.Request(
        server.url + options.path,
        data=encode_body(completion_body(options, prompt, OSL)),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        body = response.read()
    with_ids, usage_only = TokenCounter(), TokenCounter()
    from_ids, from_usage = [], []
    for event in SseFramer().feed(body):
        by_ids = with_ids.count(decode_event(event.data))
        by_usage = usage_only.count(decode_event(without_token_ids(event.data)))
        if by_ids or by_usage:
            from_ids.append(by_ids)
            from_usage.append(by_usage)
    assert with_ids.source is TokenSource.TOKEN_IDS
    assert usage_only.source is TokenSource.USAGE
    return from_ids, from_usage


def send_with_each_source(
    server: VllmServer, prompts: Sequence[Any]
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    import asyncio

    from loadgen.client.native.client import NativeStreams
    from loadgen.client.transport import Transport
    from loadgen.workload.bodies import BodyOptions, completion_body, encode_body
    from loadgen.workload.plan import RequestSpec

    async def send_all(return_token_ids: bool) -> list[RequestRecord]:
        options = BodyOptions(
            endpoint="completions",
            model="tiny",
            return_token_ids=return_token_ids,
            continuous_usage=True,
        )
        out = []
        streams = NativeStreams(max_connections=1)  # the measured streams' default client
        transport = Transport(streams, server.url + options.path, request_timeout_s=120)
        try:
            for index, prompt in enumerate(prompts):
                body = encode_body(completion_body(options, prompt.text, OSL))
                request = RequestSpec(index, prompt.num_tokens, OSL, body)
                out.append(
                    await transport.send(
                        request,
                        x_request_id=f"src-{index}",
                        conc=1,
                        scheduled_ns=0,
                        on_record=lambda _r: None,
                    )
                )
        finally:
            await streams.close()
        assert all(r.ok for r in out), [r.error_detail for r in out]
        return out

    async def both() -> tuple[list[RequestRecord], list[RequestRecord]]:
        return await send_all(True), await send_all(False)

    return asyncio.run(both())


def test_ttft_and_e2el_agree_with_vllm_histograms(vllm_plain: VllmServer, tmp_path: Path) -> None:
    """Client-side means vs vLLM's own histograms over the same requests.

    vLLM stamps a request's arrival after uvicorn has read and parsed it and the frontend
    has validated and tokenized it, and its first-token and finish times in the engine
    core, before the frontend detokenizes, encodes and writes the chunk. loadgen's clock
    starts before the request bytes go out and stops when a chunk's bytes arrive. So:
    - loadgen can never be earlier than vLLM, for TTFT or E2EL (1 ms of slack: vLLM
      measures with the wall clock, loadgen with the monotonic one). The sharp check: a
      client whose clock started late (e.g. at the response headers, which vLLM sends
      before the first token) or that stamped the wrong event falls below it.
    - E2EL: loadgen is later by the HTTP and frontend work on the last chunk plus any OS
      stall; measured 2-14 ms per point at conc 1-8, also with other jobs keeping both
      cores busy. Bound: 30 ms + 10 ms per concurrent request (the frontend serves the
      requests of a step one after another).
    - TTFT: the same few ms usually, but vLLM's CPU frontend sometimes holds a response
      and writes it whole at its end (see frontend_kept_awake, which makes that rarer but
      not impossible): then the first chunk arrives when the last one does. Measured up
      to 130 ms over vLLM's TTFT mean. So the first chunk must arrive no later than vLLM
      finished the request plus the E2EL slack; a client stamping first chunks later than
      that measures something else.
    - A client stamps late by as long as its event loop was blocked; loadgen reports that
      as client_loop_lag_max_ms, and both upper bounds grow by it: loadgen must either be
      within the slack of vLLM or say that it could not be.
    8 requests per concurrency keep one OS stall from dominating a mean.
    """
    with frontend_kept_awake(vllm_plain):
        sweep(vllm_plain, tmp_path, "--prompts-per-conc", "8", conc="1..4")
    for conc in (1, 2, 4):
        result, recs = point(tmp_path, conc), records(tmp_path, conc)
        assert_exact_counts(result, recs, conc, per_conc=8)
        assert result["server_requests"] == len(recs)  # the histograms saw exactly these
        ttft, server_ttft = result["mean_ttft_ms"], result["server_mean_ttft_ms"]
        e2el, server_e2el = result["mean_e2el_ms"], result["server_mean_e2el_ms"]
        print(
            f"conc {conc}: TTFT loadgen {ttft:.1f} ms, vLLM {server_ttft:.1f} ms; "
            f"E2EL loadgen {e2el:.1f} ms, vLLM {server_e2el:.1f} ms; client loop lag "
            f"max {result.get('client_loop_lag_max_ms')} ms"
        )
        slack = 30.0 + 10.0 * conc + (result.get("client_loop_lag_max_ms") or 0.0)
        assert -1.0 <= e2el - server_e2el <= slack, (conc, e2el, server_e2el)
        assert ttft - server_ttft >= -1.0, (conc, ttft, server_ttft)
        assert ttft <= server_e2el + slack, (conc, ttft, server_e2el)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--model", "nope", "--isl", "64", "--osl", "16"],
            r"model 'nope' is not served at .*; served: tiny",
        ),
        (["--isl", "2000", "--osl", "100"], r"2100 tokens exceeds the server's max_model_len 2048"),
    ],
    ids=["wrong-model", "isl-plus-osl-above-max-model-len"],
)
def test_preflight_errors_are_one_clear_line(
    vllm_pool: ServerPool, tmp_path: Path, args: list[str], expected: str
) -> None:
    """Nothing is sent: vLLM itself would 404 the model and silently clamp max_tokens."""
    server = vllm_pool.any()
    prompts_before = server_counter(server, "vllm:prompt_tokens_total")
    done = run_loadgen(server, tmp_path, "--conc", "1", *args)
    # --model given twice: argparse keeps the last one, the wrong one.
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("loadgen: error:")]
    assert len(errors) == 1 and re.search(expected, errors[0]), done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("conc_*.json"))
    assert server_counter(server, "vllm:prompt_tokens_total") == prompts_before


def _final_usage_event(url: str, model: str, prompt: str) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": 9,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        events = [
            line[6:]
            for line in response.read().decode().splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    final: dict[str, Any] = json.loads(events[-1])
    assert final["choices"] == [], final
    return final


def _shape(value: Any) -> Any:
    """Keys in order and value types, recursively (what a parser depends on)."""
    if isinstance(value, dict):
        return [(key, _shape(item)) for key, item in value.items()]
    if isinstance(value, list):
        return ["list", *sorted({type(v).__name__ for v in value})]
    return type(value).__name__


def test_the_simulator_sends_vllms_per_request_metrics_shapes(
    vllm_draft: VllmServer, tmp_path: Path
) -> None:
    """vLLM 0.32 with --per-request-spec-decode-metrics detailed --enable-per-request-metrics,
    and `loadgen sim` with the same flags: the final usage chunk and the non-streamed body
    carry `metrics` of the same keys, order and types (the values differ: other machines)."""
    from tests.support.procs import free_port, start_sim, stop

    port = free_port()
    sim = start_sim(
        port,
        tmp_path / "sim.log",
        "--spec-tokens",
        str(K),
        "--model",
        "tiny",
        "--per-request-spec-decode-metrics",
        "detailed",
        "--enable-per-request-metrics",
    )
    try:
        sim_url = f"http://127.0.0.1:{port}"
        real = _final_usage_event(vllm_draft.url, "tiny", "hello hello hello")
        ours = _final_usage_event(sim_url, "tiny", "hello hello hello")
        print(json.dumps(real["metrics"]))
        assert _shape(ours["metrics"]) == _shape(real["metrics"])
        assert list(ours) == list(real)  # metrics last, after system_fingerprint
        body = {"model": "tiny", "prompt": "hello hello hello", "max_tokens": 9, "ignore_eos": True}
        real_body = vllm_draft.post_json("/v1/completions", body)
        request = urllib.request.Request(
            sim_url + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            ours_body = json.loads(response.read())
        assert _shape(ours_body["metrics"]) == _shape(real_body["metrics"])
    finally:
        stop(sim)


def test_greedy_draft_model_outputs_are_the_plain_servers(
    vllm_draft: VllmServer, vllm_pool: ServerPool, tmp_path: Path
) -> None:
    """The lossless check on real vLLM: the same greedy prompts on the draft_model (K=3)
    server, then twice on the plain one (the second run is the noise floor); `loadgen
    compare` pairs them by prompt, reports the identity share and the floor per
    concurrency, and does not flag the draft lane (verified speculation is lossless)."""
    # 6 pairs a slot: at conc 1 even a floor of 5 identical in 6 is told from 0 of 6 (with
    # 4, a floor of 3 of 4 was "too few pairs to judge")
    lossless = ("--prompts-per-conc", "6", "--record-outputs")
    sweep(vllm_draft, tmp_path / "draft", *lossless, conc="1,4")
    plain = vllm_pool.get("plain")  # the draft server stops; plain is next in line
    sweep(plain, tmp_path / "plain", *lossless, conc="1,4")
    sweep(plain, tmp_path / "plain.repeat", *lossless, conc="1,4")
    kept = [r.output for r in records(tmp_path / "draft", 4) if r.ok]
    assert kept and all(o is not None and o.basis == "token_ids" for o in kept)

    out = tmp_path / "compare.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen",
            "compare",
            str(tmp_path / "plain"),
            str(tmp_path / "plain.repeat"),
            str(tmp_path / "draft"),
            "--json",
            str(out),
            "--require-lossless",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    print(done.stdout, done.stderr)
    check = json.loads(out.read_text())["lossless"]
    assert check["baseline"] == "plain" and check["repeat"] == "plain.repeat"
    lanes = {lane["conc"]: lane for lane in check["lanes"] if lane["run"] == "draft"}
    assert sorted(lanes) == [1, 4]
    for conc, lane in lanes.items():
        print(
            f"conc {conc}: draft identical {lane['identical_share']:.3f} of "
            f"{lane['identical_pairs']}, noise floor {lane['noise_floor']:.3f} of "
            f"{lane['noise_floor_pairs']}, first divergence median "
            f"{lane['first_divergence_median']} p10 {lane['first_divergence_p10']}: "
            f"{lane['lossless_note']}"
        )
        assert lane["identical_pairs"] == 6 * conc and lane["noise_floor_pairs"] == 6 * conc
        assert lane["lossless_verdict"] == "lossless", lane
    assert check["flagged"] == [] and done.returncode == 0, done.stderr
