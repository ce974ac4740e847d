"""`loadgen merge DIR... --results OUT`: the shards of one run (`--shard I/N`) -> one result set.

Each shard sent its own slots of every point (run/shares.py) and kept every raw record.
The merge puts all shards' records of a point on one timeline and summarizes them once,
exactly as a single process would have (percentiles over the concatenated raw values,
never combined from per-shard summaries).

Timeline: shards on one machine (same boot id) share CLOCK_MONOTONIC: records are taken
as they are. Across machines each record carries the (monotonic, wall) pair its process
read at the start of the point; records are moved onto the first shard's clock through
the wall clock, and the result says how far the clocks may disagree
(`clock_alignment_uncertainty_ms`, run/clock.py). Shards whose measured spans do not
overlap by more than that were not one concurrency point: that point is refused.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from loadgen import __version__
from loadgen.config.workload import asks_thinking
from loadgen.errors import UsageError
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.summary import PointContext
from loadgen.records import RequestRecord
from loadgen.results.files import write_atomic
from loadgen.results.jsonl import JsonlSink
from loadgen.results.point import (
    CacheState,
    PointResult,
    PointStatus,
    ProfileState,
    SessionMetrics,
    SimulatorHealth,
)
from loadgen.results.results_dir import run_files
from loadgen.results.run_record import (
    PER_SHARD,
    MergedFrom,
    PointEntry,
    RunRecord,
    ShardInfo,
    ShardView,
    encode_run,
    settings_from_flat,
)
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import PointCounts, PointParts, assemble_point
from loadgen.run.ids import new_run_id
from loadgen.run.session_point import session_metrics
from loadgen.scale.merge_counters import combined_snapshots, merged_by_url
from loadgen.scale.merge_timeline import PointRefused, align, check_overlap
from loadgen.scale.shard_dir import Shard
from loadgen.scale.shard_views import rtt_skew_line, shard_views


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    results_dir: Path
    points: tuple[PointResult, ...]
    refused: tuple[str, ...]  # one line per point that could not be merged
    warnings: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return 2 if self.refused else 0


def load_shards(dirs: Sequence[Path]) -> list[Shard]:
    """The shards, checked to be all N shards of one run, sorted by index."""
    shards = [Shard(d, _run_json(d)) for d in dirs]
    counts = {s.count for s in shards}
    if len(counts) != 1:
        raise UsageError(
            f"the directories are shards of different splits (N = "
            f"{sorted(counts)}); merge the shards of one run"
        )
    count = counts.pop()
    indices = sorted(s.index for s in shards)
    if indices != list(range(count)):
        raise UsageError(
            f"need each shard 0..{count - 1} of {count} once, got shards "
            f"{indices}: a missing shard's slots were never sent"
        )
    first = shards[0].run
    if any(s.run.target == "simulator" for s in shards) and count > 1:
        raise UsageError(
            "these shards each measured their own embedded simulator (--sim): "
            "start one `loadgen sim` and point every shard at it with --base-url"
        )
    for shard in shards[1:]:
        different = shard.run.settings.differing(first.settings, PER_SHARD)
        if different:
            raise UsageError(
                f"{shard.path}: settings differ from {shards[0].path} "
                f"({', '.join(different)}): not shards of one run"
            )
    return sorted(shards, key=lambda s: s.index)


def _run_json(directory: Path) -> RunRecord:
    store = ResultsDir(directory)
    if not store.run_file.is_file():
        raise UsageError(
            f"{directory}: no readable run.json (there is none); pass loadgen "
            "result directories "
            "(--results of each shard)"
        )
    run = store.read_run()
    if run.shard is None:
        raise UsageError(
            f"{directory}: run.json has no shard information (written by an "
            "older loadgen?); rerun the shards with --shard I/N"
        )
    if run.shard.index is None:
        raise UsageError(f"{directory}: is already a merge; pass the shards' own directories")
    return run


def merge_results(dirs: Sequence[Path], out: Path) -> MergeOutcome:
    """Merge every point all shards have; refused points are listed, the rest written."""
    if not dirs:
        raise UsageError("loadgen merge: give the shards' result directories")
    shards = load_shards(dirs)
    if any(out.resolve() == s.path.resolve() for s in shards):
        raise UsageError(f"--results {out}: is one of the inputs; merge into a new directory")
    _check_out(out)
    run_id = new_run_id(time.time())
    results: list[PointResult] = []
    refused: list[str] = []
    entries: list[PointEntry] = []
    for conc in shards[0].run.settings.load.conc:
        try:
            result, entry = merge_point(shards, conc, out, run_id)
        except PointRefused as exc:
            refused.append(f"conc {conc}: {exc}")
            continue
        results.append(result)
        entries.append(entry)
    views = shard_views(shards)
    _write_run(out, shards, run_id, entries, refused, views)
    unknown = [r.conc for r in results if r.client.clock_alignment_uncertainty_ms is None]
    warnings = (
        [
            f"conc {', '.join(map(str, unknown))}: the shards ran on different machines "
            "and a machine's wall clock is not NTP-synchronized (its kernel says so): "
            "they are aligned with an unknown error (clock_alignment_uncertainty_ms "
            "null); duration and throughput may be off by that much"
        ]
        if unknown
        else []
    )
    ttfts = [r.metrics.median_ttft_ms for r in results if r.metrics.median_ttft_ms is not None]
    skew = rtt_skew_line(views, ttfts)
    warnings += [skew] if skew else []
    warnings += _energy_warning(shards)
    return MergeOutcome(out, tuple(results), tuple(refused), tuple(warnings))


def _energy_warning(shards: Sequence[Shard]) -> list[str]:
    """Energy is never merged: a shard sampled every GPU but divided by its own tokens,
    and the shards' samples are not one series. Said, not dropped silently."""
    sampled = [
        str(s.path)
        for s in shards
        if s.run.settings.telemetry.gpu_metrics or s.run.settings.telemetry.gpu_power_csv
    ]
    if not sampled:
        return []
    return [
        f"{', '.join(sampled)}: sampled GPU energy (--gpu-metrics/--gpu-power-csv, which "
        "loadgen refuses with --shard since): each shard charged every GPU's energy to its "
        "own tokens, so the merged points carry no energy figures; measure energy in one "
        "process (--workers N for more client CPU)"
    ]


