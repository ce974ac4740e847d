"""Session replay as InferenceX runs agentic traces: lanes of live session trees.

- Concurrency is lanes: each lane plays one session tree (a root and its subagents) at
  a time, so requests in flight may exceed it while subagents fan out.
- A turn is sent when the session's previous turn ended plus its recorded gap; the
  subagents a turn spawns start when it ends (after their own first gap); the parent's
  next turn also waits for them.
- Idle caps: a gap longer than the per-tree cap is cut to it; and when nothing at all is
  in flight for the system cap, the earliest waiting turn is sent right away.
- Trace lanes start at a seeded turn between `start_ratio` of their root session, after
  a primer (the turn before, max_tokens 1, not recorded) has sent their prefix; a lane
  whose tree has ended takes the next tree from turn 0 (a fresh play: a fresh marker).
- --live-history: each turn's reply (collected by the client) replaces the recorded
  assistant message in the session's later turns; a turn that failed or came back empty
  ends its session there (its later turns are not sent: `sessions_cut`, `turns_skipped`).
- Without --duration every tree is played once; with it, trees are recycled (in a seeded
  order) until it elapses, then nothing new is sent and in-flight turns finish. No wait
  outlasts it: a turn or a fixed-schedule record (Mooncake) due after it is not waited
  for, and the trace's records never sent are counted (`arrivals_unsent`).
Workers (--workers N): every process walks the same seeded tree order and start-turn
draws; process w plays the lanes j with j % N == w (so a tree and all its sessions stay in
one process) and, of the plays that follow the lanes' first ones, every N-th from w (in
one process a freed lane takes the next; which lane frees first is timing, so only the
set of plays is fixed either way). Request indices interleave (index * N + w). The idle
caps are each process's own (nothing in flight in it), not the whole system's.
Each turn is rendered when it is due (session_render.py): no prompt text is kept. It is
rendered on a worker thread, never on the event loop: a long history takes tens of ms
to encode and tokenize, and chunks arriving meanwhile would be stamped late, together
(collapsed ITLs). One thread, fed in the order turns become due, keeps the renderer's
shared state (block texts, theoretical cache) single-threaded and ordered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.records import RequestRecord
from loadgen.run.observers import FanoutObserver, RunObserver
from loadgen.run.scheduler import Clock, Sleep
from loadgen.workload.plan import RequestSpec
from loadgen.workload.reply import ReplyText
from loadgen.workload.session_render import Play, SessionRenderer
from loadgen.workload.sessions import Session, SessionTree

SendTurn = Callable[[RequestSpec, int], Coroutine[Any, Any, RequestRecord]]
POLL_S = 0.02  # how often the system idle cap is checked


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    conc: int
    duration_s: float | None = None
    start_ratio: tuple[float, float] | None = None  # trace lanes' first turn; None: turn 0
    idle_cap_system_s: float | None = 10.0
    idle_cap_tree_s: float | None = 300.0
    seed: int = 0
    run_key: int = 0  # distinguishes runs (and points) in the cache-bust markers
    # --workers: this process plays lanes j with j % workers == worker, and of the plays
    # after the lanes' first ones every workers-th (module doc, "Workers")
    worker: int = 0
    workers: int = 1


@dataclass(slots=True)
class ReplayStats:
    trees_started: int = 0
    trees_completed: int = 0
    sessions_started: int = 0
    subagents_started: int = 0
    max_live_trees: int = 0
    gaps_capped_tree: int = 0
    gaps_cut_system: int = 0
    primers: int = 0
    primers_failed: int = 0  # a failed primer is not a measurement, but worth reporting
    sessions_cut: int = 0  # --live-history: sessions ended by a failed or empty reply
    turns_skipped: int = 0  # their turns not sent
    # fixed-schedule traces (Mooncake): the trace's requests never sent, the point's
    # --duration having ended before their time (or before a lane was free for them)
    arrivals_unsent: int = 0
    live_trees: int = field(default=0, repr=False)


class IdleGate:
    """Sleeps until a turn is due, cut short when the whole system has idled too long."""

    def __init__(self, cap_s: float | None, clock: Clock, sleep: Sleep, stats: ReplayStats) -> None:
        self.cap_ns = None if cap_s is None else int(cap_s * 1e9)
        self.clock, self.sleep, self.stats = clock, sleep, stats
        self.in_flight = 0
        self.idle_since = clock()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = 0

    def started(self) -> None:
        self.in_flight += 1

    def ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle_since = self.clock()

    async def wait_until(self, due_ns: int) -> None:
        delay = (due_ns - self.clock()) / 1e9
        if delay <= 0:
            return
        if self.cap_ns is None:
            await self.sleep(delay)
            return
        released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._order += 1
        entry = (due_ns, self._order, released)
        self._waiters.append(entry)
        sleeper = asyncio.ensure_future(self.sleep(delay))
        try:
            await asyncio.wait({sleeper, released}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            self._waiters.remove(entry)

    async def watch(self) -> None:
        """Runs for the measured phase: releases the earliest waiter after `cap` idle."""
        assert self.cap_ns is not None
        while True:
            await self.sleep(min(POLL_S, self.cap_ns / 4e9))
            if self.in_flight or not self._waiters:
                continue
            if self.clock() - self.idle_since >= self.cap_ns:
                _, _, released = min(self._waiters, key=lambda w: (w[0], w[1]))
                if not released.done():
                    released.set_result(None)
                    self.stats.gaps_cut_system += 1
                self.idle_since = self.clock()


class SessionReplay:
    """Plays session trees on `conc` lanes; `warmup` (primers) then `measure`."""

    def __init__(
        self,
        trees: Sequence[SessionTree],
        renderer: SessionRenderer,
        options: ReplayOptions,
        *,
        clock: Clock,
        sleep: Sleep,
        hooks: RunObserver | None = None,
    ) -> None:
        self.trees = trees
        self.renderer = renderer
        self.options = options
        self.clock, self.sleep = clock, sleep
        self.hooks: RunObserver = hooks if hooks is not None else FanoutObserver()
        self.stats = ReplayStats()
        self.gate = IdleGate(options.idle_cap_system_s, clock, sleep, self.stats)
        self._rng = np.random.default_rng([options.seed, options.conc, 0xA6E7])
        self._queue = self._tree_order()
        self._taken = 0  # plays taken off the (every process's same) queue
        self._first_plays = 0  # of those, the lanes' first ones
        self._index = 0
        self._deadline: int | None = None
        self._start_ns = 0
        self._lanes: list[tuple[Play, int] | None] = []
        self._executor: ThreadPoolExecutor | None = None
        self._sent_trees: set[str] = set()  # fixed-schedule trees with a request sent

    def _tree_order(self) -> Iterator[tuple[int, SessionTree]]:
        """Trees in file order once; recycled in seeded shuffles when there is a duration."""
        play = 0
        order: Sequence[int] = range(len(self.trees))
        while True:
            for position in order:
                yield play, self.trees[position]
                play += 1
            if self.options.duration_s is None:
                return
            order = [int(i) for i in self._rng.permutation(len(self.trees))]

    def _take(self) -> tuple[int, SessionTree] | None:
        taken = next(self._queue, None)
        self._taken += taken is not None
        return taken

    def _next_play(self, lane: int) -> Play | None:
        """A freed lane's next play: the next of this process's share of the queue."""
        options = self.options
        while (taken := self._take()) is not None:
            if (self._taken - 1 - self._first_plays) % options.workers == options.worker:
                return self._play(lane, *taken)
        return None

    def _play(self, lane: int, number: int, tree: SessionTree) -> Play:
        key: tuple[int, ...] = (self.options.run_key, self.options.conc, lane, number)
        if tree.start_at_s is not None:  # Mooncake: one hash scope (and marker) per point
            key = key[:2]
        return self.renderer.play(tree, key, f"{self.options.run_key:x}.{lane}.{number}")

    def _start_turn(self, tree: SessionTree) -> int:
        ratio = self.options.start_ratio
        turns = len(tree.root.turns)
        if ratio is None or tree.start_at_s is not None or turns < 2:
            return 0
        fraction = float(self._rng.uniform(ratio[0], ratio[1]))
        return min(turns - 1, int(fraction * turns))

    async def warmup(self, send: SendTurn) -> None:
        """Choose each lane's first play and start turn; send the primers."""
        with self._render_thread():
            async with asyncio.TaskGroup() as group:
                for lane in range(self.options.conc):
                    taken = self._take()
                    if taken is None:
                        self._lanes.append(None)
                        continue
                    start = self._start_turn(taken[1])  # drawn for every lane, in order
                    if lane % self.options.workers != self.options.worker:
                        self._lanes.append(None)  # another process's lane
                        continue
                    play = self._play(lane, *taken)
                    self._lanes.append((play, start))
                    if start > 0:
                        rendered = self._render(play, play.tree.root, start - 1, primer=True)
                        self.stats.primers += 1
                        group.create_task(self._send_primer(rendered, send))
                self._first_plays = self._taken

    async def _send_primer(self, rendered: asyncio.Future[RequestSpec], send: SendTurn) -> None:
        record = await send(await rendered, self.clock())
        if record.error is not None:
            self.stats.primers_failed += 1

    async def measure(self, send: SendTurn, deadline_ns: int | None) -> None:
        self._deadline = deadline_ns
        self._start_ns = self.clock()
        try:
            with self._render_thread():
                await self._play_lanes(send)
        finally:
            self._count_unsent()

    def _count_unsent(self) -> None:
        """A fixed schedule's requests never sent. (Such traces run in one process:
        --workers refuses them, so this process's trees are the whole trace.)"""
        self.stats.arrivals_unsent = sum(
            tree.request_count()
            for tree in self.trees
            if tree.start_at_s is not None and tree.tree_id not in self._sent_trees
        )

    async def _play_lanes(self, send: SendTurn) -> None:
        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(self.gate.watch()) if self.gate.cap_ns is not None else None
            lanes = [
                group.create_task(self._lane(lane, first, send))
                for lane, first in enumerate(self._lanes)
                if first is not None
            ]
            if lanes:
                await asyncio.wait(lanes)
            if watcher is not None:
                watcher.cancel()

    @contextlib.contextmanager
    def _render_thread(self) -> Iterator[None]:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="loadgen-render")
        try:
            yield
        finally:  # a cancelled phase must not wait for a render nobody awaits
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _render(
        self,
        play: Play,
        session: Session,
        turn: int,
        *,
        primer: bool = False,
        live: Mapping[int, ReplyText] | None = None,
    ) -> asyncio.Future[RequestSpec]:
        """The turn's request, rendered on the render thread; submitted (and numbered)
        now, so renders run in call order."""
        assert self._executor is not None, "render outside warmup/measure"
        index = self._index * self.options.workers + self.options.worker
        self._index += 1
        render = functools.partial(
            self.renderer.render,
            play,
            session,
            turn,
            index,
            primer=primer,
            live=dict(live) if live else None,
        )
        return asyncio.get_running_loop().run_in_executor(self._executor, render)

    def _stopped(self) -> bool:
        return self._deadline is not None and self.clock() >= self._deadline

    async def _until(self, due_ns: int) -> bool:
        """Sleep until `due_ns`; False at once when the point's deadline comes first (the
        wait would outlast the point, and nothing is sent after it)."""
        if self._deadline is not None and due_ns >= self._deadline:
            return False
        await self.sleep(max(0.0, (due_ns - self.clock()) / 1e9))
        return True

    async def _lane(self, lane: int, first: tuple[Play, int], send: SendTurn) -> None:
        play: Play | None = first[0]
        start = first[1]
        while play is not None and not self._stopped():
            tree = play.tree
            # fixed-schedule records (Mooncake) wait for their time; one due after the
            # point ends the lane (it and every later record unsent)
            if tree.start_at_s is not None and not await self._until(
                self._start_ns + int(tree.start_at_s * 1e9)
            ):
                return
            stats = self.stats
            stats.trees_started += 1
            stats.live_trees += 1
            stats.max_live_trees = max(stats.max_live_trees, stats.live_trees)
            try:
                await self._live_session(play, tree.root, start, send)
            finally:
                stats.live_trees -= 1
            if not self._stopped():
                stats.trees_completed += 1
            play, start = self._next_play(lane), 0

    async def _live_session(self, play: Play, session: Session, first: int, send: SendTurn) -> None:
        """`_session` between the hooks' session_started and session_finished (live
        sessions and trees on /metrics)."""
        root = session is play.tree.root
        self.hooks.session_started(self.options.conc, root)
        try:
            await self._session(play, session, first, send)
        finally:
            self.hooks.session_finished(self.options.conc, root)

    async def _session(self, play: Play, session: Session, first: int, send: SendTurn) -> None:
        stats = self.stats
        stats.sessions_started += 1
        stats.subagents_started += bool(session.name)
        previous_end = self.clock()
        children: list[asyncio.Task[None]] = []
        live: dict[int, ReplyText] = {}  # --live-history: history index -> the reply
        async with asyncio.TaskGroup() as group:
            for number in range(first, len(session.turns)):
                turn = session.turns[number]
                gap = 0.0 if number == first and session is play.tree.root else turn.gap_s
                due = previous_end + self._capped(gap)
                # no longer than the point: a turn due after it is not sent
                deadline = self._deadline
                await self.gate.wait_until(due if deadline is None else min(due, deadline))
                if children:  # the parent's next turn waits for what it spawned
                    await asyncio.wait(children)
                    children = []
                    due = max(due, self.clock())
                if self._stopped():
                    return
                if play.tree.start_at_s is not None:
                    self._sent_trees.add(play.tree.tree_id)
                request, record = await self._send(play, session, number, due, send, live)
                previous_end = record.end_ns or self.clock()
                if request.reply is not None:
                    if not record.ok or request.reply.empty:
                        stats.sessions_cut += 1
                        stats.turns_skipped += len(session.turns) - number - 1
                        return
                    live[turn.history_end] = request.reply
                children = [
                    group.create_task(self._live_session(play, child, 0, send))
                    for child in turn.spawns
                ]

    def _capped(self, gap_s: float) -> int:
        cap = self.options.idle_cap_tree_s
        if cap is not None and gap_s > cap:
            self.stats.gaps_capped_tree += 1
            gap_s = cap
        return int(gap_s * 1e9)

    async def _send(
        self,
        play: Play,
        session: Session,
        number: int,
        due: int,
        send: SendTurn,
        live: Mapping[int, ReplyText],
    ) -> tuple[RequestSpec, RequestRecord]:
        self.gate.started()  # a turn being rendered is not idle time
        try:
            request = await self._render(play, session, number, live=live)
            return request, await send(request, due)
        finally:
            self.gate.ended()
