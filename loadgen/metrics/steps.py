"""Engine steps reconstructed from the chunk arrivals of all streams, once per point.

A serving engine writes one chunk per running request per step (per `--stream-interval`
k steps), so the arrivals of all streams come in clusters, one per engine step. From the
clusters: the step time (split into decode-only steps and steps that also finished a
prefill, i.e. carried some stream's first chunk), the requests and tokens per step, the
engines behind the frontend, and which ITL gaps a prefill made long.

The method (docs/results.md, "Engine steps", states its limits):

1. Boundary. Sorted arrivals of all streams; a gap between consecutive arrivals longer
   than the boundary starts a new cluster. The boundary sits where the fewest gaps lie
   within a factor 1.5 of it (serialisation gaps of one step's chunks are micro-
   seconds, gaps between steps milliseconds), between 5 us and half the 1st percentile
   of one stream's own chunk gaps (a stream has at most one chunk per step, so two of
   its chunks never share a cluster).
2. Engines. When the server's /metrics label its engines' steps (vLLM's frontend does,
   engine="<i>"), one engine leaves nothing to group, and with more the count found
   below must be theirs (else null). Streams that co-arrive share an engine:
   co-arriving is being in one chain of arrivals whose gaps are at most the co-arrival
   link, the first point past the mode of one step's write gaps (tens of microseconds,
   a mode below a tenth of the cap) where the gaps thin out. None: nothing co-arrives,
   each stream alone; a mode with no such point, or a link past a tenth of the cap: the
   engines cannot be told apart (null). The boundary of step 1 is too wide for this: it
   joins engines whose steps fall within a millisecond of each other. For pairs of
   streams adjacent in some chain, the share of the shorter stream's chunks (sampled
   over their common life) in a chain with one of the other's; pairs at >= 3/4 are
   joined.
   A stream in no such pair follows its most frequent neighbour among those it shares
   too few chunks with to tell (with enough, it runs alone). Groups that overlap
   briefly (one wave of requests ending as the next begins) are joined when >= 3/4 of
   the clusters of the one seen less while both run carry both; groups that never run
   at the same time are one engine's successive requests (interval partitioning).
3. Per engine: the clusters again with the engine's own boundary; a step's time is the
   time from the previous cluster's first arrival to its own (from the request's send
   when the cluster holds only first chunks of requests sent after the previous
   cluster: the engine was idle). k = the median stream gap over the median cluster interval.

Null, with the reason in `steps_note`, never a guess: too few chunks, no co-arrival link
past a mode of write gaps (engines cannot be told apart), more than 3% of the
arrival gaps within a factor 1.5 of the boundary, more than 3% of the chunks in one
cluster with their stream's previous one (steps run together), streams spanning more than
3% more of their engine's steps than they received tokens (steps split apart, or a
cluster's steps counted from one stream's chunks straddling another's: a running request
gets a token every step), more than 3% of the steps counted from chunks read together in
clusters that a request then in flight has no chunk in (its own late read would count
the same steps again), several clusters per
stream gap while each chunk carries one step (a frontend that smears the steps), or a
stream interval > 1 at so few streams per engine that clusters skip steps (step times),
two engines whose steps follow each other within 4 co-arrival links in > 3/4 of them,
or with several engines (their phase groups look like engines), or, where the server
does not label its engines, more clusters per gap of one stream than 0.2% of its chunks
carry tokens (other engines' steps fall between one engine's).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.metrics.arrays import NS_PER_MS, PointArrays

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MIN_CHUNKS = 50  # fewer chunks in a point: no step figures
AMBIGUOUS_SHARE = 0.03  # arrival gaps allowed within a factor WINDOW of the boundary
WINDOW = 1.5
FLOOR_NS = 5_000.0  # no frontend writes two steps' chunks closer than 5 us
GRID_DECADES = 0.01
JOIN_SHARE = 0.75  # co-arrival share that puts two streams on one engine
MODE_SHARE = 0.1  # arrival gaps near one write interval: one step's chunks co-arrive
LINK_SHARE = 0.005  # arrival gaps near the co-arrival link: the valley past that mode
LINK_CAP = 0.1  # write gaps of one step under a tenth of the cap (half a step): engines told
PAIR_SAMPLES = 8  # chunks of the shorter stream checked per candidate pair
MIN_PAIR_SAMPLES = 3
LOCKSTEP_LINKS = 4  # engines whose steps follow each other this close: one engine's writes
LONE_STREAMS = 1.5  # streams per engine below which engines are not counted
CROWDED_ENGINES = 1.5  # engines x requests per step over the streams in flight: not engines
ONE_TOKEN_SHARE = 0.9  # middle chunks of one token that mark one step per token
SPLIT_SHARE = 0.03  # clusters spanned beyond the tokens received (steps split apart)
INFERRED_SHARE = 0.03  # steps counted from one stream's late reads while others were in flight
MISSED_STEPS = 0.05  # expected share of steps without any chunk (stream interval > 1)
SHORT_CHUNKS = 0.002  # middle chunks with fewer tokens than clusters per gap: not one engine's
_TIME_BITS = 42  # relative ns in a sort key (73 minutes); longer points: engines not counted

STEP_KEYS = (
    "steps_observed",
    "steps_engines",
    "steps_stream_interval",
    "steps_boundary_us",
    "steps_time_p50_ms",
    "steps_time_p90_ms",
    "steps_time_p99_ms",
    "steps_decode_time_p50_ms",
    "steps_decode_time_p90_ms",
    "steps_decode_time_p99_ms",
    "steps_prefill_time_p50_ms",
    "steps_prefill_time_p90_ms",
    "steps_prefill_time_p99_ms",
    "steps_prefill_share",
    "steps_requests_per_step",
    "steps_tokens_per_request_step",
    "steps_stall_share",
    "steps_stamps",
    "steps_note",
)


@dataclass(frozen=True, slots=True)
class Clusters:
    """Chunks (indices into the point's chunk arrays) grouped into steps."""

    order: IntArray  # chunk indices in (engine, time) order
    cluster: IntArray  # [chunks] cluster id of each chunk, by chunk index
    stream: IntArray  # [chunks] the record (stream) each chunk belongs to, by chunk index
    engine_of: IntArray  # [clusters] engine of each cluster
    start_ns: IntArray  # [clusters] first arrival
    size: IntArray  # [clusters] chunks
    boundary_ns: float
    ambiguous: float  # share of gaps within a factor 2 of a boundary (worst engine)
    untold: str | None = None  # why the engines cannot be told apart (the figures are null)
    link_ns: float = 0.0  # the co-arrival link the engines were told apart by


def gap_logs(gaps: IntArray) -> FloatArray:
    """log10 of arrival gaps (ns, at least 1), sorted: what valley and the co-arrival link
    read, sorted once per set of arrivals."""
    return np.sort(np.log10(np.maximum(gaps, 1).astype(np.float64)))


def _near(logs: FloatArray, grid: FloatArray) -> IntArray:
    """Per grid point (log10 ns), the gaps within a factor WINDOW of it."""
    width = np.log10(WINDOW)
    near: IntArray = np.searchsorted(logs, grid + width) - np.searchsorted(logs, grid - width)
    return near


def valley(logs: FloatArray, cap: float) -> tuple[float, float]:
    """The boundary (ns) in [median gap, cap] with the fewest gaps (`logs`: gap_logs)
    within a factor WINDOW of it (the middle of the widest such stretch, in log space),
    and that share of gaps."""
    hi = np.log10(max(cap, FLOOR_NS * WINDOW))
    # from the median gap up (most gaps are within a step from 3 streams on; a frontend
    # that writes some chunks at once and some apart makes that mode bimodal)
    lo = min(max(float(logs[logs.size // 2]), np.log10(FLOOR_NS)), hi - np.log10(WINDOW))
    grid = np.arange(lo, hi + GRID_DECADES, GRID_DECADES)
    near = _near(logs, grid)
    best = near == near.min()
    # the widest run of grid points at the minimum: its middle
    edges = np.flatnonzero(np.diff(np.r_[0, best.astype(np.int8), 0]))
    runs = edges.reshape(-1, 2)
    widest = runs[int(np.argmax(runs[:, 1] - runs[:, 0]))]
    middle = grid[(widest[0] + widest[1] - 1) // 2]
    return float(10**middle), float(near.min()) / logs.size


def _chain(times: IntArray, link: float) -> IntArray:
    """Over sorted times: the id of each time's chain (consecutive gaps <= link)."""
    return np.cumsum(np.r_[True, np.diff(times) > link]) - 1


def _stream_of_chunk(arrays: PointArrays) -> IntArray:
    lengths = arrays.last - arrays.first + 1
    return np.repeat(np.arange(arrays.num_records, dtype=np.int64), lengths)


def _own_gap_cap(arrays: PointArrays) -> float:
    """Half the 1st percentile of the streams' own chunk gaps (inf: none apart)."""
    within = arrays.gap_is_within_record()
    own = np.diff(arrays.chunk_ns)[within].astype(np.float64)
    positive = own[own > 0]
    return 0.5 * float(np.percentile(positive, 1.0)) if positive.size else float("inf")


def _split(times: IntArray, cap: float, logs: FloatArray) -> tuple[BoolArray, float, float]:
    """Cluster starts over sorted times (`logs`: their gap_logs), the boundary and the
    share of ambiguous gaps."""
    gaps = np.diff(times)
    if gaps.size == 0:
        return np.ones(times.size, dtype=np.bool_), cap, 0.0
    if not np.isfinite(cap):
        # no stream has two chunks apart (each was read at once): no step has a known
        # upper bound, so every gap is ambiguous and the figures are null with the reason
        return np.ones(times.size, dtype=np.bool_), cap, 1.0
    boundary, ambiguous = valley(logs, cap)
    starts = np.empty(times.size, dtype=np.bool_)
    starts[0] = True
    starts[1:] = gaps > boundary
    return starts, boundary, ambiguous


def _components(n: int, left: IntArray, right: IntArray) -> IntArray:
    """Connected components of n nodes under the edges (left, right): min-label spreading."""
    label = np.arange(n, dtype=np.int64)
    if left.size == 0:
        return label
    while True:
        low = np.minimum(label[left], label[right])
        new = label.copy()
        np.minimum.at(new, left, low)
        np.minimum.at(new, right, low)
        new = new[new]  # pointer jumping: long chains settle in log steps
        if np.array_equal(new, label):
            return label
        label = new


def _stream_keys(arrays: PointArrays, stream: IntArray) -> IntArray | None:
    """stream << 42 | ns since the point's first chunk: sorted, as records are in order."""
    rel = arrays.chunk_ns - int(arrays.chunk_ns.min())
    if int(rel.max()) >= 1 << _TIME_BITS or arrays.num_records >= 1 << (62 - _TIME_BITS):
        return None
    return (stream << _TIME_BITS) | rel


def co_arrival_link(logs: FloatArray, cap: float) -> float | str | None:
    """The widest gap (ns) still inside one step's writes, for telling engines apart; None
    when no streams co-arrive; the reason when no link tells engines apart (`logs`: the
    arrival gaps of all streams, gap_logs).

    One step's chunks are written back to back, so the arrival gaps have a mode at the
    frontend's write interval (microseconds, under LINK_CAP x the cap: a step's writes
    come far closer together than its steps); engines' steps fall anywhere in between,
    their offsets drifting with their batches. The link sits in the first valley above
    that mode: after a mode holding at least MODE_SHARE of the gaps within a factor
    WINDOW, the first point where at most LINK_SHARE of them are, up to the cap (the
    tightest link past the writes: a valley that goes on falling would carry a lowest
    point into other engines' offsets). The step boundary (valley) sits in the widest valley,
    often milliseconds: it joins engines whose steps fall within a millisecond of each
    other (the 4-engine simulator at conc 16: two engines 0.6-1 ms apart co-arrived in
    99% of their steps within 1 ms, in none within 100 us). A link past LINK_CAP x the
    cap is a reason too: one step's writes spread as far as other engines' steps may lie
    (the 4-engine simulator: 1 engine, 63 steps for 247)."""
    hi = np.log10(max(cap, FLOOR_NS * WINDOW))
    grid = np.arange(np.log10(FLOOR_NS), hi + GRID_DECADES, GRID_DECADES)
    near = _near(logs, grid) / logs.size
    low = near <= LINK_SHARE
    mode = np.maximum.accumulate(np.where(grid <= np.log10(LINK_CAP * cap), near, 0.0))
    mode = mode >= MODE_SHARE
    if not np.any(mode):
        return None
    begin = np.flatnonzero(mode & low)
    if begin.size == 0:
        return (
            "engines cannot be told apart: no valley in the arrival gaps up to "
            f"{10**hi / 1e3:.0f} us (one step's writes spread as far as steps of "
            "different engines lie apart)"
        )
    link = float(10 ** grid[begin[0]])
    if link > LINK_CAP * cap:
        return (
            f"engines cannot be told apart: one step's writes spread over gaps up to "
            f"{link / 1e3:.0f} us, where other engines' steps may fall"
        )
    return link


def _engines(
    arrays: PointArrays, stream: IntArray, order: IntArray, cap: float, logs: FloatArray
) -> tuple[IntArray, float] | str | None:
    """Engine of each stream (see module doc, step 2) and the co-arrival link; the reason
    when engines cannot be told apart; None when the keys do not fit (`logs`: gap_logs of
    all arrivals, in `order`)."""
    n_streams = arrays.num_records
    keys = _stream_keys(arrays, stream)
    if keys is None:
        return None
    t = arrays.chunk_ns
    times = t[order]
    link = co_arrival_link(logs, cap)
    if link is None:  # nothing co-arrives: each stream alone (successive ones joined)
        return _tracks(np.arange(n_streams), *_lives(arrays)), 0.0
    if isinstance(link, str):
        return link
    fine = np.empty(order.size, dtype=np.int64)
    fine[order] = _chain(times, link)
    s_sorted = stream[order]
    f_sorted = fine[order]
    same = f_sorted[1:] == f_sorted[:-1]
    a, b = s_sorted[:-1][same], s_sorted[1:][same]
    keep = a != b
    lo_s, hi_s = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    pairs, counts = np.unique(lo_s * n_streams + hi_s, return_counts=True)
    pa, pb = pairs // n_streams, pairs % n_streams
    lengths = arrays.last - arrays.first + 1
    swap = lengths[pa] > lengths[pb]  # sample the shorter stream
    pa, pb = np.where(swap, pb, pa), np.where(swap, pa, pb)
    lo = np.maximum(t[arrays.first[pa]], t[arrays.first[pb]])
    hi = np.minimum(t[arrays.last[pa]], t[arrays.last[pb]])
    base = int(t.min())
    i0 = np.searchsorted(keys, (pa << _TIME_BITS) | (lo - base))
    i1 = np.searchsorted(keys, (pa << _TIME_BITS) | (hi - base), side="right")
    span = np.maximum(i1 - i0, 0)
    steps = np.arange(PAIR_SAMPLES, dtype=np.int64)
    picks = i0[:, None] + (steps[None, :] * span[:, None]) // PAIR_SAMPLES
    valid = steps[None, :] < span[:, None]
    picks = np.where(valid, picks, 0)
    j = np.searchsorted(keys, (pb[:, None] << _TIME_BITS) | (t[picks] - base))
    # the other stream's chunks either side of each sampled one: if any of its chunks
    # shares the sampled one's chain, one of these does (a chain is a stretch of time)
    hit = np.zeros(picks.shape, dtype=np.bool_)
    for cand in (j - 1, j):
        ok = (cand >= 0) & (cand < keys.size)
        cand = np.clip(cand, 0, keys.size - 1)
        hit |= ok & (stream[cand] == pb[:, None]) & (fine[cand] == fine[picks])
    samples = valid.sum(axis=1)
    share = np.where(samples > 0, (hit & valid).sum(axis=1) / np.maximum(samples, 1), 0.0)
    told = samples >= MIN_PAIR_SAMPLES
    strong = told & (share >= JOIN_SHARE)
    label = _components(n_streams, pa[strong], pb[strong])
    label = _adopt_loners(label, pa, pb, counts, ~told)
    label = _join_groups(label[stream], fine, t)[arrays.first]
    return _tracks(label, *_lives(arrays)), link


def _lives(arrays: PointArrays) -> tuple[IntArray, IntArray]:
    """Each stream's first and last arrival."""
    return arrays.chunk_ns[arrays.first], arrays.chunk_ns[arrays.last]


def _join_groups(group: IntArray, fine: IntArray, t: IntArray) -> IntArray:
    """Groups (per chunk) whose streams overlap only briefly (one wave of requests
    ending as the next begins) are one engine's when, while both run, >= 3/4 of the
    clusters of the one seen less carry both (and at least two do)."""
    ids, group = np.unique(group, return_inverse=True)
    if ids.size < 2:
        return group
    present = np.unique(fine * ids.size + group)
    c, g = present // ids.size, present % ids.size
    adjacent = c[1:] == c[:-1]
    pair_codes, together = np.unique(
        g[:-1][adjacent] * ids.size + g[1:][adjacent], return_counts=True
    )
    first = np.full(fine.max() + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, fine, t)
    lo = np.full(ids.size, np.iinfo(np.int64).max)
    hi = np.zeros(ids.size, dtype=np.int64)
    np.minimum.at(lo, group, t)
    np.maximum.at(hi, group, t)
    left, right = [], []
    for code, both in zip(pair_codes.tolist(), together.tolist(), strict=True):
        a, b = divmod(code, ids.size)
        start, end = max(lo[a], lo[b]), min(hi[a], hi[b])
        seen = [
            int(np.count_nonzero((first[c[g == x]] >= start) & (first[c[g == x]] <= end)))
            for x in (a, b)
        ]
        if both >= 2 and both >= JOIN_SHARE * min(seen):
            left.append(a)
            right.append(b)
    merged = _components(ids.size, np.array(left, dtype=np.int64), np.array(right, dtype=np.int64))
    return merged[group]


def _adopt_loners(
    label: IntArray, pa: IntArray, pb: IntArray, counts: IntArray, untold: BoolArray
) -> IntArray:
    """A stream in no strong pair joins the group of its most frequent neighbour among
    those it overlaps too briefly to tell (`untold`): a stream that overlapped others
    long enough and co-arrived with none runs on an engine of its own."""
    sizes = np.bincount(label, minlength=label.size)
    lonely = sizes[label] == 1
    candidates = untold & (lonely[pa] ^ lonely[pb])
    if not np.any(candidates):
        return label
    loner = np.where(lonely[pa], pa, pb)[candidates]
    other = np.where(lonely[pa], pb, pa)[candidates]
    weight = counts[candidates]
    best = np.lexsort((-weight, loner))
    first = np.ones(best.size, dtype=np.bool_)
    first[1:] = loner[best][1:] != loner[best][:-1]
    chosen = best[first]
    label = label.copy()
    label[loner[chosen]] = label[other[chosen]]
    return label


def _tracks(label: IntArray, begin: IntArray, end: IntArray) -> IntArray:
    """Groups that never overlap in time are one engine's: fewest tracks (greedy by start)."""
    groups, inverse = np.unique(label, return_inverse=True)
    g_begin = np.full(groups.size, np.iinfo(np.int64).max)
    g_end = np.zeros(groups.size, dtype=np.int64)
    np.minimum.at(g_begin, inverse, begin)
    np.maximum.at(g_end, inverse, end)
    track_of = np.zeros(groups.size, dtype=np.int64)
    track_end: list[int] = []
    for g in np.argsort(g_begin, kind="stable"):  # one pass over groups, not chunks
        free = [i for i, e in enumerate(track_end) if e < g_begin[g]]
        if free:
            i = min(free, key=lambda x: track_end[x])
        else:
            track_end.append(0)
            i = len(track_end) - 1
        track_end[i] = int(g_end[g])
        track_of[g] = i
    return track_of[inverse]


def cluster(arrays: PointArrays, *, group_engines: bool) -> tuple[Clusters, int | None]:
    """Chunks into clusters (per engine when group_engines), and the engine count."""
    stream = _stream_of_chunk(arrays)
    cap = _own_gap_cap(arrays)
    order = np.argsort(arrays.chunk_ns, kind="stable")
    times = arrays.chunk_ns[order]
    logs = gap_logs(np.diff(times))  # one sort for the boundary and the co-arrival link
    starts, boundary, ambiguous = _split(times, cap, logs)
    engine_of_stream = np.zeros(arrays.num_records, dtype=np.int64)
    engines: int | None = 1
    untold: str | None = None
    link = 0.0
    if group_engines:
        grouped = _engines(arrays, stream, order, cap, logs) if np.isfinite(cap) else None
        if isinstance(grouped, str):
            untold = grouped
        elif grouped is None:
            engines = None
        else:
            engine_of_stream, link = grouped
            engines = int(engine_of_stream.max()) + 1
    engine = engine_of_stream[stream]
    if engines != 1:  # per engine: its own boundary over its own arrivals
        order = np.lexsort((arrays.chunk_ns, engine))
        t = arrays.chunk_ns[order]
        e = engine[order]
        starts = np.zeros(order.size, dtype=np.bool_)
        boundary, ambiguous = 0.0, 0.0
        bounds = np.flatnonzero(np.r_[True, e[1:] != e[:-1], True])
        for lo, hi in itertools.pairwise(bounds):
            part, b, amb = _split(t[lo:hi], cap, gap_logs(np.diff(t[lo:hi])))
            starts[lo:hi] = part
            boundary, ambiguous = max(boundary, b), max(ambiguous, amb)
    ids = np.cumsum(starts) - 1
    chunk_cluster = np.empty(order.size, dtype=np.int64)
    chunk_cluster[order] = ids
    first_pos = np.flatnonzero(starts)
    return (
        Clusters(
            order=order,
            cluster=chunk_cluster,
            stream=stream,
            engine_of=engine[order][first_pos],
            start_ns=arrays.chunk_ns[order][first_pos],
            size=np.diff(np.r_[first_pos, order.size]),
            boundary_ns=boundary,
            ambiguous=ambiguous,
            untold=untold,
            link_ns=link,
        ),
        engines,
    )


def _pct(values: FloatArray) -> list[float | None]:
    if values.size == 0:
        return [None, None, None]
    return [float(v) for v in np.percentile(values, [50.0, 90.0, 99.0])]


def _null(reason: str, stamps: str) -> dict[str, Any]:
    result: dict[str, Any] = dict.fromkeys(STEP_KEYS)
    result["steps_stamps"] = stamps
    result["steps_note"] = reason
    return result


def _middle_tokens(arrays: PointArrays) -> IntArray:
    """Tokens of each stream's chunks between its first and its last."""
    middle = np.ones(arrays.chunk_ns.size, dtype=np.bool_)
    middle[arrays.first] = False
    middle[arrays.last] = False
    tokens: IntArray = arrays.chunk_tokens[middle]
    return tokens


def stream_interval_hint(arrays: PointArrays) -> bool:
    """Whether chunks look merged over steps: middle chunks that (nearly) never carry one
    token (without MTP a step gives one; with it, a rejected draft gives one)."""
    tokens = _middle_tokens(arrays)
    return tokens.size > 0 and float(np.percentile(tokens, 2.0)) >= 2


def merges_steps(arrays: PointArrays, stream_interval: int | None) -> bool:
    """Whether a chunk stands for several steps: the server's stream interval is known to
    be > 1, or the chunks look so (stream_interval_hint)."""
    return (stream_interval or 1) > 1 or stream_interval_hint(arrays)


def groups_engines(merged: bool, server_engines: int | None) -> bool:
    """Whether cluster() groups streams into engines: not when chunks merge steps (phase
    groups look like engines) nor when the server's /metrics label one engine."""
    return not merged and server_engines != 1


def step_fields(
    arrays: PointArrays,
    kernel_stamps: bool,
    stream_interval: int | None = None,
    server_engines: int | None = None,
) -> dict[str, Any]:
    """The point's `steps_*` fields (docs/results.md); `kernel_stamps`: every completed
    record's arrivals are kernel receive stamps; `stream_interval`: the server's, when
    known; `server_engines`: the engines the server's /metrics label its steps with, when
    it does (one: nothing to tell apart; more: the count the grouping must find)."""
    stamps = "kernel" if kernel_stamps else "read"
    if arrays.chunk_ns.size < MIN_CHUNKS or arrays.num_records < 1:
        return _null(f"too few chunks ({arrays.chunk_ns.size} < {MIN_CHUNKS})", stamps)
    merged = merges_steps(arrays, stream_interval)
    if merged and (server_engines or 1) > 1:
        return _null(_interleaved(f"behind {server_engines} engines"), stamps)
    clusters, engines = cluster(arrays, group_engines=groups_engines(merged, server_engines))
    notes: list[str] = []
    if not kernel_stamps:
        notes.append("read stamps (not the kernel's): clusters include the client's read delay")
    if not np.isfinite(clusters.boundary_ns):
        return _null(
            "clusters cannot be told apart: no stream has two chunks read apart (each "
            "stream's output arrived in one read)",
            stamps,
        )
    if clusters.untold is not None:
        return _null(clusters.untold, stamps)
    if (
        server_engines is not None
        and engines is not None
        and _not_theirs(arrays, engines, server_engines)
    ):
        return _null(
            f"engines cannot be told apart: {engines} found where the server's /metrics "
            f"label {server_engines} (engines whose steps stay close join, one engine's "
            "paused writes split)",
            stamps,
        )
    if clusters.ambiguous > AMBIGUOUS_SHARE:
        return _null(
            f"clusters cannot be told apart: {clusters.ambiguous:.1%} of arrival gaps lie "
            f"within a factor {WINDOW} of the best boundary "
            f"({clusters.boundary_ns / 1e3:.0f} us)",
            stamps,
        )
    within = arrays.gap_is_within_record()
    later = np.arange(1, arrays.chunk_ns.size)[within]
    apart = np.diff(arrays.chunk_ns)[within] > 0  # chunks read together share a stamp
    twice = clusters.cluster[later] == clusters.cluster[later - 1]
    doubled = float(np.count_nonzero(twice & apart)) / max(1, int(apart.sum()))
    if doubled > AMBIGUOUS_SHARE:
        return _null(
            f"clusters cannot be told apart: {doubled:.1%} of the chunks share a cluster "
            "with their stream's previous chunk (one step's chunks run into the next's)",
            stamps,
        )
    own = np.diff(arrays.chunk_ns)[within]
    interval = np.diff(clusters.start_ns)[clusters.engine_of[1:] == clusters.engine_of[:-1]]
    k = 1
    if own.size and interval.size:
        k = max(1, round(float(np.median(own)) / float(np.median(interval))))
    # a chunk carries at least a token per step it stands for: k is at most the tokens of
    # a middle chunk (the clusters alone put k at 1 for one stream at k = 10: 121 ms steps)
    tokens = _middle_tokens(arrays)
    k_skip = max(k, int(np.median(tokens))) if merged and tokens.size else k
    # the same bound the other way: one engine's clusters per gap of a stream are at most
    # the steps its chunk stands for, so at most its tokens; no middle chunk of one
    # engine carries fewer tokens than k (DP 1, k = 10: none of 18,714 in 6 points).
    # Where some do, other engines' steps fall between (DP 2, k = 3, MTP, no engine
    # labels: 7 clusters a gap, 38% of the chunks under 7 tokens, 6.7 ms steps published
    # for 15.8; 4 a gap with 3-token chunks, 10.6 ms). A server that labels one engine
    # has none to mix in.
    short = float(np.mean(tokens < k)) if tokens.size else 0.0
    if merged and server_engines is None and short > SHORT_CHUNKS:
        return _null(
            _interleaved(
                f"behind a server that does not label its engines, and ~{k} clusters "
                f"per gap of one stream where {short:.1%} of its chunks carry fewer "
                "tokens (at least one a step): other engines' steps fall between its own"
            ),
            stamps,
        )
    if k > 1 and not merged:
        return _null(
            f"clusters cannot be told apart: ~{k} clusters per gap of one stream, yet its "
            "chunks carry one step each (the frontend smears each step's chunks)",
            stamps,
        )
    multiplicity = step_multiplicity(arrays, clusters)
    inferred = crowded_inference_share(arrays, clusters, multiplicity)
    if inferred > INFERRED_SHARE:
        return _null(
            f"clusters cannot be told apart: {inferred:.1%} of the steps are counted from "
            "chunks read together while a request in flight had no chunk in them (its "
            "own read may count the same steps again)",
            stamps,
        )
    split = oversplit_share(arrays, clusters, multiplicity)
    if split > SPLIT_SHARE:
        return _null(
            f"clusters cannot be told apart: streams span {split:.1%} more of their "
            "engine's steps than they received tokens (one step's chunks fall into "
            "several clusters)",
            stamps,
        )
    running_known = not merged or server_engines is not None
    if merged:
        engines = None
        notes.append("stream interval > 1: engines not counted (phase groups look alike)")
        if not running_known:
            # the streams running per engine need the engines: two whose steps co-arrive
            # are one clock here (DP 2, k = 3: 26.4 requests a step published for 13.6)
            notes.append(
                "requests per step not measured: the streams in flight are shared by "
                "engines a server that does not label them leaves uncounted"
            )
    elif engines is None:
        notes.append("engines not counted: the point is longer than its sort keys hold (73 min)")
    elif engines is not None and engines > 1 and _mean_active(arrays, engines) < LONE_STREAMS:
        return _null(
            "clusters cannot be told apart: no streams co-arrive (one engine per stream "
            "cannot be told from a frontend that smears each step's chunks)",
            stamps,
        )
    elif engines is not None and engines > 1:
        # engines side by side share the streams in flight: each step carries its own
        # engine's; a step carrying nearly all of them leaves no streams for the others
        # (one engine's successive groups of requests, split where they overlapped)
        carried = _requests_per_step(clusters, multiplicity) * engines
        running = _mean_active(arrays, 1)
        if carried > CROWDED_ENGINES * running:
            return _null(
                f"engines cannot be told apart: {engines} engines at "
                f"{carried / engines:.1f} requests a step would carry {carried:.1f} "
                f"streams at once, {running:.1f} ran",
                stamps,
            )
        lockstep = lockstep_share(arrays, clusters)
        if lockstep > JOIN_SHARE:
            return _null(
                f"engines cannot be told apart: two engines' steps follow each other "
                f"within {LOCKSTEP_LINKS} co-arrival links in {lockstep:.0%} of their "
                "steps (one step's writes paused where the grouping split them, or "
                "engines in lockstep)",
                stamps,
            )
    return _figures(
        arrays, clusters, multiplicity, engines, stamps, notes, (k, k_skip), running_known
    )


def _interleaved(behind: str) -> str:
    """Why a stream interval > 1 behind several engines is null: each engine's streams
    send in phase groups, one group a step, so its clusters look like another engine's
    and no engine's steps can be picked out of the interleaved ones."""
    return (
        f"engines cannot be told apart: a stream interval > 1 {behind} (each engine's "
        "phase groups look like engines, so no engine's steps can be picked out)"
    )


def lockstep_share(arrays: PointArrays, clusters: Clusters) -> float:
    """The highest share, over pairs of engines running at once, of one engine's clusters
    that the other's start or end within LOCKSTEP_LINKS co-arrival links of.

    One engine whose writes of each step pause halfway (the simulator at conc 256 now and
    then) splits into two groups of streams, each seeing every step right after the
    other's: two engines, and twice the steps. Engines apart follow each other that
    closely only while their offsets drift through it."""
    n = int(clusters.start_ns.size)
    end = np.zeros(n, dtype=np.int64)
    np.maximum.at(end, clusters.cluster, arrays.chunk_ns)
    near = LOCKSTEP_LINKS * clusters.link_ns
    engines = np.unique(clusters.engine_of)
    worst = 0.0
    for a, b in itertools.permutations(engines.tolist(), 2):
        mine, theirs = clusters.engine_of == a, clusters.engine_of == b
        start_a, end_a = clusters.start_ns[mine], end[mine]
        start_b, end_b = clusters.start_ns[theirs], end[theirs]
        during = (start_a >= start_b[0]) & (start_a <= end_b[-1])
        if np.count_nonzero(during) < MIN_PAIR_SAMPLES:
            continue
        after = np.searchsorted(start_b, end_a[during])  # b's next step after a's
        before = np.searchsorted(end_b, start_a[during]) - 1  # b's step before a's
        gap_after = start_b[np.minimum(after, start_b.size - 1)] - end_a[during]
        gap_before = start_a[during] - end_b[np.maximum(before, 0)]
        close = ((after < start_b.size) & (gap_after >= 0) & (gap_after <= near)) | (
            (before >= 0) & (gap_before >= 0) & (gap_before <= near)
        )
        worst = max(worst, float(np.mean(close)))
    return worst


def step_multiplicity(arrays: PointArrays, clusters: Clusters) -> IntArray:
    """Per cluster, the engine steps it stands for.

    A stream's chunks read together (one stamp) put several steps in one cluster: the
    cluster stands for as many steps as any stream has chunks in it; without speculative
    decoding (nearly every middle chunk one token) a chunk of n tokens is n steps the
    frontend merged into one event."""
    stream = clusters.stream
    weight = arrays.chunk_tokens if one_token_steps(arrays) else np.ones_like(stream)
    return _multiplicity(
        clusters.cluster,
        stream,
        arrays.num_records,
        int(clusters.start_ns.size),
        np.maximum(weight, 1),
    )


def crowded_inference_share(
    arrays: PointArrays, clusters: Clusters, multiplicity: IntArray
) -> float:
    """Steps counted from chunks read together (a cluster's multiplicity beyond 1) in
    clusters that some request in flight has no chunk in, over all steps counted.

    One stream's chunks read together are that many steps of its engine, and a cluster
    that also holds every other request then in flight (each with its chunks of those
    steps) is those steps once. A request in flight without a chunk there may have run in
    those steps with its output held back for a read of its own, which would count the
    same steps again: real vLLM CPU at conc 8 on a loaded machine wrote each stream's
    whole output in two reads, one stream after another, and 26 clusters counted 1,536
    steps where vLLM ran 646. With one request in flight nothing is counted twice
    (vLLM's CPU frontend at conc 1: 178 clusters for 196 steps)."""
    begun = np.searchsorted(np.sort(arrays.start_ns), clusters.start_ns, side="right")
    ended = np.searchsorted(np.sort(arrays.end_ns), clusters.start_ns, side="left")
    in_flight = begun - ended
    pairs = np.unique(clusters.cluster * arrays.num_records + clusters.stream)
    present = np.bincount(pairs // arrays.num_records, minlength=multiplicity.size)
    absent = in_flight > present
    inferred = int((multiplicity[absent] - 1).sum())
    return inferred / max(1, int(multiplicity.sum()))


def oversplit_share(arrays: PointArrays, clusters: Clusters, multiplicity: IntArray) -> float:
    """Steps a stream spans beyond the tokens it received, over all steps spanned.

    A running request gets at least one token per step of its engine (k steps' tokens in
    one chunk at a stream interval k, more with speculative decoding), so over the
    clusters strictly between its first chunk's and its last chunk's (the edge clusters
    may hold steps before it began or after it ended) the steps counted cannot exceed the
    tokens it received in them. More means steps were split into several clusters, or a
    cluster's steps counted from one stream's chunks straddle another's clusters (or two
    engines' clusters were taken for one engine's): the count is too high. Clusters of an
    engine are consecutive ids (cluster() numbers them by engine, then time)."""
    stream = clusters.stream
    first = clusters.cluster[arrays.first]
    last = clusters.cluster[arrays.last]
    steps_through = np.cumsum(multiplicity)
    between = np.where(
        last > first + 1, steps_through[np.maximum(last - 1, 0)] - steps_through[first], 0
    )
    chunk = clusters.cluster
    inside = (chunk > first[stream]) & (chunk < last[stream])
    received = np.bincount(
        stream[inside], weights=arrays.chunk_tokens[inside], minlength=arrays.num_records
    )
    excess = np.maximum(between - received, 0)
    return float(excess.sum()) / max(1, int(between.sum()))


def _figures(
    arrays: PointArrays,
    clusters: Clusters,
    multiplicity: IntArray,
    engines: int | None,
    stamps: str,
    notes: list[str],
    intervals: tuple[int, int],
    running_known: bool,
) -> dict[str, Any]:
    """The figures of clusters that passed every check; `intervals`: k and its bound by
    the tokens a chunk carries; `running_known`: whether the engines sharing the streams
    in flight are known (at k > 1 requests per step are those streams per engine)."""
    k, k_skip = intervals
    n_clusters = int(clusters.start_ns.size)
    first_cluster = clusters.cluster[arrays.first]
    prefill = np.zeros(n_clusters, dtype=np.bool_)
    prefill[first_cluster] = True
    # latest send among the requests whose first chunk a cluster carries, where it
    # carries nothing else: an engine with running requests was not idle before it
    sent = np.full(n_clusters, np.iinfo(np.int64).min)
    np.maximum.at(sent, first_cluster, arrays.start_ns)
    firsts = np.bincount(first_cluster, minlength=n_clusters)
    sent[firsts < clusters.size] = np.iinfo(np.int64).min
    same_engine = np.r_[False, clusters.engine_of[1:] == clusters.engine_of[:-1]]
    previous = np.r_[0, clusters.start_ns[:-1]]
    began = np.maximum(previous, sent)
    measured = same_engine | (sent > np.iinfo(np.int64).min)
    # a cluster right after another engine's, with no request sent: its first step
    began = np.where(same_engine, began, sent)
    stream = clusters.stream
    step_ms = (clusters.start_ns - began) / NS_PER_MS / multiplicity
    result: dict[str, Any] = dict.fromkeys(STEP_KEYS)
    result.update(
        {
            "steps_observed": int(multiplicity.sum()),
            "steps_engines": engines,
            "steps_stream_interval": k,
            "steps_boundary_us": clusters.boundary_ns / 1e3,
            "steps_stamps": stamps,
            "steps_prefill_share": float(prefill.mean()),
        }
    )
    active = _mean_active(arrays, engines or 1)
    if k_skip > 1 and np.exp(-active / k_skip) > MISSED_STEPS:
        notes.append(
            f"stream interval ~{k} (up to {k_skip} by the tokens a chunk carries) at "
            f"~{active:.1f} streams per engine: clusters skip steps, so step times are "
            "not measured"
        )
    else:
        valid = measured & (step_ms > 0)
        times = np.repeat(step_ms[valid], multiplicity[valid])
        decode = np.repeat(step_ms[valid & ~prefill], multiplicity[valid & ~prefill])
        result.update(dict(zip(_keys("time"), _pct(times), strict=True)))
        result.update(dict(zip(_keys("decode_time"), _pct(decode), strict=True)))
        result.update(dict(zip(_keys("prefill_time"), _pct(step_ms[valid & prefill]), strict=True)))
    # at k > 1 the streams sending in a step are those whose phase comes up, and streams
    # admitted together share a phase (DP 1, k = 10, conc 16: 5.4 chunks a cluster, x 10
    # = 54 for ~15 running); every running request gets its tokens each step, so count
    # those instead
    if k_skip == 1:
        result["steps_requests_per_step"] = _requests_per_step(clusters, multiplicity) * k
    elif running_known:
        result["steps_requests_per_step"] = _mean_active(arrays, engines or 1)
    tokens = _middle_tokens(arrays)
    if tokens.size:
        result["steps_tokens_per_request_step"] = float(tokens.mean()) / k
    result["steps_stall_share"] = _stall_share(arrays, clusters, prefill, stream)
    result["steps_note"] = "; ".join(notes) or None
    return result


def _multiplicity(
    cluster: IntArray, stream: IntArray, streams: int, clusters: int, weight: IntArray
) -> IntArray:
    """Per cluster, the most steps any one stream has in it: its chunks (1 unless read
    together), each weighing its tokens when a chunk is one token per step."""
    pairs, inverse = np.unique(cluster * streams + stream, return_inverse=True)
    counts = np.bincount(inverse.ravel(), weights=weight, minlength=pairs.size).astype(np.int64)
    most = np.ones(clusters, dtype=np.int64)
    np.maximum.at(most, pairs // streams, counts)
    return most


def one_token_steps(arrays: PointArrays) -> bool:
    """>= 90% of the middle chunks carry one token: no speculative decoding, so a chunk
    with more is several steps merged (with MTP a step gives 1..K+1 tokens)."""
    tokens = _middle_tokens(arrays)
    return tokens.size > 0 and float(np.mean(tokens == 1)) >= ONE_TOKEN_SHARE


def _keys(name: str) -> list[str]:
    return [f"steps_{name}_p{p}_ms" for p in (50, 90, 99)]


def _not_theirs(arrays: PointArrays, engines: int, server_engines: int) -> bool:
    """Whether the engines found cannot be the server's: more than it runs, or fewer while
    as many streams ran as it has engines (its balancer puts a request on the least
    loaded engine, so each was busy); at conc 1 only one engine is ever busy."""
    if engines > server_engines:
        return True
    return engines < server_engines and _mean_active(arrays, 1) >= server_engines


def _requests_per_step(clusters: Clusters, multiplicity: IntArray) -> float:
    """Chunks per engine step observed (a cluster stands for `multiplicity` steps)."""
    return float(clusters.size.sum() / multiplicity.sum())


def _mean_active(arrays: PointArrays, engines: int) -> float:
    """Streams running at once per engine, on average over the point."""
    t = arrays.chunk_ns
    span = float(t.max() - t.min())
    lives = float(np.sum(t[arrays.last] - t[arrays.first]))
    return lives / span / engines if span > 0 else 0.0


def _stall_share(
    arrays: PointArrays, clusters: Clusters, prefill: BoolArray, stream: IntArray
) -> float | None:
    """Share of the ITL gaps above the point's p90 that span a prefill step."""
    within = arrays.gap_is_within_record()
    gaps = np.diff(arrays.chunk_ns)[within]
    if gaps.size == 0:
        return None
    later = np.arange(1, arrays.chunk_ns.size)[within]
    cum = np.cumsum(prefill)  # clusters are contiguous per engine and in time order
    hit = cum[clusters.cluster[later]] - cum[clusters.cluster[later - 1]] > 0
    above = gaps > np.percentile(gaps, 90.0)
    if not np.any(above):
        return None
    return float(np.count_nonzero(hit & above) / np.count_nonzero(above))