def _check_out(out: Path) -> None:
    """A merge writes a new result directory: never over a file or another run."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--results {out}: is a file, not a directory; merge into a new directory")
    used = run_files(out) if out.is_dir() else []
    if used:
        raise UsageError(
            f"--results {out}: already holds a run ({', '.join(used[:3])}); "
            "merge into a new directory"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--results {out}: cannot create it ({exc.strerror or exc})") from None


def merge_point(
    shards: Sequence[Shard], conc: int, out: Path, run_id: str
) -> tuple[PointResult, PointEntry]:
    entries = [s.point(conc) for s in shards]
    missing = [s.index for s, e in zip(shards, entries, strict=True) if e is None]
    if missing:
        raise PointRefused(f"shard(s) {missing} have no such point (stopped before it?)")
    points = [e for e in entries if e is not None]
    per_shard = [ResultsDir(s.path).read_records(conc) for s in shards]
    records, uncertainty_ns = align(per_shard, [p.clock for p in points])
    spans = check_overlap(per_shard, records, uncertainty_ns)
    ids = [r.request_id for r in records]
    if len(set(ids)) != len(ids):
        raise PointRefused(
            "a request index appears in two shards: these are not the shards "
            "of one --shard I/N split"
        )
    files = [ResultsDir(s.path).read_point(conc) for s in shards]
    result = _merged_result(shards, files, points, records, conc, uncertainty_ns, run_id)
    store = ResultsDir(out)
    with JsonlSink(store.requests_file(conc)) as sink:
        for record in records:
            sink.write(record)
    store.write_point(result)
    entry = PointEntry(
        conc=conc,
        complete=result.status.complete,
        file=store.point_file(conc).name,
        error_rate=result.metrics.error_rate,
        shard_spans_s=spans,
        clock_alignment_uncertainty_ms=result.client.clock_alignment_uncertainty_ms,
    )
    return result, entry


def _merged_result(
    shards: Sequence[Shard],
    files: Sequence[PointResult],
    points: Sequence[PointEntry],
    records: Sequence[RequestRecord],
    conc: int,
    uncertainty_ns: int | None,
    run_id: str,
) -> PointResult:
    ctx = merged_context(shards[0].run, conc)
    complete = all(f.status.complete for f in files)
    before, after = combined_snapshots(shards, points) if complete else (None, None)
    first = files[0]
    # a session point: every shard planned the whole point's trees (it plays its lanes)
    planned = (
        first.planned_requests
        if first.sessions is not None
        else sum(f.planned_requests for f in files)
    )
    parts = PointParts(
        identity=msgspec.structs.replace(
            first.identity,
            shard=None,
            shards_merged=len(shards),
            run_id=run_id,
            loadgen_version=__version__,
            # shards may have read their streams with different clients: name each one
            http_client="/".join(sorted({f.identity.http_client for f in files})),
        ),
        status=_merged_status(shards, files),
        counts=PointCounts(
            planned,
            sum(f.warmup_requests for f in files),
            sum(f.warmup_failed for f in files),
        ),
        processes=[p for f in files for p in f.client.client_processes],
        clock_uncertainty_ms=None if uncertainty_ns is None else uncertainty_ns / 1e6,
        synthesis=(first.prompts.prompt_synthesis, first.prompts.prompt_synthesis_note),
        server_metrics_by_url=merged_by_url(points) if complete else None,
        simulator=SimulatorHealth.combined([f.simulator for f in files]),
        cache=CacheState.combined([f.cache for f in files]),
        profile=ProfileState.combined([f.profile for f in files]),
        # the shards' records on one clock; their gauge samples are not (no KV per slice)
        slice_s=shards[0].run.settings.load.slice_duration_s,
        sessions=_merged_sessions(shards[0].run, files, records, before, after),
    )
    return assemble_point(records, ctx, conc, parts, server_before=before, server_after=after)


def _merged_sessions(
    run: RunRecord,
    files: Sequence[PointResult],
    records: Sequence[RequestRecord],
    before: ServerSnapshot | None,
    after: ServerSnapshot | None,
) -> SessionMetrics | None:
    """A session point's figures over every shard's records, as one process (or the
    worker pool) computes them; the replay's counts summed over the shards (max live
    trees too: the sum of each shard's peak, an upper bound)."""
    kept = [f.sessions for f in files]
    if any(k is None for k in kept):
        return None
    counts: dict[str, int] = {}
    for sessions in kept:
        assert sessions is not None
        for name, value in msgspec.structs.asdict(sessions).items():
            if name.startswith("replay_"):
                key = name.removeprefix("replay_")
                counts[key] = counts.get(key, 0) + int(value)
    settings = run.settings
    return session_metrics(
        settings.session, settings.scoring.slos_ms, records, before, after, counts
    )


