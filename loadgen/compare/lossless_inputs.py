"""The kept outputs of each run (`--record-outputs`), as the lossless check reads them.

Each point's request JSONL (every trial's, with --trials: trial k of two lanes draws the
same prompts, and pairing goes by the prompt's digest) is read once; records without a
kept output (the option off, a failed request) take no part, and a point with none has
an empty list (its lane is then `no_pairs`). A run's server accepts drafts
synthetically when its settings say so: `--spec-synthetic`, or an embedded simulator given
a `--speculative-config` with `"rejection_sample_method": "synthetic"` (vLLM 0.32 shows
its speculative config only in its startup log, not on /metrics: declare it there).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

from loadgen.compare.distributions import record_paths
from loadgen.compare.inputs import RunDir
from loadgen.errors import UsageError
from loadgen.metrics.lossless import LosslessCheck, LosslessRun, check_lossless
from loadgen.records import RequestOutput
from loadgen.results.jsonl import read_jsonl

REPEAT_SUFFIX = ".repeat"  # a sweep file's lane `<baseline>.repeat` is the noise floor


def _outputs(run: RunDir) -> dict[int, list[RequestOutput]]:
    kept: dict[int, list[RequestOutput]] = {}
    for conc in run.results:
        paths = [path for path in record_paths(run, conc) if path.is_file()]
        # every measured point, kept outputs or none: a lane that kept none where the
        # baseline did is `no_pairs`, never silently left out of the check
        kept[conc] = [
            record.output
            for path in paths
            for record in read_jsonl(path)
            if record.ok and record.output is not None
        ]
    return kept


def synthetic(run: RunDir) -> bool:
    """The run's server accepts drafts without verifying them (see the module doc)."""
    if run.run is None:
        return False
    settings = run.run.settings
    if settings.scoring.spec_synthetic:
        return True
    args = list(settings.run.sim_args) if settings.run.sim else []
    for flag, value in itertools.pairwise([*args, ""]):
        name, equals, inline = flag.partition("=")
        if name == "--speculative-config":
            return _synthetic_config(inline if equals else value)
    return False


def _synthetic_config(text: str) -> bool:
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        return False  # the simulator refused to start with it: no lane ran
    return isinstance(config, dict) and config.get("rejection_sample_method") == "synthetic"


def repeat_of(runs: Sequence[RunDir], named: str | None) -> str | None:
    """The run repeating the baseline: the one named (`--repeat-baseline`), else a run
    called `<baseline>.repeat` (a sweep file's lane), else none."""
    if named is not None:
        names = [run.name for run in runs[1:]]
        by_path = {str(run.path): run.name for run in runs[1:]}
        if named in names:
            return named
        if named.rstrip("/") in by_path:
            return by_path[named.rstrip("/")]
        raise UsageError(
            f"--repeat-baseline {named}: not one of the runs compared after the baseline "
            f"({', '.join(names) or 'none'}); name its directory or lane"
        )
    if not runs:
        return None
    wanted = runs[0].name + REPEAT_SUFFIX
    return wanted if any(run.name == wanted for run in runs[1:]) else None


def lossless_check(runs: Sequence[RunDir], repeat: str | None = None) -> LosslessCheck | None:
    """The check over every run's kept outputs (None: no run kept any)."""
    return check_lossless(
        [LosslessRun(run.name, _outputs(run), synthetic(run)) for run in runs],
        repeat_of(runs, repeat),
    )
