"""Shared test fixtures: paths to the reference data in tests/fixtures (see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def vllm_fixtures() -> Path:
    path = FIXTURES / "vllm_0.32_cpu"
    assert path.is_dir(), f"reference captures missing at {path}"
    return path


@pytest.fixture(scope="session")
def dsv4_fixtures() -> Path:
    path = FIXTURES / "deepseek_v4"
    assert path.is_dir(), f"encoder golden files missing at {path}"
    return path
