"""`compare --verdict`'s outputs: verdict.json (a list of VerdictRow) and its console lines."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from loadgen.metrics.verdict import ALPHA, VerdictRow
from loadgen.results.files import write_atomic


def write_verdict_json(path: Path, rows: Sequence[VerdictRow]) -> Path:
    return write_atomic(path, msgspec.json.format(msgspec.json.encode(list(rows))) + b"\n")


def _pct(value: float) -> str:
    return f"{value:+.1%}"


def format_verdict(rows: Sequence[VerdictRow], notes: Sequence[str] = ()) -> str:
    """One line per concurrency and metric: verdict, effect [interval], MDE."""
    lines = [
        f"Verdict (circular block bootstrap over the request sequence, {1 - ALPHA:.0%} "
        "intervals of run/baseline - 1; MDE at 80% power):"
    ]
    for row in rows:
        head = f"  {row.run} vs {row.baseline}  conc {row.conc:<5} {row.metric:<24}"
        if row.verdict is None or row.effect is None or row.interval is None:
            lines.append(f"{head} no verdict: {row.reason}")
            continue
        lo, hi = row.interval
        lines.append(
            f"{head} {row.verdict.value:<13} {_pct(row.effect)} [{_pct(lo)}, {_pct(hi)}]"
            f"  MDE {row.mde:.1%}  (n {row.samples[0]}/{row.samples[1]}, "
            f"blocks of {row.block_length[0]}/{row.block_length[1]})"
        )
    lines += [f"  {note}" for note in notes]
    return "\n".join(lines)
