"""A point's life, written once: the same sequence for a point sent from this process,
a session point and a point sent by worker processes (they differ only in how requests
are sent: a `Sending`), with every per-point feature an `Extension` (extension.py) that
hooks into it:

    before_warmup                     (e.g. the prefix cache reset)
    warm up                           Sending.warm_up
    after_warmup                      (the reset after warmup, the shards' barrier)
    before_measure                    (power sampling, the series' first scrape, profiler)
    the server's counters read        -> the measured phase begins; measure_started
    measure                           Sending.measure
    after_measure, in reverse         (the server watch settles, the watchers stop)
    the server's counters read again
    close, in reverse, always         (the profiler window closes; from before_measure on)
    the result: settle_records, parts, write_files; conc_<N>.json written

A point stopped anywhere (Ctrl-C, the server gone, a worker dead, a full disk) is
written by `abandoned` with what it measured, marked `complete: false` with its stop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from loadgen.client.server_metrics import Scrape
from loadgen.results.files import ResultsWriteError
from loadgen.results.outcome import PointOutcome, Stop
from loadgen.results.store import ResultsDir
from loadgen.run.client_health import ProcessHealth
from loadgen.run.clock import ClockPair, read_pair
from loadgen.run.extension import Extension, Measured, each
from loadgen.run.point_fields import warn_inexact
from loadgen.run.point_records import PointRecords, RunContext
from loadgen.run.point_result import point_capture, point_facts, point_result

E = TypeVar("E", bound=Extension)


class Sending(Protocol):
    """How a point's requests are sent: from this process (point.py, session_point.py)
    or by worker processes (scale/pool.py). Records go to the point's PointRecords."""

    @property
    def slots(self) -> int:
        """This run's slots of the point: its conc, or its shard's share."""
        ...

    @property
    def planned(self) -> int:
        """Measured requests planned (0: open-ended, as many as a duration allows)."""
        ...

    @property
    def warmup_planned(self) -> int: ...

    @property
    def warmup_failed(self) -> int: ...

    async def warm_up(self) -> None: ...

    async def measure(self) -> None:
        """The measured phase; on the way out of a stop, its senders are stopped too."""
        ...

    def processes(self) -> list[ProcessHealth]:
        """Each client process's health over the measured phase (so far, if stopped)."""
        ...

    def early_stop(self) -> Stop | None:
        """A stop of its own after a measured phase that ran to its end (an open loop
        over-saturated), else None."""
        ...


class PointLife:
    """One point from its warmup to its file."""

    def __init__(
        self,
        context: RunContext,
        conc: int,
        send: Callable[[PointRecords], Sending],
        extensions: Sequence[Extension],
    ) -> None:
        self.context = context
        self.conc = conc
        self.records = PointRecords(context, conc)
        self.sending = send(self.records)
        self.extensions = tuple(extensions)
        self.before = Scrape()
        self.started = False  # the measured phase began: from then on the point is written
        self.clock: ClockPair | None = None

    def find(self, kind: type[E]) -> E | None:
        """This point's extension of that kind, if it has one."""
        return next((ext for ext in self.extensions if isinstance(ext, kind)), None)

    async def run(self) -> PointOutcome:
        exts = self.extensions
        for ext in exts:
            await ext.before_warmup()
        await self.sending.warm_up()
        for ext in exts:
            await ext.after_warmup()
        try:  # a window opened before the measured phase is closed even if stopped there
            for ext in exts:
                await ext.before_measure()
            self._begin(await self.context.backend.scrape())
            for ext in exts:
                ext.measure_started()
                ext.measuring(self.records)
            await self.sending.measure()
            for ext in each(exts, closing=True):
                await ext.after_measure(self.records.records)
            after = await self.context.backend.scrape()
        finally:  # after the gauges stopped: e.g. the trace export is not the point's
            for ext in each(exts, closing=True):
                await ext.close()
        stop = self.sending.early_stop()
        return self.finalize(complete=stop is None, after=after, stop=stop)

    def _begin(self, before: Scrape) -> None:
        self.before, self.started, self.clock = before, True, read_pair()
        self.context.hooks.point_started(self.conc, self.sending.planned)

    def abandoned(self, stop: Stop | None) -> PointOutcome | None:
        """The run stopped during this point: written `complete: false` with what it
        measured; None when it had not begun measuring (its empty file is closed)."""
        if not self.started:
            self.records.discard()
            return None
        return self.finalize(complete=False, after=None, stop=stop)

    def finalize(self, *, complete: bool, after: Scrape | None, stop: Stop | None) -> PointOutcome:
        """Summarize and write conc_<N>.json. A write that fails is on the outcome
        (`write_error`), not raised: a stopped point is finalized on the way out of a run
        that is already stopping, and the caller decides."""
        context, records = self.context, self.records
        write_error: ResultsWriteError | None = None
        for ext in self.extensions:  # interrupted: no watcher outlives the point
            ext.cancel()
        try:
            records.close()
            changed = [ext.settle_records(records.records) for ext in self.extensions]
            if any(changed):
                records.rewrite()
        except ResultsWriteError as exc:
            write_error = exc
        # `after` is read only for a point whose requests all ended (complete, or
        # saturated: the open loop's stop lets its requests run to their end)
        measured = Measured(records.records, self.before, after, complete)
        result = point_result(context, self.conc, self.sending, stop, self.extensions, measured)
        warn_inexact(result)
        store = ResultsDir(context.results_dir)
        path = store.point_file(self.conc, context.trial)
        try:
            store.write_point(result, context.trial)
            for ext in self.extensions:
                ext.write_files(store, result, measured)
            if context.trial is None:  # a trial's point is not the published one
                capture = point_capture(context, records, self.extensions, self.clock)
                context.outputs.point_written(store, result, records.records, complete, capture)
        except ResultsWriteError as exc:
            write_error = write_error or exc
        context.hooks.point_finished(self.conc, result)
        facts = point_facts(context, self.before, after if complete else None, self.clock)
        return PointOutcome(self.conc, result, complete, path, facts, write_error)
