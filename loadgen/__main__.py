"""`python -m loadgen ...` is the `loadgen` command."""

import sys

from loadgen.cli import main

sys.exit(main())
