"""A server that answers on a virtual clock, through the backend seam (run/backend.py):
every request after TTFT_MS, then a chunk of TOKENS_PER_CHUNK every ITL_MS, so every
figure of a sweep run on it has one exact expected value (no sockets, no scheduling
noise). It stands in for a server only: the scheduler, point, summary, sinks and
observers it feeds all run for real. Used by the in-process sweep tests
(tests/run/test_sweep_fake.py and the driver, lifecycle, trials and find-max tests)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loadgen.client.preflight import ServerInfo
from loadgen.client.server_metrics import Scrape
from loadgen.config.spec import RunSpec
from loadgen.records import RequestRecord, TokenSource
from loadgen.run.backend import OnRecord
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import RequestSpec

MS = 1_000_000


TTFT_MS, ITL_MS, TOKENS_PER_CHUNK = 40, 10, 2


class VirtualClock:
    def __init__(self) -> None:
        self.now_ns = 1_000 * MS

    def __call__(self) -> int:
        return self.now_ns

    async def sleep(self, seconds: float) -> None:
        self.now_ns += int(seconds * 1e9)
        await asyncio.sleep(0)


def exact_record(
    request: RequestSpec, conc: int, scheduled_ns: int, times: tuple[int, ...]
) -> RequestRecord:
    """A completed request whose chunks (TOKENS_PER_CHUNK tokens each) arrived at `times`:
    what every fake server here answers, whatever its timing model."""
    return RequestRecord(
        request_id=request.index,
        conc=conc,
        input_len=request.input_len,
        max_tokens=request.max_tokens,
        scheduled_ns=scheduled_ns,
        start_ns=scheduled_ns,
        connect_ns=0,
        chunk_ns=times,
        chunk_tokens=(TOKENS_PER_CHUNK,) * len(times),
        end_ns=times[-1],
        token_source=TokenSource.TOKEN_IDS,
        prompt_tokens=request.input_len,
        completion_tokens=request.max_tokens,
        finish_reason="length",
        status=200,
    )


class ExactServer:
    """Answers every request after TTFT_MS, then a chunk of TOKENS_PER_CHUNK every ITL_MS."""

    target = "exact-fake"
    base_url = "fake://exact"

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.sent: list[str] = []

    async def preflight(
        self, options: BodyOptions, probe: tuple[str, int], longest: tuple[int, int]
    ) -> ServerInfo:
        return ServerInfo(
            model="exact",
            max_model_len=None,
            version=None,
            spec_decoding=False,
            token_source=TokenSource.TOKEN_IDS,
            options=options,
            tokenize_check={"loadgen": probe[1], "server": probe[1], "match": True, "note": ""},
            warnings=(),
        )

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: OnRecord,
    ) -> RequestRecord:
        await asyncio.sleep(0)  # let the other slots interleave, as a real send would
        self.sent.append(x_request_id)
        start = scheduled_ns
        chunks = request.max_tokens // TOKENS_PER_CHUNK
        times = tuple(start + (TTFT_MS + i * ITL_MS) * MS for i in range(chunks))
        self.clock.now_ns = max(self.clock.now_ns, times[-1])
        record = exact_record(request, conc, scheduled_ns, times)
        on_record(record)
        return record

    async def probe(self) -> bool:
        return True

    async def scrape(self) -> Scrape:
        return Scrape()  # no /metrics: the server-side fields are null

    def series_watch(self) -> None:
        return None

    def gauge_watch(self) -> None:
        return None

    def take_tainted(self) -> dict[tuple[int, int], str]:
        return {}  # every answer in step

    def fresh_connections(self) -> int:
        return 0  # no connections kept


def spec(tmp_path: Path, **changes: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        conc=(2, 4),
        isl=64,
        osl=16,
        base_url="http://unused",
        prompts_per_conc=3,
        warmup_per_conc=1,
        encoder="raw",
        results_dir=tmp_path,
        progress=False,
        num_gpus=2,
    )
    values.update(changes)
    return RunSpec.flat(**values)
