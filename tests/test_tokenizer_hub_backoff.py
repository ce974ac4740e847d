"""The Hub unreachable and the file not cached: huggingface_hub's own backoff, then one
line. A module of its own because the test mostly waits (~25 s of the library's retries):
the suite runs it on a waiting lane (tests/support/parallel.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.fake_hub import REPO, closed_port, failed_load_line, hub_env


async def test_an_unreachable_hub_without_the_file_cached_is_one_clear_line(
    tmp_path: Path,
) -> None:
    """No network: huggingface_hub retries for ~25 s (its own backoff), then one line."""
    last = await failed_load_line(hub_env(tmp_path, closed_port(), offline=False))
    assert "cannot be reached" in last and f"hf download {REPO} tokenizer.json" in last
