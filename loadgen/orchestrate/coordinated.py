"""A `--coordinator` shard's run: joined to the other shards before anything is sent to
the server, the sweep lined up with theirs and stopped with theirs, its results handed
to shard 0; shard 0 then merges every shard's results as `loadgen merge` does
(orchestrate/merge.py) into `<results>/merged`.

A shard that stops tells the others first and still hands in what it measured, so the
merged set keeps every record of the stopped point (marked complete: false, with each
shard's stop). Shard 0 merges only when every shard's results arrived: a shard whose
process died took its unsent results with it, and a merge without a shard's slots
would be another run (loadgen merge refuses it too).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys

from loadgen.config.spec import RunSpec
from loadgen.errors import LoadgenError, SetupError, UsageError
from loadgen.orchestrate.merge import merge_shards
from loadgen.run.shard_sync import CoordinatorLost
from loadgen.run.sweep import SweepOptions, SweepOutcome
from loadgen.scale.coordinator import Meeting, meet
from loadgen.scale.sweep import run_sweep

MERGED = "merged"  # shard 0's <results>/merged: the run's result set


async def coordinated(spec: RunSpec, options: SweepOptions) -> SweepOutcome:
    results_dir = spec.output.results_dir
    assert results_dir is not None  # output.derive always sets it
    async with meet(spec, results_dir) as meeting:
        try:
            # every shard runs under shard 0's run id: the shards' files name one run
            shared = dataclasses.replace(options, shards=meeting.link, run_id=meeting.link.run_id)
            outcome = await run_sweep(spec, shared)
        except LoadgenError as stop:
            await meeting.link.abort(str(stop).split("; ")[0])
            await _finish(meeting)
            raise
        except asyncio.CancelledError:
            await meeting.link.abort("interrupted (Ctrl-C, SIGTERM or SIGHUP)")
            await _finish(meeting)
            raise
        refused = await _finish(meeting)
        if refused:
            raise MergeRefused(
                f"the merged result set in {results_dir / MERGED} lacks {'; '.join(refused)}; "
                "each shard's own results are kept"
            )
        return outcome


class MergeRefused(SetupError):
    """Shard 0 merged the shards' results, but refused some of their points (as
    `loadgen merge` would, exit 2 there): the run measured, the result set is short."""


async def _finish(meeting: Meeting) -> list[str]:
    """Hand in this shard's results; on shard 0, merge everyone's once they are in. The
    points the merge refused (each a line)."""
    try:
        await meeting.link.hand_in()
    except CoordinatorLost as lost:
        print(f"loadgen: results not handed in: {lost}", file=sys.stderr)
        return []
    if meeting.hub is None:
        return []
    dirs, missing = await meeting.gathered()
    out = meeting.link.results_dir / MERGED
    if missing:
        print(
            f"loadgen: coordinator: shard(s) {missing} never handed in their results "
            f"(their processes ended): no merged set; the shards' own results are in "
            f"{meeting.link.results_dir} and {meeting.hub.shard_dir(0).parent}",
            file=sys.stderr,
        )
        return []
    try:
        merged = await asyncio.to_thread(merge_shards, dirs, out)
    except UsageError as exc:  # e.g. shards that are not one run's: said, never raised here
        print(f"loadgen: coordinator: no merged set: {exc}", file=sys.stderr)
        return [f"every point ({exc})"]
    for line in (*merged.refused, *merged.warnings):
        print(f"loadgen: coordinator: {line}", file=sys.stderr)
    print(
        f"loadgen: coordinator: {len(merged.points)} point(s) of {len(dirs)} shards merged "
        f"in {out}",
        file=sys.stderr,
    )
    return list(merged.refused)
