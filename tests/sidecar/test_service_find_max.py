"""`find_max` through the sidecar's POST /v1/runs is refused with one 400 line, as run
options and as a sweep document's lane (its run record follows a fixed list of points);
nothing is started and nothing is written under the data directory's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.sidecar.options import FIND_MAX_WHY
from tests.support.sidecar import call, sidecar

SEARCH = {"conc": "1..8", "isl": 64, "osl": 16, "find_max": "conc", "slo": "ttft:p99=100ms"}
DOCUMENT = {
    "conc": [1, 2],
    "workload": {"isl": 64, "osl": 16},
    "lanes": [{"name": "a"}, {"name": "b", "find-max": "conc", "slo": {"ttft:p99": "100ms"}}],
}


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (SEARCH, ""),
        (DOCUMENT, "sweep document: lanes[1] (b): "),
    ],
)
async def test_find_max_is_refused_with_one_400_line(
    tmp_path: Path, body: dict[str, Any], where: str
) -> None:
    async with sidecar(tmp_path, "http://127.0.0.1:9") as client:
        status, answer = await call(client, "POST", "/v1/runs", body)
        assert status == 400, answer
        assert answer["error"].endswith(FIND_MAX_WHY) and "\n" not in answer["error"]
        assert where in answer["error"]
        assert (await call(client, "GET", "/v1/runs"))[1]["runs"] == []
