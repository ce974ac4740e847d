"""RunSpec's parts: flat names route to exactly one part, and run.json stays flat."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.config.spec import PART_OF, PARTS, RUN_LEVEL, RunSpec, SpecError, flat_settings
from loadgen.results.results_dir import settings_of


def _spec() -> RunSpec:
    return RunSpec.flat(
        conc=(2, 4),
        isl=64,
        osl=8,
        base_url="http://user:pw@127.0.0.1:9",
        headers=(("X-Token", "secret"),),
        request_timeout_s=5.0,
        turns="2",
        seed=7,
    )


def test_every_setting_belongs_to_one_part() -> None:
    names = [f.name for cls in PARTS.values() for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names)) == len(PART_OF)
    assert not set(names) & set(RUN_LEVEL) and not set(names) & set(PARTS)


def test_flat_builds_the_parts() -> None:
    spec = _spec()
    assert spec.load.conc == (2, 4) and spec.workload.isl == 64
    assert spec.deadlines.request_timeout_s == 5.0 and spec.session.turns == "2"
    assert spec.seed == 7 and spec.sessions


def test_with_changes_only_what_it_names() -> None:
    spec = _spec()
    changed = spec.with_(conc=(8,), http_timeout_s=9.0, seed=1)
    assert (changed.load.conc, changed.deadlines.http_timeout_s, changed.seed) == ((8,), 9.0, 1)
    assert changed.deadlines.request_timeout_s == 5.0  # the part's other fields stay
    assert changed.workload == spec.workload and changed.target == spec.target
    assert spec.load.conc == (2, 4)  # frozen: the original is untouched


def test_with_still_validates() -> None:
    with pytest.raises(SpecError, match="--conc: every concurrency must be in 1"):
        _spec().with_(conc=(0,))


def test_unknown_setting_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="no setting 'isll'"):
        _spec().with_(isll=3)
    with pytest.raises(TypeError, match="load= and some of its settings"):
        _spec().with_(load=_spec().load, conc=(1,))


def test_settings_stay_flat_and_hold_no_credentials() -> None:
    spec = _spec()
    flat = flat_settings(spec)
    assert set(flat) == set(PART_OF) | set(RUN_LEVEL)
    written = settings_of(spec)
    assert set(written) == set(flat) - {"api_key", "coordinator_token"}
    assert written["conc"] == [2, 4] and written["request_timeout_s"] == 5.0
    assert written["headers"] == ["X-Token"] and "pw" not in written["base_url"]


def test_bench_comparison_client_is_a_spec_the_command_line_refuses() -> None:
    """bench/client_overhead.py builds a spec with bench's aiohttp client (its results say
    so); only the command line is limited to the native one."""
    from loadgen.config.args import spec_from_argv

    assert _spec().with_(http_client="aiohttp").target.http_client == "aiohttp"
    with pytest.raises(SpecError, match="moved to bench/"):
        spec_from_argv(
            ["--sim", "--conc", "2", "--isl", "8", "--osl", "8", "--http-client", "aiohttp"], env={}
        )
