"""Where the checkout and the test fixtures are, named once for every test module."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TRACES = FIXTURES / "traces"
