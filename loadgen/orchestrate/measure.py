"""A sweep with its standard outputs: what `loadgen`, sweep-file lanes and the sidecar run.

The engine (run/sweep.py and below) writes run.json and the point and record files and
imports no sink; this is where the progress line, the vLLM-format result and the sweep
files are plugged in.
"""

from __future__ import annotations

from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.errors import UsageError
from loadgen.orchestrate.coordinated import coordinated
from loadgen.run.observers import FanoutObserver, RunObserver
from loadgen.run.sweep import SweepOptions, SweepOutcome
from loadgen.scale.sweep import run_sweep
from loadgen.sinks.progress import ProgressLine
from loadgen.sinks.run_files import RunFiles


async def measure(
    spec: RunSpec, *, observer: RunObserver | None = None, tokenizer: Tokenizer | None = None
) -> SweepOutcome:
    """`run_sweep` with the progress line (unless spec.progress is off) and RunFiles."""
    if spec.load.find_max is not None:  # its probes are chosen as it goes (orchestrate/capacity.py)
        raise UsageError(  # the CLI and the lanes run it; the sidecar refuses it (400)
            "--find-max: a capacity search runs through orchestrate/capacity.py, not as a sweep "
            "of the points it lists"
        )
    # --trials: each trial is a point of its own on the progress line
    progress = (
        ProgressLine(len(spec.load.conc) * spec.load.trials) if spec.output.progress else None
    )
    options = SweepOptions(
        observer=FanoutObserver(observer, progress),
        tokenizer=tokenizer,
        outputs=RunFiles(spec),
    )
    try:
        if spec.processes.coordinator_host is not None:  # shards meeting over the network
            return await coordinated(spec, options)
        return await run_sweep(spec, options)
    finally:
        if progress is not None:
            progress.close()


__all__ = ["SweepOutcome", "measure"]  # SweepOutcome: what `loadgen` reads of a run
