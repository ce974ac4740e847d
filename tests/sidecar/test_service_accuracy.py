"""`accuracy` through the sidecar's POST /v1/runs is refused with one 400 line, as run
options and as a sweep document's lane: its files are not confined to the data directory
and its points run outside the run record; nothing is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.sidecar.options import ACCURACY_WHY
from tests.support.sidecar import call, sidecar

ACCURACY = {"accuracy": "gsm8k", "accuracy_data": "/etc/passwd", "accuracy_shots": "/etc/hosts"}
RUN = {"conc": "1,2", "isl": 64, "osl": 16, **ACCURACY}
DOCUMENT = {
    "conc": [1, 2],
    "workload": {"isl": 64, "osl": 16},
    "lanes": [{"name": "a"}, {"name": "b", **ACCURACY}],
}


@pytest.mark.parametrize(
    ("body", "where"), [(RUN, ""), (DOCUMENT, "sweep document: lanes[1] (b): ")]
)
async def test_accuracy_is_refused_with_one_400_line(
    tmp_path: Path, body: dict[str, Any], where: str
) -> None:
    async with sidecar(tmp_path, "http://127.0.0.1:9") as client:
        status, answer = await call(client, "POST", "/v1/runs", body)
        assert status == 400, answer
        assert answer["error"].endswith(ACCURACY_WHY) and "\n" not in answer["error"]
        assert where in answer["error"]
        assert (await call(client, "GET", "/v1/runs"))[1]["runs"] == []
