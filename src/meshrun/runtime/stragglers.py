"""Stragglers while the job runs: name the node whose ranks are slow. Pure (no store, no
clock of its own): node 0's watchdog hands it every rank's progress value each beat.

What it compares. In synchronous training every rank's step takes as long as the slowest
rank's: the slow one is the one the others wait for, so it is the rank that waits least.
Three figures, the first a rank has:

1. **time working** (any script, nothing to call): the share of its time the rank spent
   working rather than waiting in collectives, as the worker shim observes it
   (:mod:`meshrun.worker.observe`: on gloo the kernel's accounting of the main thread and
   gloo's threads, on GPUs NCCL's completion-hook timings). The waits inside a forward's
   own collectives (FSDP2's and ZeRO-3's all-gathers, tensor parallelism's all-reduces)
   count as waiting, so it holds for every layout.
2. **compute time** per step, when the script reports steps (:func:`meshrun.progress`) and
   marks its arrival at the step's synchronisation (:func:`meshrun.arrive`): the mean time
   the rank worked before arriving. Exact for DDP-like steps; under FSDP2 or tensor
   parallelism it includes the waits inside the forward (used only with observation off,
   ``MESHRUN_OBSERVE=0``).
3. **step time**, with ``progress()`` alone: names a slow rank only when ranks do not wait
   for each other.

The figures are compared like for like (a rank is judged against the ranks measured the
same way). A job of one rank has nobody to compare with: the check says so once and
judges nothing.

The rule. A rank's figure is divided by the reference of its node: the median, over the
*other* nodes, of each node's median figure (with two nodes, the other node; on one node,
the median of the other ranks). A report is **slow** when that ratio is at least ``factor``
(1.25 by default) and the figure at least ``_FLOOR_S`` (``_FLOOR_SHARE`` for shares) above
the reference. A rank is slow
once it has reported without a break (no gap over ``_FRESH_S``, no restart) for ``window``
seconds (30 by default) and at least half of its reports over the last ``window`` seconds
were slow: the window's median ratio is at or above the factor, so the noise of single
reports neither names a node nor ends a streak. A node is named once some of its ranks
are slow, with the median ratio of those ranks and which ranks; it is "no longer slow" once
its ranks, judged on a full window again, are not. The line gives the median ratio of its
slow reports and how long ago the first of them in the window came. Nothing counts before
a rank's third report with timings and its ``_WARMUP_STEPS``-th step (start-up,
compilation, lazy initialisation); a pause every rank shares (a checkpoint save, an evaluation) changes no
ratio; a pause only one rank takes (rank 0 writing a checkpoint) is one report of many in
the window; a rank that stops reporting (a hang, a pause, the end) is judged only once it
has reported for a whole window again.

Cost on node 0: the progress values are the ones the hang check reads (one ``multi_get`` a
beat); the judgement is a sort of N node figures, O(W + N log N) for W ranks.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import protocol
from .supervision import Supervision

_DEFAULTS = Supervision()

_WARMUP_STEPS = 5     # steps each rank takes before its timings count
_WARMUP_REPORTS = 2   # reports with timings each rank sends before its timings count
_FRESH_S = 5.0        # a rank's figure counts in the references this long after it came
_FLOOR_S = 0.0005     # slower by this much too: the jitter of sub-millisecond steps is no straggler
_FLOOR_SHARE = 0.02   # a work share above the others' by this much too (2 % of the time)
_SERIES_S = 10.0      # the first width of a node's figures-over-time buckets (node_steps.json)
_SERIES_MAX = 360     # buckets a node keeps; past it, neighbours merge (the width doubles)
WORK = "time working"  # the measure of the worker shim's work shares (meshrun.worker.observe)


def _median_without(ordered: list[float], value: float | None) -> float | None:
    """The median of sorted ``ordered`` with one ``value`` left out (none when ``value`` is
    None), without copying the list: O(log N)."""
    skip = bisect.bisect_left(ordered, value) if value is not None else len(ordered)
    count = len(ordered) - (value is not None)
    if count <= 0:
        return None

    def at(i: int) -> float:
        return ordered[i if i < skip else i + 1]

    mid = count // 2
    return at(mid) if count % 2 else (at(mid - 1) + at(mid)) / 2


def rank_list(ranks: list[int] | tuple[int, ...]) -> str:
    """``ranks 24-31`` / ``rank 5`` / ``ranks 2, 5-6``."""
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for r in ordered:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
    return ("rank " if len(ordered) == 1 else "ranks ") + text


@dataclass(frozen=True)
class Notice:
    """A node named slow (``kind`` "slow") or no longer slow ("recovered")."""

    kind: str
    node: int
    host: str
    ratio: float
    seconds: float
    ranks: tuple[int, ...]
    measure: str          # "compute time" | "step time"
    line: str

    def to_json(self) -> dict:
        return {"event": f"node-{self.kind}", "node": self.node, "host": self.host,
                "ratio": round(self.ratio, 3), "seconds": round(self.seconds, 1),
                "ranks": list(self.ranks), "measure": self.measure, "line": self.line}


def slow_line(node: int, host: str, ratio: float, seconds: float, ranks: tuple[int, ...],
              measure: str, *, one_node: bool = False) -> str:
    others = "the other ranks" if one_node else "the other nodes"
    what = (f"{measure} (not waiting for the others)" if measure == WORK
            else f"{measure} per step")
    return (f"meshrun: node {node} ({host}) is slow: {ratio:.2f}x the median {what} "
            f"of {others} for {seconds:.0f} s; {rank_list(list(ranks))}")


def recovered_line(node: int, host: str) -> str:
    return f"meshrun: node {node} ({host}) is no longer slow"


@dataclass
class _Rank:
    text: str = ""
    first_step: int = -1
    last_step: int = -1
    reports: int = 0          # reports with timings since first_step
    figure: float = -1.0      # the latest counted figure (busy, else step time)
    measure: str = ""
    at: float = -1.0          # node 0's clock when that figure came
    since: float | None = None  # start of its unbroken run of counted reports
    recent: deque = field(default_factory=deque)  # (time, ratio) over the last window
    slow_count: int = 0       # how many of ``recent`` are at or above the factor


@dataclass
class _Totals:
    """A node's figures over the run (for ``meshrun report``)."""

    steps: int = 0
    step_s: float = 0.0       # sum of step durations
    busy_steps: int = 0
    busy_s: float = 0.0
    work_reports: int = 0     # reports with a work share (meshrun.worker.observe)
    work: float = 0.0         # their sum
    named: int = 0            # times it was named slow


