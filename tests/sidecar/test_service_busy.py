"""The sidecar's answer to a POST while a run is active, over real sockets against the real
simulator: an invalid body is a 400 naming every unknown key (validation comes first), a
valid one a 409; the active run is untouched either way."""

from __future__ import annotations

from pathlib import Path

from loadgen.sidecar.options import RESERVED_OPTIONS, allowed_options
from tests.support.sidecar import LONG, QUICK, call, sidecar, simulator, wait_for


async def test_an_invalid_post_while_busy_is_400_not_409(tmp_path: Path) -> None:
    async with simulator(step_ms=20.0) as target, sidecar(tmp_path, target) as client:
        status, started = await call(client, "POST", "/v1/runs", LONG)
        assert status == 202, started
        await wait_for(client, started["id"], states={"running"}, min_requests=1)

        status, answer = await call(client, "POST", "/v1/runs", {**QUICK, "isll": 3, "bogus": 1})
        assert status == 400, answer
        head, allowed = answer["error"].split("; allowed: ")
        assert head == "unknown options 'isll' (did you mean 'isl'?), 'bogus'"
        offered = set(allowed.split(", "))
        assert "isl" in offered and "conc" in offered
        assert offered.isdisjoint(RESERVED_OPTIONS)  # what the API refuses is not offered
        assert offered == set(allowed_options())

        status, answer = await call(client, "POST", "/v1/runs", {**QUICK, "conc": "0..4"})
        assert status == 400 and "--conc" in answer["error"], answer
        status, answer = await call(client, "POST", "/v1/runs", {**QUICK, "resume": "/srv"})
        assert status == 400 and "resume" in answer["error"], answer
        status, answer = await call(client, "POST", "/v1/runs", QUICK)
        assert status == 409 and started["id"] in answer["error"], answer

        status, run = await call(client, "GET", f"/v1/runs/{started['id']}")
        assert status == 200 and run["state"] == "running"
        status, listing = await call(client, "GET", "/v1/runs")
        assert [r["id"] for r in listing["runs"]] == [started["id"]]  # nothing else started
        status, cancelled = await call(client, "DELETE", f"/v1/runs/{started['id']}")
        assert status == 200 and cancelled["state"] == "cancelled"
