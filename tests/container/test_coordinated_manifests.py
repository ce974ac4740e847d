"""The coordinator's examples: the Indexed Job with its headless Service, the JobSet and
the Slurm batch script. Each validates against the API schemas (the JobSet against its
CRD's schema at JobSet v0.12.0, vendored in tests/fixtures/jobset_v0.12.0, and its Jobs
against batch/v1's as well), and each pod's or task's
arguments, with the variables its scheduler sets, give loadgen the shard it is and shard
0's name (loadgen's own parser, as the pod would run it)."""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
from typing import Any

import pytest
import yaml

from loadgen.config.args import spec_from_argv
from tests.support.paths import ROOT

DOCKER = ROOT / "docker"
# openAPIV3Schema of jobset.x-k8s.io/v1alpha2 as the CRD of release v0.12.0 declares it
JOBSET_SCHEMA = ROOT / "tests" / "fixtures" / "jobset_v0.12.0" / "jobsets.v1alpha2.openapi.json"
K8S_VERSION = "1.30"
TOKEN = {"LOADGEN_COORDINATOR_TOKEN": "t"}


def documents(path: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((DOCKER / path).read_text()) if d}


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    out = []
    for arg in args:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        assert "$(" not in arg, arg
        out.append(arg)
    return out


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def from_downward(container: dict[str, Any], name: str) -> str:
    entry = next(e for e in container["env"] if e["name"] == name)
    return str(entry["valueFrom"]["fieldRef"]["fieldPath"])


def test_indexed_job_shards_find_shard_0_through_the_headless_service() -> None:
    docs = documents("k8s/coordinated.yaml")
    service, job = docs["Service"], docs["Job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    count = job["spec"]["completions"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == count
    assert service["spec"]["clusterIP"] == "None"
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    env = plain_env(container)
    assert env["LOADGEN_SHARD_COUNT"] == str(count)
    assert env["LOADGEN_SUBDOMAIN"] == pod["subdomain"]
    assert "job-completion-index" in from_downward(container, "JOB_COMPLETION_INDEX")
    token = next(e for e in container["env"] if e["name"] == "LOADGEN_COORDINATOR_TOKEN")
    assert "secretKeyRef" in token["valueFrom"]  # the secret is never in the manifest
    (port,) = service["spec"]["ports"]
    for index in range(count):
        seen = {
            **env,
            **TOKEN,
            "JOB_COMPLETION_INDEX": str(index),
            "HOSTNAME": f"{job['metadata']['name']}-{index}",  # an Indexed Job pod's name
        }
        spec = spec_from_argv(expand(container["args"], seen), seen).processes
        assert (spec.shard_index, spec.shard_count, spec.shard_source) == (
            index,
            count,
            "kubernetes",
        )
        assert spec.coordinator_host == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
        assert spec.coordinator_port == port["port"] == container["ports"][0]["containerPort"]


def jobset_jobs() -> list[tuple[str, int, dict[str, Any]]]:
    jobset = documents("k8s/jobset/coordinated-jobset.yaml")["JobSet"]
    return [(r["name"], r["replicas"], r["template"]) for r in jobset["spec"]["replicatedJobs"]]


@pytest.mark.parametrize("name,replicas,template", jobset_jobs(), ids=lambda v: str(v)[:12])
def test_the_jobsets_jobs_are_valid_batch_v1_jobs(
    name: str, replicas: int, template: dict[str, Any]
) -> None:
    import kubernetes_validate

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, **template}
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    claim = documents("k8s/jobset/coordinated-jobset.yaml")["PersistentVolumeClaim"]
    kubernetes_validate.validate(claim, K8S_VERSION, strict=True)


