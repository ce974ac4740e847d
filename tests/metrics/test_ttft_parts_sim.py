"""TTFT taken apart against real `loadgen sim --pd` processes over real sockets.

Each simulator writes every request's phase times to --trace (its ground truth); the
`loadgen` CLI reads only the per-role /metrics, as it reads a Dynamo deployment's. Each
part's mean must match the truth over the point's requests, and `unexplained_ms` must be
what the truth says the servers did not time (before the frontend's handler, sends
later than stamped, the client's receipt). The KV link's part must follow its model.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.sim.trace import read_trace
from tests.support.procs import free_port, point, run_loadgen, start_sim, stop

PARTS = ("frontend", "prefill_queue", "prefill", "kv_transfer", "decode_first")
FAST = ["--encoder", "raw", "--no-progress", "--warmup-per-conc", "1"]


class PdSim:
    def __init__(self, tmp: Path, name: str, *flags: str) -> None:
        self.trace = tmp / f"{name}.trace.jsonl"
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.flags = flags
        self.process = start_sim(
            port,
            tmp / f"{name}.log",
            *flags,
            "--trace",
            str(self.trace),
            "--no-enable-prefix-caching",
        )

    def server_metrics(self) -> list[str]:
        prefills, decodes = (int(n) for n in self.flags[self.flags.index("--pd") + 1].split(":"))
        args = ["--server-metrics", f"frontend={self.base}/metrics"]
        for i in range(prefills):
            args += ["--server-metrics", f"prefill={self.base}/workers/prefill-{i}/metrics"]
        for i in range(decodes):
            args += ["--server-metrics", f"decode={self.base}/workers/decode-{i}/metrics"]
        return args

    def run(self, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return run_loadgen(
            [
                "--base-url",
                self.base,
                *self.server_metrics(),
                "--results",
                str(results),
                *FAST,
                *args,
            ],
            timeout=120,
        )


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[PdSim]]:
    started: list[PdSim] = []
    try:
        yield started
    finally:
        for sim in started:
            stop(sim.process)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The request records as the file spells them."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def truth(sim: PdSim, results: Path, conc: int) -> list[dict[str, Any]]:
    """The trace records of the point's measured requests (not its warmup)."""
    ids = {r["request_id"] for r in read_jsonl(results / f"requests_conc_{conc}.jsonl")}
    pattern = re.compile(rf"-c{conc}-(\d+)$")
    found = []
    for record in read_trace(sim.trace):
        match = pattern.search(record["x_request_id"] or "")
        if match and int(match[1]) in ids:
            found.append(record)
    assert len(found) == len(ids), (len(found), len(ids))
    return found


def client_records(results: Path, conc: int) -> dict[int, dict[str, Any]]:
    return {r["request_id"]: r for r in read_jsonl(results / f"requests_conc_{conc}.jsonl")}


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


BYTES_PER_TOKEN, LATENCY_MS = 65536, 0.5


def check_point(sim: PdSim, results: Path, conc: int) -> dict[str, Any]:
    """Each part's mean against the trace's truth over the point's requests, and
    unexplained_ms against what the trace says the servers did not time."""
    parts: dict[str, Any] = point(results, conc)["ttft_parts"]
    traced = truth(sim, results, conc)
    for name in PARTS:
        expected = mean([t["pd"][f"{name}_ns"] / 1e6 for t in traced])
        got = parts[f"{name}_ms"]["mean_ms"]
        assert got == pytest.approx(expected, rel=0.05), (conc, name, got, expected)
        assert parts[f"{name}_ms"]["requests"] == len(traced)
    # per request: the client's TTFT minus the span the servers timed (frontend handler
    # entry to the first token's step), from the trace and the client's own stamps
    clients = client_records(results, conc)
    untimed = []
    for t in traced:
        record = clients[int(t["x_request_id"].rsplit("-", 1)[1])]
        client_ttft = record["chunk_ns"][0] - record["start_ns"]
        untimed.append((client_ttft - (t["pd"]["first_token_ns"] - t["arrival_ns"])) / 1e6)
    unexplained = parts["unexplained_ms"]["mean_ms"]
    assert unexplained == pytest.approx(mean(untimed), abs=0.05), conc
    assert parts["parts_sum_ms"] + unexplained == pytest.approx(parts["client_mean_ttft_ms"])
    assert parts["adds_up"] is (abs(unexplained) <= parts["bound_ms"])
    assert parts["verdict"].startswith(
        "the parts add up" if parts["adds_up"] else "the parts do NOT add up"
    )
    # p50 only where a bucket allows it, and then inside the truth's range
    kv = parts["kv_transfer_ms"]
    kv_truth = sorted(t["pd"]["kv_transfer_ns"] / 1e6 for t in traced)
    if kv["p50_ms"] is not None:
        assert kv_truth[0] * 0.5 <= kv["p50_ms"] <= kv_truth[-1] * 2.5
    else:
        assert kv["reason"]
    assert parts["frontend_ms"]["p50_ms"] is None and parts["frontend_ms"]["reason"]
    return parts


def check_link_model(results: Path, conc: int, gbps: float, isl: int) -> None:
    """kv_transfer_ms against prompt tokens x bytes per token / bandwidth (+ latency)."""
    prompt = mean([r["prompt_tokens"] for r in read_jsonl(results / f"requests_conc_{conc}.jsonl")])
    assert prompt == pytest.approx(isl, rel=0.02)
    model_ms = LATENCY_MS + prompt * BYTES_PER_TOKEN / (gbps * 1e9) * 1e3
    kv = point(results, conc)["ttft_parts"]["kv_transfer_ms"]["mean_ms"]
    assert kv == pytest.approx(model_ms, rel=0.15), (gbps, isl, kv, model_ms)


@pytest.mark.parametrize(("ratio", "gbps"), [("1:1", 1), ("2:1", 4)])
def test_each_part_is_the_traces_truth_and_the_link_follows_its_model(
    tmp_path: Path, sims: list[PdSim], ratio: str, gbps: int
) -> None:
    """Conc 1-64 at one input length, then a second length: the link's part at two
    bandwidths (one per ratio) and two input lengths (one simulator per ratio keeps the
    module's runtime bounded)."""
    sim = PdSim(
        tmp_path,
        "pd",
        "--pd",
        ratio,
        "--kv-bandwidth-gbps",
        str(gbps),
        "--kv-bytes-per-token",
        str(BYTES_PER_TOKEN),
        "--kv-latency-ms",
        str(LATENCY_MS),
    )
    sims.append(sim)
    short, long = tmp_path / "isl256", tmp_path / "isl1024"
    done = sim.run(
        short, "--conc", "1,8,64", "--prompts-per-conc", "2", "--isl", "256", "--osl", "4"
    )
    assert done.returncode == 0, done.stderr
    for conc in (1, 8, 64):
        check_point(sim, short, conc)
    check_link_model(short, 64, gbps, 256)
    done = sim.run(long, "--conc", "2", "--num-prompts", "4", "--isl", "1024", "--osl", "2")
    assert done.returncode == 0, done.stderr
    check_point(sim, long, 2)
    check_link_model(long, 2, gbps, 1024)
    # every prefill engine took its share
    engines = {t["pd"]["prefill_engine"] for t in read_trace(sim.trace)}
    assert engines == set(range(int(ratio.split(":")[0])))
