"""What the sidecar accepts as a run: the CLI's options as JSON, or a sweep file's document
(JSON or YAML), validated by the CLI's own parsers and aimed at the sidecar's target.

Every file a run reads or writes stays below the sidecar's data directory: options naming
a directory are refused outright (RESERVED_OPTIONS), and the ones that still shape a path
(`label`, `result-filename`) are checked on the built RunSpec, resolved, so `..`, an
absolute path or a symbolic link planted below the data directory cannot lead out.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from loadgen.config.args import spec_from_options
from loadgen.config.decode import option_dest
from loadgen.config.spec import RunSpec, SpecError, VllmResultOptions
from loadgen.config.sweep_yaml import check_document, load_yaml
from loadgen.config.sweepfile import SECTIONS, SweepPlan, parse_sweep
from loadgen.config.table import RUN_FIELDS

YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
RESERVED_WHY = (
    "not accepted over the API (the sidecar sets the target, model and results directory itself)"
)
# Options the sidecar sets itself (the target, where results go) or does not accept from
# the network (paths on its disk, credentials): normalised names (`-` -> `_`).
RESERVED_OPTIONS = frozenset(
    {
        "base_url",
        "model",
        "sim",
        "sim_args",
        "results",
        "results_dir",
        "dataset",
        "tokenizer",
        "metrics_port",
        "metrics_host",
        "api_key",
        "no_progress",
        "shard_sync",
        # a listening port and a secret are a command line's, not a network option's
        "coordinator",
        "coordinator_token",
        "coordinator_token_file",
        "coordinator_wait",
        # their vLLM-compatible aliases, and URLs the sidecar would fetch
        "host",
        "port",
        "served_model_name",
        "dataset_path",
        "result_dir",
        "server_metrics",
        "gpu_metrics",
        "gpu_power_csv",
        # the sidecar owns its results directories and its target's process
        "resume",
        "overwrite",
        "server_pid",
        # the sidecar never launches a process: its target is the server it was given
        *(LAUNCH_OPTIONS := ("serve_cmd", "serve_env", "serve_cwd", "serve_timeout")),
    }
)
LAUNCH_WHY = (
    "not accepted over the API (the sidecar never launches processes: it measures the "
    "server it was started for; run `loadgen --serve-cmd ...` on a command line)"
)


def refused_why(name: str) -> str:
    """Why a reserved option (normalised name) is refused."""
    return LAUNCH_WHY if name in LAUNCH_OPTIONS else RESERVED_WHY


class Target(Protocol):
    """Where the sidecar's runs go (its ServiceConfig): the server and its model."""

    @property
    def target(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def data_dir(self) -> Path: ...


def parse_body(raw: bytes, content_type: str) -> Any:
    """The request body as data: YAML for a YAML content type, JSON otherwise."""
    if content_type in YAML_TYPES:
        return load_yaml(raw.decode("utf-8", "replace"), source="body")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SpecError(f"body is not JSON: {exc}") from None
    check_document(data, source="body")  # the bounds the YAML loader applies
    return data


def spec_for(config: Target, options: Mapping[str, Any], results_dir: Path) -> RunSpec:
    """The caller's options, validated by the CLI's own code, aimed at our target."""
    reserved = sorted(k for k in options if k.replace("-", "_") in RESERVED_OPTIONS)
    if reserved:
        raise SpecError(f"{', '.join(reserved)}: {refused_why(reserved[0].replace('-', '_'))}")
    check_known(options)
    placed = place_paths(options, config.data_dir, results_dir, "")
    with files_not_described(options):
        spec = spec_from_options(
            {
                **placed,
                "base_url": config.target,
                "model": config.model,
                "results": str(results_dir),
                "no_progress": True,
            }
        )
    check_confined(spec, config.data_dir, "")
    _refuse_find_max(spec, "")
    _refuse_accuracy(spec, "")
    return spec


# A search is a series of one-point runs in directories of their own, chosen as it goes:
# the run record (points done of points planned, the results listing) cannot follow it.
FIND_MAX_WHY = (
    "find_max: not through the sidecar (its run record follows a fixed list of points, "
    "a capacity search chooses its probes as it goes); run `loadgen --find-max ...` "
    "on a command line, or POST the concurrencies to measure"
)


def _refuse_find_max(spec: RunSpec, where: str) -> None:
    if spec.load.find_max is not None:
        raise SpecError(where + FIND_MAX_WHY)


# Its points run after the sweep, outside the run record's list of points, and its files
# are not among the paths confined to the data directory.
ACCURACY_WHY = (
    "accuracy: not through the sidecar (yet); run `loadgen --accuracy gsm8k ...` on a command line"
)


def _refuse_accuracy(spec: RunSpec, where: str) -> None:
    if spec.scoring.accuracy is not None:
        raise SpecError(where + ACCURACY_WHY)


@functools.cache
def allowed_options() -> tuple[str, ...]:
    """The run options a caller may send: the table's run options, less the sidecar's own."""
    return tuple(sorted(RUN_FIELDS.keys() - RESERVED_OPTIONS))


def check_known(options: Mapping[str, Any]) -> None:
    """Every unknown key in one 400, each with its nearest option, and only options the
    API accepts offered as allowed."""
    allowed = allowed_options()
    unknown = [k for k in options if option_dest(k) not in allowed]
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(option_dest(key), allowed, n=1, cutoff=0.6)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise SpecError(
        f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(named)}; "
        f"allowed: {', '.join(allowed)}"
    )