def strict(schema: Any) -> Any:
    """`schema` with every object that lists its properties closed to others, as the API
    server's strict field validation (kubectl's default) refuses an unknown field; an
    object marked x-kubernetes-preserve-unknown-fields stays open."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    # a `properties` map's keys are field names, not keywords: only its values are schemas
    closed = {key: strict(value) for key, value in schema.items() if key != "properties"}
    if isinstance(schema.get("properties"), dict):
        closed["properties"] = {name: strict(v) for name, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            closed["additionalProperties"] = False
    return closed


def jobset_errors(jobset: dict[str, Any]) -> list[str]:
    # jsonschema comes with kubernetes-validate (the test extra), which validates with it
    import jsonschema

    schema = strict(json.loads(JOBSET_SCHEMA.read_text()))
    validator = jsonschema.Draft4Validator(schema)  # OpenAPI 3.0's schema objects: draft 4's
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(jobset)]


def test_the_jobset_is_valid_against_its_crds_schema_at_a_pinned_release() -> None:
    jobset = documents("k8s/jobset/coordinated-jobset.yaml")["JobSet"]
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset_errors(jobset) == []
    # the check can fail: a misspelled field and a wrong type are each refused
    typo = copy.deepcopy(jobset)
    typo["spec"]["network"]["enableDNSHostname"] = True
    assert any("enableDNSHostname" in e for e in jobset_errors(typo))
    wrong = copy.deepcopy(jobset)
    wrong["spec"]["replicatedJobs"][0]["replicas"] = "1"
    assert any("replicas" in e for e in jobset_errors(wrong))


def test_jobset_shards_are_the_global_job_indices_and_shard_0_alone_keeps_results() -> None:
    docs = documents("k8s/jobset/coordinated-jobset.yaml")
    jobset = docs["JobSet"]
    name = jobset["metadata"]["name"]
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    jobs = jobset_jobs()
    total = sum(replicas for _, replicas, _ in jobs)
    first_job = jobs[0][0]
    global_index = 0
    for job_name, replicas, template in jobs:
        pod = template["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert template["spec"]["completions"] == 1  # one pod per Job: its global index
        assert "job-global-index" in from_downward(container, "JOB_GLOBAL_INDEX")
        assert "global-replicas" in from_downward(container, "JOBSET_GLOBAL_REPLICAS")
        env = plain_env(container)
        assert env["LOADGEN_COORDINATOR_JOB"] == first_job
        volumes = {v["name"]: v for v in pod["volumes"]}
        on_claim = "persistentVolumeClaim" in volumes["results"]
        assert on_claim == (job_name == first_job), job_name
        for _ in range(replicas):
            seen = {
                **env,
                **TOKEN,
                "JOBSET_NAME": name,
                "JOB_GLOBAL_INDEX": str(global_index),
                "JOBSET_GLOBAL_REPLICAS": str(total),
                "REPLICATED_JOB_NAME": job_name,
            }
            spec = spec_from_argv(expand(container["args"], seen), seen).processes
            assert (spec.shard_index, spec.shard_count) == (global_index, total)
            assert spec.coordinator_host == f"{name}-{first_job}-0-0.{name}"
            global_index += 1
    assert docs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_the_sbatch_example_runs_one_shard_per_task_with_the_first_node_coordinating() -> None:
    path = DOCKER / "slurm" / "loadgen-coordinated.sbatch"
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    text = path.read_text()
    ntasks = int(re.search(r"#SBATCH --ntasks=(\d+)", text).group(1))  # type: ignore[union-attr]
    command = text.split("\nsrun ", 1)[1].replace("\\\n", " ")
    words = shlex.split(command.splitlines()[0])
    argv = words[words.index("loadgen") + 1 :]
    argv = [
        w.replace('"${BASE_URL:-http://vllm-router:8000}"', "http://vllm-router:8000")
        .replace("${BASE_URL:-http://vllm-router:8000}", "http://vllm-router:8000")
        .replace("$RESULTS", "/tmp/r")
        for w in argv
    ]
    for task in range(ntasks):
        env = {
            **TOKEN,
            "SLURM_PROCID": str(task),
            "SLURM_NTASKS": str(ntasks),
            "SLURM_JOB_NODELIST": "gpu[07-10]",
        }
        spec = spec_from_argv(argv, env).processes
        assert (spec.shard_index, spec.shard_count, spec.shard_source) == (task, ntasks, "slurm")
        assert spec.coordinator_host == "gpu07"
