"""`python -m loadgen.sim ...` (same as `loadgen sim ...`)."""

from __future__ import annotations

import sys

from loadgen.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