@dataclass
class _Series:
    """A node's figures over time, for the run's page: buckets of ``width`` seconds of node
    0's clock, each summing what :class:`_Totals` sums. Bounded: past ``_SERIES_MAX``
    buckets, each pair merges and the width doubles (a 9-hour run keeps 360 points of 90 s)."""

    width: float = _SERIES_S
    buckets: dict[int, list[float]] = field(default_factory=dict)  # index -> sums, as below

    def add(self, now: float, steps: int, step_s: float, busy_s: float, work: float) -> None:
        """One counted report: ``steps`` steps of ``step_s`` each (0: none), ``busy_s``
        compute time a step (< 0: none), ``work`` the share working (< 0: none)."""
        b = self.buckets.setdefault(int(now // self.width), [0.0] * 6)
        if steps > 0 and step_s >= 0:
            b[0] += steps
            b[1] += step_s * steps
            if busy_s >= 0:
                b[2] += steps
                b[3] += busy_s * steps
        if work >= 0:
            b[4] += 1
            b[5] += work
        while len(self.buckets) > _SERIES_MAX:
            merged: dict[int, list[float]] = {}
            for index, sums in self.buckets.items():
                into = merged.setdefault(index // 2, [0.0] * 6)
                for i, value in enumerate(sums):
                    into[i] += value
            self.buckets, self.width = merged, self.width * 2

    def points(self, offset: float) -> list[list[float | None]]:
        """``[time, step time, compute time, share working]`` per bucket (its middle, on the
        clock ``offset`` seconds from node 0's: wall time), None where it had none."""
        out = []
        for index in sorted(self.buckets):
            steps, step_s, busy_n, busy_s, work_n, work = self.buckets[index]
            out.append([round(offset + (index + 0.5) * self.width, 3),
                        round(step_s / steps, 6) if steps else None,
                        round(busy_s / busy_n, 6) if busy_n else None,
                        round(work / work_n, 4) if work_n else None])
        return out


@dataclass
class Stragglers:
    nnodes: int
    nproc: int
    hosts: Mapping[int, str] = field(default_factory=dict)
    factor: float = _DEFAULTS.slow_factor   # the one default: Supervision's
    window: float = _DEFAULTS.slow_window
    seats: tuple[int, ...] = ()  # seat -> node (meshrun.runtime.membership); () = node k
    wall_offset: float = 0.0     # wall time minus the clock ``observe`` gets (the series' times)

    def __post_init__(self) -> None:
        self._ranks: dict[int, _Rank] = {}
        self._named: dict[int, Notice] = {}     # node -> the notice that named it
        self.totals: dict[int, _Totals] = {}
        self.series: dict[int, _Series] = {}    # node -> its figures over time

    def node_of(self, rank: int) -> int:
        seat = rank // max(1, self.nproc)
        return self.seats[seat] if seat < len(self.seats) else seat

    def reseat(self, seats: tuple[int, ...]) -> None:
        """A spare took a lost node's seat: ranks now run on ``seats``; every rank's
        figures start again (the workers restarted), the run's totals stay."""
        self.seats = tuple(seats)
        self._ranks.clear()
        self._named.clear()

    def observe(self, now: float, values: Mapping[int, str]) -> list[Notice]:
        """One beat: every rank's progress value as read (``""`` for none)."""
        fresh = [r for r, value in values.items() if value and self._take(r, value, now)]
        if fresh:
            self._judge(now, fresh)
        return self._notices(now)

    def _take(self, rank: int, value: str, now: float) -> bool:
        """A new value: note it; True when it brings a figure that counts."""
        state = self._ranks.setdefault(rank, _Rank())
        if value == state.text:
            return False
        state.text = value
        try:
            p = protocol.Progress.decode(value)
        except ValueError:
            return False
        mark = p.step if p.step >= 0 else p.coll   # how far it got: steps, else collectives
        if state.first_step < 0 or mark < state.last_step:  # first report, or a restart
            state.first_step, state.reports = mark, 0
            self._break(state)
        state.last_step = mark
        timed = p.steps > 0 and p.step_s >= 0
        if not timed and p.work < 0:
            return False
        state.reports += 1
        if state.reports <= _WARMUP_REPORTS or mark < state.first_step + _WARMUP_STEPS:
            return False
        node = self.node_of(rank)
        totals = self.totals.setdefault(node, _Totals())
        self.series.setdefault(node, _Series()).add(
            now, p.steps if timed else 0, p.step_s, p.busy_s if timed else -1.0, p.work)
        if timed:
            totals.steps += p.steps
            totals.step_s += p.step_s * p.steps
            if p.busy_s >= 0:
                totals.busy_steps += p.steps
                totals.busy_s += p.busy_s * p.steps
        if p.work >= 0:
            totals.work_reports += 1
            totals.work += p.work
            state.figure, state.measure = p.work, WORK
        elif state.measure == WORK:
            return False  # a report between two of the observer's samples: its figure stands
        else:
            state.figure, state.measure = ((p.busy_s, "compute time") if p.busy_s >= 0
                                           else (p.step_s, "step time"))
        if state.since is None or now - state.at > _FRESH_S:  # a gap: the run starts again
            self._break(state)
            state.since = now
        state.at = now
        return True

    @staticmethod
    def _break(state: _Rank) -> None:
        state.since = None
        state.recent.clear()
        state.slow_count = 0

    def _peer_group(self, rank: int) -> int:
        """What a rank is compared against the others of: its node, or on a one-node job
        the rank itself (each rank against the other ranks)."""
        return rank if self.nnodes == 1 else self.node_of(rank)

    def _references(self, now: float, measure: str) -> dict[int, float]:
        """group -> the median over the other groups of each group's median figure."""
        by_group: dict[int, list[float]] = {}
        for rank, state in self._ranks.items():
            if state.measure == measure and now - state.at <= _FRESH_S:
                by_group.setdefault(self._peer_group(rank), []).append(state.figure)
        medians = {group: statistics.median(figures) for group, figures in by_group.items()}
        ordered = sorted(medians.values())
        refs: dict[int, float] = {}
        for group in medians:
            ref = _median_without(ordered, medians[group])
            if ref is not None:
                refs[group] = ref
        return refs

    def _judge(self, now: float, fresh: list[int]) -> None:
        refs = {m: self._references(now, m) for m in {self._ranks[r].measure for r in fresh}}
        for rank in fresh:
            state = self._ranks[rank]
            ref = refs[state.measure].get(self._peer_group(rank))
            if ref is None or ref <= 0:
                continue  # nothing to compare with yet
            ratio = state.figure / ref
            floor = _FLOOR_SHARE if state.measure == WORK else _FLOOR_S
            slow = ratio >= self.factor and state.figure - ref >= floor
            state.recent.append((now, ratio, slow))
            state.slow_count += slow
            while state.recent and state.recent[0][0] < now - self.window:
                state.slow_count -= state.recent.popleft()[2]

    def _covered(self, state: _Rank, now: float) -> bool:
        """Reporting without a break for the whole window, and still reporting."""
        return (state.since is not None and now - state.since >= self.window
                and now - state.at <= _FRESH_S and len(state.recent) >= 3)

    def _slow(self, state: _Rank) -> bool:
        """At least half of its reports over the window were slow: the window's median
        ratio is at or above the factor (a few fast reports do not end it)."""
        return 2 * state.slow_count >= len(state.recent)

    def _notices(self, now: float) -> list[Notice]:
        out: list[Notice] = []
        slow: dict[int, list[int]] = {}
        clear: dict[int, bool] = {}  # node -> some rank covered, none of them slow
        for rank, state in self._ranks.items():
            if not self._covered(state, now):
                continue
            node = self.node_of(rank)
            if self._slow(state):
                slow.setdefault(node, []).append(rank)
                clear[node] = False
            else:
                clear.setdefault(node, True)
        for node, ranks in sorted(slow.items()):
            if node in self._named:
                continue
            # how slow its slow reports are, and since its first slow report in the window
            ratio = statistics.median(
                statistics.median(r for _, r, slow in self._ranks[rank].recent if slow)
                for rank in ranks)
            seconds = max(now - next(t for t, _, slow in self._ranks[rank].recent if slow)
                          for rank in ranks)
            host = self.hosts.get(node, "?")
            measure = self._ranks[ranks[0]].measure
            ranks_t = tuple(sorted(ranks))
            notice = Notice("slow", node, host, ratio, seconds, ranks_t, measure,
                            slow_line(node, host, ratio, seconds, ranks_t, measure,
                                      one_node=self.nnodes == 1))
            self._named[node] = notice
            self.totals.setdefault(node, _Totals()).named += 1
            out.append(notice)
        for node in sorted(self._named):
            if clear.get(node):  # judged on a full window again, and not slow
                named = self._named.pop(node)
                out.append(Notice("recovered", node, named.host, 0.0, 0.0, named.ranks,
                                  named.measure, recovered_line(node, named.host)))
        return out

    def summary(self) -> dict:
        """Per node: mean step time and compute time over the run, its ratio to the median
        of the other nodes (as the check compares), how often it was named slow, and
        ``series``: its figures over time (:meth:`_Series.points`) (``node_steps.json``)."""
        rows = []
        for node in sorted(self.totals):
            t = self.totals[node]
            rows.append({"node": node, "host": self.hosts.get(node, "?"),
                         "step_time_s": t.step_s / t.steps if t.steps else None,
                         "compute_s": t.busy_s / t.busy_steps if t.busy_steps else None,
                         "work_share": t.work / t.work_reports if t.work_reports else None,
                         "steps_reported": t.steps, "work_reports": t.work_reports,
                         "named_slow": t.named,
                         "series": self.series[node].points(self.wall_offset)
                         if node in self.series else []})
        # the figure the check compares: the work share where every node has one
        use_work = rows and all(r["work_share"] is not None for r in rows)
        figures = [r["work_share"] if use_work else
                   r["compute_s"] if r["compute_s"] is not None else r["step_time_s"]
                   for r in rows]
        for i, (row, figure) in enumerate(zip(rows, figures)):  # as the check compares
            others = [f for j, f in enumerate(figures) if j != i and f]
            median = statistics.median(others) if others else None
            row["ratio"] = round(figure / median, 3) if figure and median else None
        return {"factor": self.factor, "window_s": self.window, "nodes": rows}
