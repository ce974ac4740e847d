"""Shared test fixtures: paths to the read-only reference data beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LOADGEN_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"


@pytest.fixture(scope="session")
def vllm_fixtures() -> Path:
    path = FIXTURES / "vllm_0.32_cpu"
    assert path.is_dir(), f"reference captures missing at {path} (set LOADGEN_SHARED)"
    return path


@pytest.fixture(scope="session")
def dsv4_fixtures() -> Path:
    path = FIXTURES / "deepseek_v4"
    assert path.is_dir(), f"encoder golden files missing at {path} (set LOADGEN_SHARED)"
    return path
