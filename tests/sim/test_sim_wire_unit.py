"""The hot-path chunk builder must produce exactly the general builder's bytes."""

from __future__ import annotations

import itertools

import pytest

from loadgen.sim.wire import StreamFormat, StreamOptions, http_chunk


@pytest.mark.parametrize(
    ("chat", "include", "continuous", "ids"), list(itertools.product([False, True], repeat=4))
)
def test_middle_frame_equals_the_general_event(
    chat: bool, include: bool, continuous: bool, ids: bool
) -> None:
    fmt = StreamFormat(
        chat=chat,
        request_id="cmpl-0011223344556677",
        created=1796016215,
        model="m",
        prompt_ids=[5, 6, 7],
        opts=StreamOptions(include, include and continuous, ids),
        fingerprint="vllm-0.32.0-00000000",
    )
    text = 'say "hi"\n\u4e2d'
    expected = http_chunk(fmt.content_event([11, 12], [text[:3], text[3:]], 9, None, first=False))
    assert fmt.middle_frame([11, 12], text, 9) == expected
