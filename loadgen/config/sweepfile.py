"""Sweep files (`loadgen --config sweep.yaml`): a matrix of lanes, each lane one run.

    results: results/mtp-vs-stp    # the tree: each lane's results go to <results>/<name>
    conc: 1,4,16                   # any run flag here is shared by every lane
    workload: {isl: 1024, osl: 256}
    lanes:
      - name: no-spec              # [A-Za-z0-9._-]: the lane's directory
        target: {sim: true, sim-args: "--spec-tokens 0"}
      - name: mtp
        target: {sim: true, sim-args: "--spec-tokens 2"}

Every key is a run flag's long name (`-` or `_`), with the value the flag takes (lists
and mappings where the flag takes a list: conc, percentiles, header, slo, extra-body,
sim-args). `target:` and `workload:` group the flags whose entries name that section
(the server's; the requests' and their arrivals'); the others (num-gpus, slo,
spec-tokens, ...) sit beside them. A lane's keys override the
top level's; argv flags given with --config override both. Each lane is decoded with the
run options' table argv is parsed with (config/decode.py), so it accepts and rejects the same
things, and ends in the same function (config/build_spec.py); every
error is one line naming the key path (`lanes[1].workload.isl: ...`), exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from loadgen.config.build_spec import default_results_dir, spec_from_values
from loadgen.config.decode import decode_options, decode_value, option_dest
from loadgen.config.redact import redact_options
from loadgen.config.spec import RunSpec, SpecError
from loadgen.config.sweep_yaml import (
    MAX_DOCUMENT_BYTES,
    SweepFileError,
    check_document,
    load_yaml,
    read_sweep_document,
)
from loadgen.config.table import GROUP_DESTS, RUN_FIELDS, argv_values

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "Lane",
    "SweepFileError",
    "SweepPlan",
    "check_document",
    "load_sweep",
    "load_yaml",
    "parse_config_argv",
    "parse_sweep",
    "read_sweep_document",
]

SECTIONS = ("target", "workload")  # the sections a document may group keys under
LANE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Keys a lane cannot set: its results directory is <tree>/<name>; live metrics would mix
# lanes that share a model and concurrency into one series.
LANE_REFUSED: Mapping[str, str] = {
    "results": "set once for the whole tree: put `results` at the top level (each lane "
    "writes <results>/<name>)",
    "metrics_port": "not available with a sweep file (lanes sharing a model and "
    "concurrency would mix in one series): run a lane alone with --metrics-port",
    "profile": "not in a sweep file (a rehearsal runs its points one at a time, each "
    "mandatory point's accuracy run straight after it): run `loadgen --profile "
    "mlperf-endpoints ...` alone",
}


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    spec: RunSpec
    options: dict[str, Any]  # the lane's resolved keys (dest -> value), credentials redacted


@dataclass(frozen=True, slots=True)
class SweepPlan:
    results_dir: Path  # the tree
    lanes: tuple[Lane, ...]
    document: dict[str, Any]  # as written, credentials redacted (kept with the results)

    @property
    def points(self) -> int:
        return sum(len(lane.spec.load.conc) for lane in self.lanes)


@dataclass(frozen=True, slots=True)
class _Key:
    value: Any  # as written
    where: str  # its key path
    decoded: Any  # as argparse gives the flag (None: the default)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


class _Resolver:
    """Flattens one level (top or lane) into dest -> its key, each value decoded."""

    def __init__(self, source: str, forbidden: Mapping[str, str]) -> None:
        self.source = source
        self.forbidden = forbidden

    def fail(self, where: str, message: str) -> SweepFileError:
        return SweepFileError(f"{self.source}: {where}: {message}")

    def level(
        self, mapping: Mapping[Any, Any], prefix: str, skip: frozenset[str]
    ) -> dict[str, _Key]:
        out: dict[str, _Key] = {}
        for key, value in mapping.items():
            where = f"{prefix}{key}"
            if not isinstance(key, str):
                raise self.fail(where, "keys must be setting names (strings)")
            if key in skip:
                continue
            if key in SECTIONS:
                if not isinstance(value, Mapping):
                    raise self.fail(where, f"expected a mapping of {key} settings, got {value!r}")
                for inner, inner_value in value.items():
                    self._add(out, str(inner), inner_value, f"{where}.{inner}", key)
            else:
                self._add(out, key, value, where, None)
        return out

    def _add(
        self, out: dict[str, _Key], key: str, value: Any, where: str, section: str | None
    ) -> None:
        dest = option_dest(key)
        allowed = GROUP_DESTS[section] if section else RUN_FIELDS
        if dest not in allowed:
            raise self.fail(where, self._unknown(key, section))
        if dest in self.forbidden:
            raise self.fail(where, self.forbidden[dest])
        if dest in out:
            raise self.fail(where, f"given twice (also at {out[dest].where})")
        try:
            decoded = None if value is None else decode_value(RUN_FIELDS[dest], value, where)
        except SpecError as exc:
            raise SweepFileError(f"{self.source}: {exc}") from None
        out[dest] = _Key(value, where, decoded)

    def _unknown(self, key: str, section: str | None) -> str:
        if section is None and key in ("name", "lanes"):
            return f"{key!r} belongs in a lane" if key == "name" else "only at the top level"
        names = sorted(_flag(d)[2:] for d in (GROUP_DESTS[section] if section else RUN_FIELDS))
        close = difflib.get_close_matches(key.replace("_", "-"), names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        other = [s for s in SECTIONS if s != section and option_dest(key) in GROUP_DESTS[s]]
        if other:
            hint = f"it is a {other[0]} setting (put it under {other[0]}:); " + hint
        what = f"{section} setting" if section else "setting"
        return f"unknown {what} {key!r}; {hint}allowed: {', '.join(names)}"


def _lane_name(lane: Mapping[Any, Any], where: str, seen: set[str], source: str) -> str:
    name = lane.get("name")
    if name is None:
        raise SweepFileError(f"{source}: {where}.name: required (the lane's directory name)")
    if not isinstance(name, str) or not LANE_NAME.match(name):
        raise SweepFileError(
            f"{source}: {where}.name: {name!r} must be 1-64 of A-Z a-z 0-9 "
            ". _ - (it names the lane's directory), starting with a letter "
            "or digit"
        )
    if name in seen:
        raise SweepFileError(f"{source}: {where}.name: {name!r} is used by another lane")
    seen.add(name)
    return name


def _spec_error(
    exc: SpecError, where: str, keys: Mapping[str, _Key], source: str
) -> SweepFileError:
    """The message, located at the key it is about when it names a flag the lane set."""
    message = str(exc)
    for flag in re.findall(r"--[a-z][a-z-]*", message):
        dest = flag[2:].replace("-", "_")
        if dest in keys:
            return SweepFileError(f"{source}: {keys[dest].where}: {message}")
    return SweepFileError(f"{source}: {where}: {message}")


def parse_sweep(
    document: Any,
    *,
    source: str,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    results_dir: Path | None = None,
    forbidden: Mapping[str, str] | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> SweepPlan:
    """Every lane of `document` as a validated RunSpec.

    overrides: argv flags applied to every lane, after the file (the CLI's extra flags).
    results_dir: the tree (else the document's `results`, else ./results/<timestamp>).
    forbidden: dest -> why the key is refused here (the sidecar refuses target keys).
    fixed: options set on every lane after everything else (the sidecar's target).
    """
    if not isinstance(document, Mapping):
        raise SweepFileError(
            f"{source}: expected a mapping with a `lanes` list at the top, "
            f"got {type(document).__name__}"
        )
    lanes = document.get("lanes")
    if not isinstance(lanes, list) or not lanes:
        raise SweepFileError(
            f"{source}: lanes: {'empty' if lanes == [] else 'missing'}; "
            "give a list of lanes, each a mapping with a name"
        )
    resolver = _Resolver(source, {**LANE_REFUSED, **(forbidden or {})})
    shared = resolver.level(document, "", frozenset({"lanes", "results"}))
    tree = _tree(document, source, results_dir, forbidden or {})
    # after the file: the command line's flags, then what the caller fixes
    last = {**argv_values(overrides), **decode_options(fixed or {})}
    seen: set[str] = set()
    planned = []
    for index, lane in enumerate(lanes):
        where = f"lanes[{index}]"
        if not isinstance(lane, Mapping):
            raise SweepFileError(f"{source}: {where}: expected a mapping with a name, got {lane!r}")
        name = _lane_name(lane, where, seen, source)
        keys = {**shared, **resolver.level(lane, f"{where}.", frozenset({"name"}))}
        values = {dest: key.decoded for dest, key in keys.items() if key.decoded is not None}
        values.update(last, results=tree / name)
        try:
            spec = spec_from_values(values, {} if env is None else env)
        except SpecError as exc:
            raise _spec_error(exc, f"{where} ({name})", keys, source) from None
        options = {dest: key.value for dest, key in keys.items()}
        planned.append(Lane(name, spec, redact_options(options)))
    planned = _own_artifacts(planned)
    planned = _comparable_outputs(planned)
    # the one rule (config/redact.py) at every level: lanes, `target:` groups, the top
    return SweepPlan(tree, tuple(planned), redact_options(document))


def _own_artifacts(lanes: list[Lane]) -> list[Lane]:
    """Lanes given one --aiperf-artifacts DIR write theirs in DIR/<lane name>: each run
    refuses a directory that holds another run's artifacts (results/artifacts_dir.py)."""
    shared = Counter(lane.spec.output.aiperf_artifacts for lane in lanes)
    return [
        dataclasses.replace(lane, spec=lane.spec.with_(aiperf_artifacts=root / lane.name))
        if (root := lane.spec.output.aiperf_artifacts) is not None and shared[root] > 1
        else lane
        for lane in lanes
    ]


def _comparable_outputs(lanes: list[Lane]) -> list[Lane]:
    """Lanes that send the same requests (one seed, one workload: the same prompts) with
    greedy sampling can be compared output for output (`loadgen compare`'s lossless
    check): each keeps its outputs (--record-outputs) without being asked."""
    first = lanes[0].spec
    comparable = (
        len(lanes) > 1
        and first.workload.temperature == 0
        and all(
            lane.spec.seed == first.seed and lane.spec.workload == first.workload for lane in lanes
        )
    )
    if not comparable:
        return lanes
    return [
        lane
        if lane.spec.output.record_outputs
        else dataclasses.replace(lane, spec=lane.spec.with_(record_outputs=True))
        for lane in lanes
    ]


def _tree(
    document: Mapping[str, Any], source: str, results_dir: Path | None, forbidden: Mapping[str, str]
) -> Path:
    value = document.get("results")
    if value is not None and "results" in forbidden:
        raise SweepFileError(f"{source}: results: {forbidden['results']}")
    if results_dir is not None:
        return results_dir
    if value is None:
        return default_results_dir()
    if not isinstance(value, str) or not value:
        raise SweepFileError(f"{source}: results: expected a directory path, got {value!r}")
    return Path(value)


class _ConfigParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SweepFileError(message)


def parse_config_argv(argv: Sequence[str]) -> tuple[Path, Path | None, list[str]]:
    """`--config FILE [--results DIR] [run flags...]` -> (file, tree, flags for every lane)."""
    parser = _ConfigParser(prog="loadgen", add_help=False, allow_abbrev=False)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--metrics-port", default=None)
    known, rest = parser.parse_known_args(list(argv))
    if known.metrics_port is not None:
        raise SweepFileError(f"--metrics-port: {LANE_REFUSED['metrics_port']}")
    return known.config, known.results, rest


def load_sweep(
    path: Path,
    *,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    results_dir: Path | None = None,
) -> SweepPlan:
    """`loadgen --config PATH`: the file's lanes, argv overrides applied."""
    return parse_sweep(
        read_sweep_document(path),
        source=str(path),
        overrides=overrides,
        env=env,
        results_dir=results_dir,
    )
