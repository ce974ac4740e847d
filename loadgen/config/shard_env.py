"""`--shard auto` and `--coordinator auto`: a shard's index, the shard count and shard 0's
host name, from the variables its scheduler sets (pure: a mapping in, a Placement out).

Each scheduler, the first that matches in this order:

- JobSet: `JOBSET_NAME` and, one pod per Job, `JOB_GLOBAL_INDEX` of
  `JOBSET_GLOBAL_REPLICAS` (the manifest passes the pod's `jobset.sigs.k8s.io/jobset-name`
  label and `job-global-index` / `global-replicas` annotations through the downward
  API): the first replicated Job (docker/k8s/jobset/: `coordinator`, 1 replica, the only
  one with the results volume) holds shard 0, whose name is
  `<jobset>-<LOADGEN_COORDINATOR_JOB>-0-0` under the JobSet's headless Service (named
  after the JobSet). Without the global index: `JOB_COMPLETION_INDEX` of one Indexed Job.
- Kubernetes Indexed Job: `JOB_COMPLETION_INDEX`; shard 0 is `<job>-0` under the pod's
  subdomain, the headless Service the manifest names in `LOADGEN_SUBDOMAIN`.
- Slurm: `SLURM_PROCID` of `SLURM_NTASKS`; shard 0's host is the first node of
  `SLURM_JOB_NODELIST` (task 0 runs there under srun's default block distribution).
- Open MPI: `OMPI_COMM_WORLD_RANK` of `OMPI_COMM_WORLD_SIZE` (no host: give
  --coordinator HOST:PORT).

The count: Slurm and Open MPI say it. Kubernetes does not hand a pod its Job's
`completions`, so the manifests set `LOADGEN_SHARD_COUNT` to the same number
(docker/k8s/); a shard without it stops with one line rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from loadgen.config.parsers import SpecError

COUNT_VAR = "LOADGEN_SHARD_COUNT"
SUBDOMAIN_VAR = "LOADGEN_SUBDOMAIN"


@dataclass(frozen=True, slots=True)
class Placement:
    index: int
    count: int
    source: str  # run.json's shard_source: where the index came from
    coordinator_host: str | None  # shard 0's host name, where the scheduler tells it


def _int(env: Mapping[str, str], name: str) -> int:
    text = env.get(name, "")
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"--shard auto: ${name} is {text!r}, not a whole number") from None


def _k8s_count(env: Mapping[str, str], source: str) -> int:
    if COUNT_VAR not in env:
        raise SpecError(
            f"--shard auto ({source}): ${COUNT_VAR} is not set; set it in the pod "
            "template to the Job's completions (Kubernetes does not tell a pod the count)"
        )
    return _int(env, COUNT_VAR)


def _indexed_host(hostname: str, index: int, subdomain: str | None) -> str | None:
    """`<job>-<index>` -> `<job>-0[.<subdomain>]`; None when the name is not of that form."""
    suffix = f"-{index}"
    if not hostname.endswith(suffix) or subdomain is None:
        return None
    return f"{hostname[: -len(suffix)]}-0.{subdomain}"


def _jobset(env: Mapping[str, str]) -> Placement:
    jobset = env["JOBSET_NAME"]
    first = env.get("LOADGEN_COORDINATOR_JOB") or env.get("REPLICATED_JOB_NAME")
    host = f"{jobset}-{first}-0-0.{jobset}" if first else None
    if "JOB_GLOBAL_INDEX" in env:
        count = (
            _int(env, "JOBSET_GLOBAL_REPLICAS")
            if "JOBSET_GLOBAL_REPLICAS" in env
            else _k8s_count(env, "JobSet")
        )
        return Placement(_int(env, "JOB_GLOBAL_INDEX"), count, "jobset", host)
    index = _int(env, "JOB_COMPLETION_INDEX")
    return Placement(index, _k8s_count(env, "JobSet"), "jobset", host)


def _indexed_job(env: Mapping[str, str]) -> Placement:
    index = _int(env, "JOB_COMPLETION_INDEX")
    host = _indexed_host(env.get("HOSTNAME", ""), index, env.get(SUBDOMAIN_VAR))
    return Placement(index, _k8s_count(env, "Kubernetes Indexed Job"), "kubernetes", host)


def _slurm(env: Mapping[str, str]) -> Placement:
    count = _int(env, "SLURM_NTASKS") if "SLURM_NTASKS" in env else 0
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    host = expand_nodelist(nodes)[0] if nodes else None
    return Placement(_int(env, "SLURM_PROCID"), count, "slurm", host)


def _openmpi(env: Mapping[str, str]) -> Placement:
    return Placement(
        _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE"), "openmpi", None
    )


def placement(env: Mapping[str, str]) -> Placement:
    """This shard's place, from the first scheduler whose variables are set."""
    if "JOBSET_NAME" in env and ("JOB_GLOBAL_INDEX" in env or "JOB_COMPLETION_INDEX" in env):
        found = _jobset(env)
    elif "JOB_COMPLETION_INDEX" in env:
        found = _indexed_job(env)
    elif "SLURM_PROCID" in env:
        found = _slurm(env)
    elif "OMPI_COMM_WORLD_RANK" in env:
        found = _openmpi(env)
    else:
        raise SpecError(
            "--shard auto: no scheduler's variables found (JOB_COMPLETION_INDEX, "
            "JOBSET_NAME with JOB_GLOBAL_INDEX, SLURM_PROCID, OMPI_COMM_WORLD_RANK); give "
            "--shard I/N"
        )
    if not 0 <= found.index < found.count:
        raise SpecError(
            f"--shard auto ({found.source}): index {found.index} of {found.count} shards; "
            "need 0 <= index < count"
        )
    return found


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(text: str) -> list[str]:
    """`a[1-2],b` -> [`a[1-2]`, `b`]: commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand_one(name: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", name)
    if match is None:
        return [name]
    head, tail = name[: match.start()], name[match.end() :]
    names: list[str] = []
    for item in match.group(1).split(","):
        bounds = _RANGE.match(item.strip())
        if bounds is None:
            raise SpecError(f"--coordinator auto: cannot read Slurm node list entry {name!r}")
        low, high = bounds.group(1), bounds.group(2) or bounds.group(1)
        width = len(low)  # node[01-10]: the zero padding is part of the name
        for number in range(int(low), int(high) + 1):
            names += _expand_one(f"{head}{number:0{width}d}{tail}")
    return names


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list (`gpu[01-03,07],login1`) as host names, in order."""
    return [host for part in _split_top(nodelist.strip()) for host in _expand_one(part)]
