"""--shard auto and --coordinator auto, from each scheduler's own variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.parsers import SpecError
from loadgen.config.shard_env import Placement, expand_nodelist, placement
from loadgen.results.results_dir import settings_of

BASE = ["--base-url", "http://127.0.0.1:9", "--conc", "4", "--isl", "64", "--osl", "16"]
AUTO = [*BASE, "--shard", "auto", "--coordinator", "auto"]

INDEXED_JOB = {
    "JOB_COMPLETION_INDEX": "3",
    "LOADGEN_SHARD_COUNT": "4",
    "HOSTNAME": "bench-3",
    "LOADGEN_SUBDOMAIN": "bench-shards",
}
JOBSET_GLOBAL = {
    "JOBSET_NAME": "bench",
    "JOB_GLOBAL_INDEX": "3",
    "JOBSET_GLOBAL_REPLICAS": "5",
    "LOADGEN_COORDINATOR_JOB": "coordinator",
    "REPLICATED_JOB_NAME": "shards",
    "JOB_COMPLETION_INDEX": "0",  # each shard's Job has one pod
}
JOBSET = {
    "JOB_COMPLETION_INDEX": "2",
    "LOADGEN_SHARD_COUNT": "4",
    "JOBSET_NAME": "bench",
    "REPLICATED_JOB_NAME": "shards",
    "HOSTNAME": "bench-shards-0-2",
}
SLURM = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_JOB_NODELIST": "gpu[07-09,11],login2",
}
OPENMPI = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (INDEXED_JOB, Placement(3, 4, "kubernetes", "bench-0.bench-shards")),
        (JOBSET, Placement(2, 4, "jobset", "bench-shards-0-0.bench")),
        (JOBSET_GLOBAL, Placement(3, 5, "jobset", "bench-coordinator-0-0.bench")),
        (SLURM, Placement(5, 8, "slurm", "gpu07")),
        (OPENMPI, Placement(1, 3, "openmpi", None)),
        # a Slurm step inside a Kubernetes pod is not a thing; an Indexed Job wins over
        # stray Open MPI variables a base image may set
        ({**INDEXED_JOB, **OPENMPI}, Placement(3, 4, "kubernetes", "bench-0.bench-shards")),
    ],
    ids=["indexed-job", "jobset", "jobset-global", "slurm", "openmpi", "indexed-job-first"],
)
def test_each_scheduler_gives_the_index_count_and_shard_0s_host(
    env: dict[str, str], expected: Placement
) -> None:
    assert placement(env) == expected


def test_the_run_records_where_the_index_came_from() -> None:
    spec = spec_from_argv(AUTO, {**SLURM, "LOADGEN_COORDINATOR_TOKEN": "s"})
    processes = spec.processes
    assert (processes.shard_index, processes.shard_count) == (5, 8)
    assert (processes.coordinator_host, processes.coordinator_port) == ("gpu07", 29517)
    written = settings_of(spec)
    assert written["shard_source"] == "slurm" and "coordinator_token" not in written
    given = spec_from_argv([*BASE, "--shard", "1/2"], {})
    assert settings_of(given)["shard_source"] == "flag"


def test_auto_with_a_port_and_a_token_file(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-a-secret\n")
    spec = spec_from_argv(
        [
            *BASE,
            "--shard",
            "auto",
            "--coordinator",
            "auto:4000",
            "--coordinator-token-file",
            str(secret),
        ],
        INDEXED_JOB,
    )
    assert spec.processes.coordinator_host == "bench-0.bench-shards"
    assert spec.processes.coordinator_port == 4000
    assert spec.processes.coordinator_token == "from-a-secret"


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu[07-09,11],login2", ["gpu07", "gpu08", "gpu09", "gpu11", "login2"]),
        ("n[001-003]", ["n001", "n002", "n003"]),
        ("a1,b2", ["a1", "b2"]),
        ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
        ("single", ["single"]),
    ],
)
def test_slurm_node_lists_expand_in_order(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({}, "no scheduler's variables found"),
        ({"JOB_COMPLETION_INDEX": "1"}, "$LOADGEN_SHARD_COUNT is not set"),
        ({**SLURM, "SLURM_PROCID": "8"}, "index 8 of 8 shards"),
        ({**SLURM, "SLURM_PROCID": "x"}, "$SLURM_PROCID is 'x'"),
    ],
)
def test_what_is_missing_or_wrong_is_one_line(env: dict[str, str], words: str) -> None:
    with pytest.raises(SpecError) as raised:
        spec_from_argv([*BASE, "--shard", "auto"], env)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_coordinator_auto_needs_a_scheduler_that_names_shard_0() -> None:
    with pytest.raises(SpecError, match="give --coordinator HOST:PORT"):
        spec_from_argv(AUTO, {**OPENMPI, "LOADGEN_COORDINATOR_TOKEN": "s"})
    without_subdomain = {k: v for k, v in INDEXED_JOB.items() if k != "LOADGEN_SUBDOMAIN"}
    with pytest.raises(SpecError, match="LOADGEN_SUBDOMAIN"):
        spec_from_argv(AUTO, {**without_subdomain, "LOADGEN_COORDINATOR_TOKEN": "s"})
