"""What the sidecar accepts as a run: the CLI's options as JSON, or a sweep file's document
(JSON or YAML), validated by the CLI's own parsers and aimed at the sidecar's target."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from loadgen.config.args import option_dest, spec_from_options
from loadgen.config.spec import RunSpec, SpecError
from loadgen.config.sweepfile import SweepPlan, load_yaml, parse_sweep

YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
RESERVED_WHY = ("not accepted over the API (the sidecar sets the target, model and results "
                "directory itself)")
# Options the sidecar sets itself (the target, where results go) or does not accept from
# the network (paths on its disk, credentials): normalised names (`-` -> `_`).
RESERVED_OPTIONS = frozenset({
    "base_url", "model", "sim", "sim_args", "results", "results_dir", "dataset", "tokenizer",
    "metrics_port", "metrics_host", "api_key", "no_progress", "shard_sync",
    # their vLLM-compatible aliases, and URLs the sidecar would fetch
    "host", "port", "served_model_name", "dataset_path", "result_dir", "server_metrics",
    # the sidecar owns its results directories and its target's process
    "resume", "overwrite", "server_pid",
})


class Target(Protocol):
    """Where the sidecar's runs go (its ServiceConfig): the server and its model."""

    @property
    def target(self) -> str: ...
    @property
    def model(self) -> str: ...


def parse_body(raw: bytes, content_type: str) -> Any:
    """The request body as data: YAML for a YAML content type, JSON otherwise."""
    if content_type in YAML_TYPES:
        return load_yaml(raw.decode("utf-8", "replace"), source="body")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SpecError(f"body is not JSON: {exc}") from None


def spec_for(config: Target, options: Mapping[str, Any], results_dir: Path) -> RunSpec:
    """The caller's options, validated by the CLI's own code, aimed at our target."""
    reserved = sorted(k for k in options if k.replace("-", "_") in RESERVED_OPTIONS)
    if reserved:
        raise SpecError(f"{', '.join(reserved)}: {RESERVED_WHY}")
    return spec_from_options({**options, "base_url": config.target, "model": config.model,
                              "results": str(results_dir), "no_progress": True})


def plan_for(config: Target, document: Mapping[str, Any], results_dir: Path) -> SweepPlan:
    """A sweep file's document, every lane aimed at our target, results in results_dir."""
    refused = {option_dest(name): RESERVED_WHY for name in RESERVED_OPTIONS}
    return parse_sweep(document, source="sweep document", results_dir=results_dir,
                       forbidden=refused, fixed={"base_url": config.target,
                                                 "model": config.model, "no_progress": True})

