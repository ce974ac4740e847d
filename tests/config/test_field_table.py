"""The run options' table is the one source: for every entry, argv and a document (a
sweep file's lane, the sidecar's JSON options) with the same value give the same RunSpec;
the sidecar offers exactly the table's options less its reserved ones; and nothing in
loadgen/ reads argparse's private objects back."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from loadgen.config.args import spec_from_argv, spec_from_options
from loadgen.config.fields import Field
from loadgen.config.spec import RunSpec, SpecError
from loadgen.config.sweepfile import LANE_REFUSED, parse_sweep
from loadgen.config.table import RUN_FIELDS
from loadgen.sidecar.options import RESERVED_OPTIONS, allowed_options

T = TypeVar("T")
BASE = {"base_url": "http://127.0.0.1:9", "conc": "4", "isl": 64, "osl": 16}
BASE_ARGV = ["--base-url", "http://127.0.0.1:9", "--conc", "4", "--isl", "64", "--osl", "16"]

# One value per kind and shape: (the flag's argv words after the flag, the document value).
BY_SHAPE: dict[str, tuple[list[str], Any]] = {
    "numbers": (["1,2"], [1, 2]),
    "stages": (["5@1s,10@2s"], ["5@1s", "10@2s"]),
    "slo": (["ttft=2s,tpot=50ms"], {"ttft": "2s", "tpot": "50ms"}),
    "headers": (["A:b", "C:d"], {"A": "b", "C": "d"}),
    "body": (['{"min_p": 0.1}'], {"min_p": 0.1}),
    "args": (["--step-fixed-ms 5"], ["--step-fixed-ms", 5]),
}
# Options whose generic value is not one they accept (or that need a partner to matter).
BY_DEST: dict[str, tuple[list[str], Any]] = {
    "reset_timeout": (["2.5"], 2.5),
    "profile_conc": (["4"], 4),  # BASE's one point
    "base_url": (["http://127.0.0.1:7"], "http://127.0.0.1:7"),
    "endpoint": (["chat"], "chat"),
    "request_rate": (["5.5"], 5.5),
    "http_client": (["native"], "native"),  # the one client left
    "engine": (["sglang"], "sglang"),
    "conc_stages": (["2@1s,4@2s"], ["2@1s", "4@2s"]),  # its largest stage is BASE's --conc
    "target_precision": (["ttft:p99:0.05"], "ttft:p99:0.05"),
    "turns": (["2"], "2"),
    "turn_tokens": (["8"], "8"),
    "think_time": (["0"], "0"),
    "start_ratio": (["0.25,0.75"], "0.25,0.75"),
    "metrics_port": (["0"], 0),
    "find_max_resolution": (["2"], "2"),
    "rate_range": (["1..8"], "1..8"),
    "dataset_name": (["random"], "random"),
    "max_concurrency": (["4", "8"], [4, 8]),
    "percentile_metrics": (["ttft,tpot"], "ttft,tpot"),
    "metric_percentiles": (["50,99"], "50,99"),
    "goodput": (["ttft:2000", "tpot:50"], ["ttft:2000", "tpot:50"]),
    "metadata": (["a=1", "b=2"], ["a=1", "b=2"]),
    "workers": (["2"], 2),
    "cpu_affinity": (["0"], "0"),
    "shard": (["1/2"], "1/2"),
    "coordinator": (["127.0.0.1:29517"], "127.0.0.1:29517"),
    "coordinator_wait": (["30"], 30.0),
    "server_metrics": (
        ["http://127.0.0.1:9/metrics", "--server-metrics", "http://127.0.0.1:8/metrics"],
        ["http://127.0.0.1:9/metrics", "http://127.0.0.1:8/metrics"],
    ),
    "gpu_metrics": (["http://127.0.0.1:9/gpu"], ["http://127.0.0.1:9/gpu"]),
    "session_header": (["X-A", "--session-header", "X-B"], ["X-A", "X-B"]),
    "host": (["127.0.0.2"], "127.0.0.2"),
    "port": (["8001"], 8001),
    "ramp_up_start_rps": (["1"], 1),
    "ramp_up_end_rps": (["2"], 2),
    "max_error_rate": (["0.5"], 0.5),
    "range_ratio": (["0.5"], 0.5),
    "random_range_ratio": (["0.5"], 0.5),
    "golden_al_tolerance": (["0.5"], 0.5),
    "top_p": (["0.5"], 0.5),
    "serve_timeout": (["90"], 90),
    "serve_cmd": (["vllm serve m --port {port}"], ["vllm", "serve", "m", "--port", "{port}"]),
    "serve_env": (["A=1", "--serve-env", "B=x:y"], {"A": 1, "B": "x:y"}),
    "accuracy_min": (["0.5"], 0.5),
}
# What an option needs beside it to be accepted at all (argv words, document keys).
PARTNERS: dict[str, dict[str, Any]] = {
    "ramp_up_start_rps": {"ramp_up_strategy": "linear", "ramp_up_end_rps": 4},
    "ramp_up_end_rps": {"ramp_up_strategy": "linear", "ramp_up_start_rps": 1},
    "ramp_up_strategy": {"ramp_up_start_rps": 1, "ramp_up_end_rps": 4},
    "find_max": {"slo": "ttft:p99=2s", "rate_range": "1..8"},
    "find_max_resolution": {"find_max": "conc", "slo": "ttft:p99=2s", "conc": "1..8"},
    "rate_range": {"find_max": "rate", "slo": "ttft:p99=2s"},
    "cpu_affinity": {"workers": 2},
    "live_history": {"turns": "2"},
    "shard_sync": {"shard": "0/2"},
    "coordinator": {"shard": "0/2", "coordinator_token": "t"},
    "golden_al": {"golden_al_model": "m"},
    "label": {"save_result": True},
    "result_filename": {"save_result": True},
    "result_dir": {"save_result": True},
    "save_detailed": {"save_result": True},
    "reset_after_warmup": {"reset_prefix_cache": True},
    "reset_external": {"reset_prefix_cache": True},
    "reset_timeout": {"reset_prefix_cache": True},
    "serve_env": {"serve_cmd": "vllm serve m --port {port}"},
    "serve_cwd": {"serve_cmd": "vllm serve m --port {port}"},
    # --accuracy's files are read when the run starts, not when the spec is built
    "accuracy": {"accuracy_data": "q.jsonl", "accuracy_shots": "s.jsonl"},
    **{
        dest: {"accuracy": "gsm8k", "accuracy_data": "q.jsonl", "accuracy_shots": "s.jsonl"}
        for dest in ("accuracy_conc", "accuracy_min", "accuracy_max_tokens")
    },
    "accuracy_data": {"accuracy": "gsm8k", "accuracy_shots": "s.jsonl"},
    "accuracy_shots": {"accuracy": "gsm8k", "accuracy_data": "q.jsonl"},
    # the profile's curve needs a range from the Ultra Low region past 32, and its
    # accuracy runs their files
    "profile": {"conc": "4,64", "accuracy_data": "q.jsonl", "accuracy_shots": "s.jsonl"},
}


# Options refused without files this test does not make (a golden file, SPEED-Bench's
# directory): both sources must refuse them with the same words.
# (multi_turn: a conversations file)
REFUSED = frozenset({"golden_al", "speed_bench_category", "multi_turn"})
# What an option stands in for: the base's key it would contradict.
REPLACES = {
    "sim": "base_url",
    "host": "base_url",
    "port": "base_url",
    "max_concurrency": "conc",
    "profile": "conc",
    "random_input_len": "isl",
    "random_output_len": "osl",
    "speed_bench_output_len": "osl",
}


def value_for(field: Field, tmp_path: Path) -> tuple[list[str], Any]:
    """(argv after the flag, the same value as a document gives it)."""
    if field.dest in ("dataset", "dataset_path"):
        dataset = tmp_path / "prompts.jsonl"
        dataset.write_text('[{"role": "user", "content": "hello"}]\n')
        return [str(dataset)], str(dataset)
    if field.dest in BY_DEST:
        return BY_DEST[field.dest]
    if field.kind == "flag":
        return [], True
    if field.shape in BY_SHAPE:
        return BY_SHAPE[field.shape]
    if field.choices is not None:
        return [field.choices[-1]], field.choices[-1]
    if field.parse is int:
        return ["3"], 3
    if field.parse is float:
        return ["1.5"], 1.5
    return ["x"], "x"


def argv_of(dest: str, words: list[str]) -> list[str]:
    field = RUN_FIELDS[dest]
    if field.kind == "flag":
        return [field.flag] if words == [] else []
    return [field.flag, *words]


def partner_argv(dest: str) -> tuple[list[str], dict[str, Any]]:
    extra = PARTNERS.get(dest, {})
    words: list[str] = []
    for other, value in extra.items():
        words += argv_of(other, [] if value is True else [str(value)])
    return words, extra


def outcome(build: Callable[[], T]) -> T | str:
    """What building gives: the result, or `error: <the one-line message>`."""
    try:
        return build()
    except SpecError as exc:
        return f"error: {exc}"


def base_for(dest: str) -> tuple[list[str], dict[str, Any]]:
    if dest not in REPLACES:
        return BASE_ARGV, BASE
    at = BASE_ARGV.index(RUN_FIELDS[REPLACES[dest]].flag)
    base = {k: v for k, v in BASE.items() if k != REPLACES[dest]}
    return BASE_ARGV[:at] + BASE_ARGV[at + 2 :], base


@pytest.mark.parametrize("dest", sorted(RUN_FIELDS))
def test_argv_and_a_document_give_the_same_run(dest: str, tmp_path: Path) -> None:
    field = RUN_FIELDS[dest]
    words, value = value_for(field, tmp_path)
    base_argv, base = base_for(dest)
    extra_argv, extra = partner_argv(dest)
    results = tmp_path / "tree" / "a"
    argv = [*base_argv, *extra_argv, *argv_of(dest, words), "--results", str(results)]
    if dest in ("results", "resume"):
        argv = argv[:-2]  # the option itself says where the results go
    expected = outcome(lambda: spec_from_argv(argv, {}))
    if dest in REFUSED:
        assert isinstance(expected, str)
    else:
        assert isinstance(expected, RunSpec), f"{dest}: the value is refused: {expected}"
    options = {**base, **extra, dest: value}
    if dest not in ("results", "resume"):
        options["results"] = str(results)
    assert outcome(lambda: spec_from_options(options, {})) == expected
    if dest in LANE_REFUSED or dest == "resume":
        return  # the tree decides a lane's results; live metrics are one lane's
    document = {**base, **extra, "lanes": [{"name": "a", dest: value}]}
    plan = outcome(
        lambda: parse_sweep(document, source="s.yaml", env={}, results_dir=tmp_path / "tree")
    )
    if isinstance(plan, str):  # the same words, at the lane (or the key they name)
        assert isinstance(expected, str) and plan.startswith("error: s.yaml: ")
        assert plan.endswith(expected.removeprefix("error:"))
    else:
        assert plan.lanes[0].spec == expected


def test_a_document_value_of_the_wrong_type_names_its_key_path() -> None:
    for dest, field in RUN_FIELDS.items():
        if dest in LANE_REFUSED or field.kind == "flag":
            continue
        document = {**BASE, "lanes": [{"name": "a"}, {"name": "b", dest: [[1]]}]}
        with pytest.raises(SpecError, match=rf"^s\.yaml: lanes\[1\]\.{dest}: expected "):
            parse_sweep(document, source="s.yaml", env={}, results_dir=Path("t"))
    document = {**BASE, "lanes": [{"name": "a", "sim": "yes"}]}
    with pytest.raises(SpecError, match=r"^s\.yaml: lanes\[0\]\.sim: expected true or false"):
        parse_sweep(document, source="s.yaml", env={}, results_dir=Path("t"))


def test_the_sidecar_offers_the_tables_run_options_less_the_reserved_ones() -> None:
    assert set(allowed_options()) == set(RUN_FIELDS) - RESERVED_OPTIONS
    assert "isl" in allowed_options() and "base_url" not in allowed_options()


# argparse's private names: its actions, groups and their classes, and its error texts
PRIVATE = re.compile(
    r"\._(actions|action_groups|group_actions|option_string_actions|registries|"
    r"get_help_string|get_formatter|positionals|optionals)\b|argparse\._|"
    r"_StoreTrueAction|_AppendAction|_ExtendAction|_ArgumentGroup|"
    r"the following arguments are required|invalid \w+ value"
)


def test_no_module_of_loadgen_reads_argparse_internals() -> None:
    root = Path(__file__).resolve().parents[2] / "loadgen"
    found = [
        f"{path.relative_to(root.parent)}:{n}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert found == []
    assert len(list(root.rglob("*.py"))) > 50  # the walk saw the package


@pytest.mark.parametrize(
    ("dest", "value"),
    [("conc", [4, "8,16"]), ("percentiles", [50, "90,99"]), ("rate_stages", ["1@1s,2@1s"])],
)
def test_a_list_item_is_one_value_never_split_again(dest: str, value: list[Any]) -> None:
    """A document's list is read item by item, not joined into the flag's text and split
    again: an item holding a comma is refused at its key, never silently several values."""
    options = {**BASE, dest: value, "results": "unused"}
    # (stages are read where the run is built: the flag's words without the key, as ever)
    with pytest.raises(SpecError, match=rf"^({dest}: )?--{dest.replace('_', '-')} "):
        spec_from_options(options, {})
    document = {**BASE, "lanes": [{"name": "a", dest: value}]}
    with pytest.raises(SpecError, match=rf"^s\.yaml: lanes\[0\]\.{dest}: "):
        parse_sweep(document, source="s.yaml", env={}, results_dir=Path("t"))
