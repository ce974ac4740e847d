"""`python -m loadgen.sim ...` (same as `loadgen sim ...`, and through the same error map)."""

from __future__ import annotations

import sys

from loadgen.cli import main

if __name__ == "__main__":
    sys.exit(main(["sim", *sys.argv[1:]]))