def plan_for(config: Target, document: Mapping[str, Any], results_dir: Path) -> SweepPlan:
    """A sweep file's document, every lane aimed at our target, results in results_dir."""
    refused = {option_dest(name): refused_why(name) for name in RESERVED_OPTIONS}
    placed = _place_document(document, config.data_dir, results_dir)
    with files_not_described(document):
        plan = parse_sweep(
            placed,
            source="sweep document",
            results_dir=results_dir,
            forbidden=refused,
            fixed={"base_url": config.target, "model": config.model, "no_progress": True},
        )
    for index, lane in enumerate(plan.lanes):
        where = f"sweep document: lanes[{index}] ({lane.name}): "
        check_confined(lane.spec, config.data_dir, where)
        _refuse_find_max(lane.spec, where)
        _refuse_accuracy(lane.spec, where)
    return plan


class Escapes(SpecError):
    """A run option names a place outside the sidecar's data directory (HTTP 400)."""


# Options a caller may give that name a file or directory, and what a relative name is
# relative to: the run's own results directory (what it writes) or the data directory
# (what the operator put there for runs to read). Placed on the raw option, before
# anything is built, so no file is opened or created anywhere else.
IN_RUN, IN_DATA = "the run's results directory", "the sidecar's data directory"
PLACED_OPTIONS = {"aiperf_artifacts": IN_RUN, "golden_al": IN_DATA}


def place_paths(
    options: Mapping[str, Any], data_dir: Path, run_dir: Path, where: str
) -> dict[str, Any]:
    """`options` with each PLACED_OPTIONS value made a path below its base; Escapes
    for a value that is not a plain relative name that stays there (links followed)."""
    placed = dict(options)
    for key, value in options.items():
        base_name = PLACED_OPTIONS.get(option_dest(key)) if isinstance(key, str) else None
        if base_name is None or value is None:
            continue
        base = run_dir if base_name is IN_RUN else data_dir
        text = value if isinstance(value, str) else ""
        target = (base / text).resolve() if text and "\0" not in text else None
        if Path(text).is_absolute() or target is None or not target.is_relative_to(base.resolve()):
            raise Escapes(
                f"{where}{key} {value!r}: not a name inside {base_name}; the sidecar reads "
                f"and writes only there: give a relative name"
            )
        placed[key] = str(target)
    return placed


def _place_document(document: Mapping[str, Any], data_dir: Path, run_dir: Path) -> dict[str, Any]:
    """A sweep document with place_paths applied where options sit: the top level, each
    lane, and their `target:` / `workload:` groups."""

    def level(mapping: Mapping[str, Any], where: str) -> dict[str, Any]:
        placed = place_paths(mapping, data_dir, run_dir, where)
        for section in SECTIONS:
            if isinstance(placed.get(section), Mapping):
                placed[section] = place_paths(placed[section], data_dir, run_dir, where)
        return placed

    placed = level(document, "sweep document: ")
    if isinstance(placed.get("lanes"), list):
        placed["lanes"] = [
            level(lane, f"sweep document: lanes[{i}]: ") if isinstance(lane, Mapping) else lane
            for i, lane in enumerate(placed["lanes"])
        ]
    return placed


def _golden_al_given(options: Any) -> bool:
    """Whether golden-al is set anywhere options sit (the top, lanes, groups)."""
    if isinstance(options, list):
        return any(_golden_al_given(item) for item in options)
    if not isinstance(options, Mapping):
        return False
    return any(
        option_dest(k) == "golden_al" or _golden_al_given(v)
        for k, v in options.items()
        if isinstance(k, str) and option_dest(k) != "extra_body"
    )


@contextlib.contextmanager
def files_not_described(options: Mapping[str, Any]) -> Iterator[None]:
    """A golden-al file that cannot be used is one line that tells nothing of the file
    (whether it exists, its keys or values: the caller is not its owner)."""
    try:
        yield
    except SpecError as exc:
        if "--golden-al " in str(exc) and _golden_al_given(options):
            raise SpecError(
                "golden-al: the file is missing, unreadable, or has no curve for this "
                "model, thinking mode and K; the sidecar does not describe files on its "
                "disk: check it with `loadgen --golden-al FILE` where it is"
            ) from None
        raise


def _paths(spec: RunSpec) -> list[tuple[str, str, Path]]:
    """(option, its value, the path it leads to) for every place the run may touch."""
    found = [
        (option, str(path), path)
        for option, path in (
            ("results", spec.output.results_dir),
            ("dataset", spec.workload.dataset),
            ("shard-sync", spec.processes.shard_sync),
            ("aiperf-artifacts", spec.output.aiperf_artifacts),
            ("golden-al", spec.scoring.golden_al.path if spec.scoring.golden_al else None),
        )
        if path is not None
    ]
    if spec.target.tokenizer is not None:  # a local path or a Hub id: either stays inside
        found.append(("tokenizer", spec.target.tokenizer, Path(spec.target.tokenizer)))
    if spec.output.vllm_result is not None:
        found += _result_file_paths(
            spec.output.vllm_result, spec.output.results_dir or Path("results")
        )
    return found


def _result_file_paths(
    options: VllmResultOptions, results_dir: Path
) -> list[tuple[str, str, Path]]:
    directory = options.result_dir or results_dir
    found = [("result-dir", str(directory), directory)]
    # with what vLLM appends (`-…`, `.json`): a bare `..` label names no parent directory
    if options.label is not None:
        found.append(("label", options.label, directory / f"{options.label}-x"))
    if options.filename is not None:
        found.append(("result-filename", options.filename, directory / f"{options.filename}.json"))
    return found


def check_confined(spec: RunSpec, data_dir: Path, where: str) -> None:
    """Escapes unless every path of the run resolves (links followed) below data_dir."""
    root = data_dir.resolve()
    for option, value, path in _paths(spec):
        if "\0" in value or not path.resolve().is_relative_to(root):
            raise Escapes(
                f"{where}{option} {value!r}: leads outside the sidecar's data "
                "directory; the sidecar reads and writes only below it: give a "
                "plain name"
            )
