"""The sidecar takes a sweep file's document (YAML or JSON): its lanes run one after
another into the run's results/<lane>/, against the sidecar's own target."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.support.sidecar import call, sidecar, simulator, wait_for

SWEEP_YAML = b"""
workload: {isl: 64, osl: 16, encoder: raw, prompts-per-conc: 2, warmup-per-conc: 0}
spec-tokens: 2
lanes:
  - name: short
    conc: [1, 2]
  - name: long
    conc: 2
    workload: {osl: 24}
"""


async def test_a_sweep_document_runs_its_lanes_into_one_tree(tmp_path: Path) -> None:
    async with simulator() as target, sidecar(tmp_path, target) as client:
        async with client.post(
            "/v1/runs", data=SWEEP_YAML, headers={"Content-Type": "application/yaml"}
        ) as response:
            started = await response.json()
            assert response.status == 202, started
        run = await wait_for(client, started["id"], states={"succeeded"})
        assert run["progress"]["points_done"] == run["progress"]["points_total"] == 3
        status, results = await call(client, "GET", f"/v1/runs/{started['id']}/results")
        assert status == 200
        names = {f["name"] for f in results["files"]}
        assert {
            "lanes.json",
            "sweep.yaml",
            "short/conc_1.json",
            "short/conc_2.json",
            "long/conc_2.json",
            "long/requests_conc_2.jsonl",
        } <= names
        points = {r["file"]: r["result"] for r in results["results"]}
        assert points["long/conc_2.json"]["output_len"] == 24
        assert points["short/conc_2.json"]["output_len"] == 16
        assert points["short/conc_1.json"]["completed"] == 2
        async with client.get(f"/v1/runs/{started['id']}/files/lanes.json") as response:
            lanes = orjson.loads(await response.read())["lanes"]
        assert [(lane["name"], lane["state"]) for lane in lanes] == [
            ("short", "succeeded"),
            ("long", "succeeded"),
        ]


async def test_a_sweep_document_cannot_choose_the_target(tmp_path: Path) -> None:
    async with simulator() as target, sidecar(tmp_path, target) as client:
        document = {
            "conc": 1,
            "isl": 64,
            "osl": 16,
            "encoder": "raw",
            "lanes": [{"name": "a"}, {"name": "b", "target": {"base-url": "http://x"}}],
        }
        status, body = await call(client, "POST", "/v1/runs", document)
        assert status == 400
        assert body["error"].startswith(
            "sweep document: lanes[1].target.base-url: not accepted over the API"
        )
        status, body = await call(client, "POST", "/v1/runs", {"lanes": []})
        assert status == 400 and "lanes: empty" in body["error"]
        async with client.post(
            "/v1/runs", data=b"lanes: [", headers={"Content-Type": "application/yaml"}
        ) as response:
            assert response.status == 400
            assert "not valid YAML" in (await response.json())["error"]
