"""scripts/dynamo_env.py's layouts: which workers, in which role, with which mocker flags
(the flag names checked against `python -m dynamo.mocker --help` of ai-dynamo 1.4.2)."""

from __future__ import annotations

import pytest

from tests.support.dynamo_cluster import dynamo_env

PREFILL = ("prefill", ("--disaggregation-mode", "prefill"))
DECODE = ("decode", ("--disaggregation-mode", "decode"))


@pytest.mark.parametrize(
    ("layout", "roles"),
    [
        ("agg", (("worker", ()),)),
        ("1p1d", (PREFILL, DECODE)),
        ("2P1D", (PREFILL, PREFILL, DECODE)),
        ("1p2d", (PREFILL, DECODE, DECODE)),
        ("dp2", (("worker", ("--data-parallel-size", "2")),)),
    ],
)
def test_each_layouts_workers(layout: str, roles: tuple[object, ...]) -> None:
    assert dynamo_env.layout_roles(layout) == roles


@pytest.mark.parametrize("layout", ["", "0p1d", "1p0d", "dp0", "pd", "1p1", "2x"])
def test_an_unknown_layout_is_one_line(layout: str) -> None:
    with pytest.raises(ValueError, match=r"^unknown layout .*: give agg, <P>p<D>d") as error:
        dynamo_env.layout_roles(layout)
    assert "\n" not in str(error.value)
