"""Names of runs and requests: sortable by time, unique enough not to collide."""

from __future__ import annotations

import re
import secrets
import time

RUN_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$")


def new_run_id(now_unix: float, token: str | None = None) -> str:
    """`20261201T034500Z-1a2b3c`: a run's id in run.json, the sidecar's URLs and logs."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_unix))
    return f"{stamp}-{token or secrets.token_hex(3)}"


def x_request_id(
    run_id: str, conc: int, index: int, *, warmup: bool = False, trial: int | None = None
) -> str:
    """The X-Request-Id of a request: unique per run, matchable against the server's trace
    (`-t<k>`: --trials' trial k)."""
    return f"{run_id}-c{conc}{'' if trial is None else f'-t{trial}'}-{'w' if warmup else ''}{index}"
