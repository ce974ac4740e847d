"""Counted nouns in printed lines: one in the singular, any other number in the plural;
text from outside shown without terminal control."""

from __future__ import annotations

from typing import Any

from loadgen.metrics.trust import point_warnings
from loadgen.results.point import PointResult, point_from_json
from loadgen.wording import counted, printable
from tests.support.fake_records import point_file


def test_counted_puts_the_noun_in_the_number_it_needs() -> None:
    assert counted(1, "warning") == "1 warning"
    assert [counted(n, "warning") for n in (0, 2, 31)] == [
        "0 warnings",
        "2 warnings",
        "31 warnings",
    ]
    assert counted(1, "process", "processes") == "1 process"
    assert counted(3, "process", "processes") == "3 processes"


def typed(fields: dict[str, Any]) -> PointResult:
    """A whole point (point_file's) with `fields`, read back as compare reads it."""
    return point_from_json(point_file(fields), "test")


def simulator_behind(count: int) -> PointResult:
    return typed({"simulator_behind_warnings": count, "simulator_behind_max_ms": 40})


def test_the_simulator_health_line_says_1_warning_and_2_warnings() -> None:
    [one] = point_warnings(simulator_behind(1))
    assert "by up to 40 ms (1 warning) during the point" in one
    [two] = point_warnings(simulator_behind(2))
    assert "by up to 40 ms (2 warnings) during the point" in two


def test_the_client_check_lines_count_one_request_in_the_singular() -> None:
    [mismatch] = point_warnings(typed({"chunk_tokens_vs_usage_mismatches": 1}))
    assert mismatch == "the chunk token counts of 1 request disagree with the server's usage"
    [short] = point_warnings(typed({"completion_tokens_vs_max_tokens_mismatches": 1}))
    assert short.startswith("1 request did not produce max_tokens tokens")
    [merged] = point_warnings(typed({"stream_acceptance_oversized_chunks": 1}))
    assert merged.startswith("1 decode chunk carries more than K+1 tokens")
    [merged] = point_warnings(typed({"stream_acceptance_oversized_chunks": 2}))
    assert merged.startswith("2 decode chunks carry more than K+1 tokens")


def test_printable_strips_terminal_control_and_keeps_the_text() -> None:
    assert printable("\x1b]0;owned\x07m1") == "m1"  # a window title (OSC ... BEL)
    assert printable("\x1b]8;;http://x\x1b\\link") == "link"  # OSC ... ST
    assert printable("m2\x1b[2J\x1b[31;1mred\x1b[0m\r") == "m2red"  # CSI, CR
    assert printable("\u202eevil\x9b\x00") == "evil"  # bidi override, C1, NUL
    assert printable("Qwen3-8B\tdone\nnext") == "Qwen3-8B\tdone\nnext"
    assert printable("x" * 100, 10) == "x" * 9 + "…"
