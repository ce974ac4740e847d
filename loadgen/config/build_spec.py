"""Run option values (dest -> value, as argparse gives them) -> a validated RunSpec: the
one function argv, sweep-file lanes, the sidecar's options and `loadgen profile` end in.

The table does most of it: every entry names the setting it fills (config/fields.py), so
those settings are generated from it; the few settings several flags make together come
from their part's `derive`, and vLLM's aliases are folded in first (compat.py). The checks
against this machine (a writable results directory, the dataset on disk, the server's
process) run here, once per run built, not on every RunSpec construction.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from loadgen.config import (
    deadlines,
    endpoints_profile,
    limits,
    load,
    output,
    processes,
    scoring,
    target,
    workload,
)
from loadgen.config.compat import apply_compat
from loadgen.config.dataset_format import MAX_DATASET_BYTES, TRACE_FORMATS
from loadgen.config.fields import default_of
from loadgen.config.local_checks import check_results_dir, memory_bytes, process_exists
from loadgen.config.output import default_results_dir as default_results_dir
from loadgen.config.parsers import SpecError
from loadgen.config.spec import RunSpec
from loadgen.config.table import RUN_FIELDS, run_defaults


def spec_from_values(values: Mapping[str, Any], env: Mapping[str, str]) -> RunSpec:
    """The run the values describe; options not among them take their defaults."""
    spec = RunSpec.flat(**settings_from_values(values, env))
    check_machine(spec)
    return spec


def settings_from_values(values: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The flat RunSpec settings of the option values (not validated yet)."""
    args = argparse.Namespace(**{**run_defaults(), **values})
    compat = apply_compat(args)  # vLLM's aliases folded into loadgen's own dests
    workload.fold_reasoning_effort(args)
    settings: dict[str, Any] = load.derive(args)
    settings.update(target.derive(args, env))
    settings.update(output.derive(args))
    settings.update(processes.derive(args, env))
    fmt = workload.dataset_format(args, compat.pop("dataset_format"))
    settings.update(load.derive_search(args))
    settings.update(filled(args))
    settings.update(compat)
    settings.update(workload.derive(args, fmt))
    sessions = args.turns is not None or args.multi_turn or fmt in TRACE_FORMATS
    settings["percentiles"] = scoring.percentiles(args, sessions)
    settings["max_error_rate"] = deadlines.max_error_rate(args.max_error_rate, sessions)
    thinking = args.thinking or default_of(workload.WorkloadSpec, "thinking")
    settings["golden_al"] = scoring.golden_al(args, thinking, args.spec_tokens)
    settings.update(endpoints_profile.derive(settings))
    return settings


def filled(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the table's entries fill, each from its own flag's value; a value
    not given (None) leaves the part's default."""
    settings: dict[str, Any] = {}
    for field in RUN_FIELDS.values():
        if field.fills is None:
            continue
        value = getattr(args, field.dest)
        if field.to is not None:
            value = field.to(value)
        elif value is None and not field.keep_none:
            continue
        if isinstance(field.fills, tuple):
            settings.update(zip(field.fills, value, strict=True))
        else:
            settings[field.fills] = value
    return settings


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecError(message)


def check_machine(spec: RunSpec) -> None:
    """What the run needs of this machine: the dataset on disk and not too large, a
    results directory it can write, the server's process alive."""
    dataset = spec.workload.dataset
    if dataset is not None:
        directory = spec.workload.dataset_format in ("weka", "auto", "speed_bench")
        _check(
            dataset.is_file() or (dataset.is_dir() and directory),
            f"--dataset {dataset}: no such file",
        )
    if spec.output.results_dir is not None:
        check_results_dir(spec.output.results_dir)
    if dataset is not None and dataset.is_file():
        size = dataset.stat().st_size
        _check(
            size <= MAX_DATASET_BYTES,
            f"--dataset {dataset}: {size / 2**20:,.0f} MiB is over the "
            f"{MAX_DATASET_BYTES >> 30} GiB limit (the file is read into memory); "
            "split it or keep only the conversations you need",
        )
    _check_memory(spec)
    pid = spec.processes.server_pid
    if pid is not None:
        _check(
            pid > 0 and process_exists(pid),
            f"--server-pid {pid}: no such process on this machine",
        )


def memory_budget() -> int:
    """What one point's estimate may reach on this machine (limits.MEMORY_SHARE of it)."""
    return int(memory_bytes() * limits.MEMORY_SHARE)


def _check_memory(spec: RunSpec) -> None:
    """The largest point's estimate against this machine's memory."""
    top, isl, osl = max(spec.load.conc), spec.workload.isl, spec.workload.osl
    kept = spec.output.record_outputs
    estimate = load.point_memory_bytes(spec.load, top, isl, osl, kept)
    budget = memory_budget()
    requests = spec.load.measured_requests(top) + spec.load.warmup_requests(top)
    _check(
        estimate <= budget,
        f"conc {top}: its {requests:,} requests of isl {isl or limits.DATASET_TOKENS} / "
        f"osl {osl or limits.DATASET_TOKENS}{' with their outputs kept' if kept else ''} "
        f"would hold ~{estimate / 2**30:,.1f} GiB in "
        f"memory, over the limit of one point (half this machine's memory: "
        f"{budget / 2**30:,.1f} GiB); plan fewer requests per point (--prompts-per-conc, "
        "--num-prompts) or shorter prompts" + (" (or drop --record-outputs)" if kept else ""),
    )


__all__ = ["check_machine", "default_results_dir", "settings_from_values", "spec_from_values"]