def merged_context(run: RunRecord, conc: int) -> PointContext:
    """What summarize needs of the run, from the shard's typed run.json, as the run
    itself had it (run/point_fields.py's point_context)."""
    settings = run.settings
    return PointContext(
        conc=conc,
        input_len=settings.workload.isl,
        output_len=settings.workload.osl,
        spec_tokens=settings.scoring.spec_tokens,
        slos=settings.scoring.slos_ms,
        percentiles=settings.scoring.percentiles,
        num_gpus=settings.scoring.num_gpus,
        stream_interval=run.server.stream_interval if run.server else None,
        golden=settings.scoring.golden_al,
        thinking=asks_thinking(settings.workload, settings.target.endpoint),
    )


def _merged_status(shards: Sequence[Shard], files: Sequence[PointResult]) -> PointStatus:
    stopped = [(s, f) for s, f in zip(shards, files, strict=True) if not f.status.complete]
    if not stopped:
        return PointStatus(
            complete=True, stop_reason=None, stop_detail=None, incomplete_reason=None
        )
    reasons = [
        f"shard {s.index}: {f.status.incomplete_reason or 'interrupted'}" for s, f in stopped
    ]
    codes = {f.status.stop_reason or "interrupted" for _, f in stopped}
    # the incomplete shards' code when they agree (`mixed` when not); the detail is each
    # shard's own line
    return PointStatus(
        complete=False,
        stop_reason=codes.pop() if len(codes) == 1 else "mixed",
        stop_detail="; ".join(reasons),
        incomplete_reason="; ".join(reasons),
    )


def _write_run(
    out: Path,
    shards: Sequence[Shard],
    run_id: str,
    entries: Sequence[PointEntry],
    refused: Sequence[str],
    views: tuple[ShardView, ...],
) -> None:
    """The merge's run.json: the shards' common settings (the per-shard ones are in
    each shard's own file, named in merged_from), written by a merge's rule."""
    first = shards[0].run
    common = {k: v for k, v in first.settings.flat().items() if k not in PER_SHARD}
    run = RunRecord(
        run_id=run_id,
        loadgen_version=__version__,
        target=first.target,
        base_url=first.base_url,
        merged_unix=time.time(),
        interrupted=any(s.run.interrupted for s in shards),
        settings=settings_from_flat(common),
        server=first.server,
        shard=ShardInfo(None, len(shards)),
        merged_from=tuple(
            MergedFrom(
                path=str(s.path), run_id=s.run.run_id, shard=s.index, base_url=s.run.base_url
            )
            for s in shards
        ),
        shards=views,
        points=tuple(entries),
        refused=tuple(refused),
    )
    write_atomic(ResultsDir(out).run_file, encode_run(run))
