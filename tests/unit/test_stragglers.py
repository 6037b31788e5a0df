"""The straggler rule (meshrun.runtime.stragglers) on reports as workers send them, and the
worker side's timings (meshrun.progress / meshrun.arrive)."""

from __future__ import annotations

import sys

import pytest

from meshrun import protocol
from meshrun.runtime.stragglers import Stragglers, rank_list


def _feed(tracker: Stragglers, seconds: float, figures, *, start: float = 0.0,
          measure: str = "busy", step0: int = 1, per_report: int = 10):
    """One report a second from every rank for ``seconds``: ``figures(rank, t)`` is the
    rank's compute time (``measure`` "busy") or step time ("step"). Returns the notices
    with the time each came."""
    out = []
    t, step = start, step0
    while t < start + seconds:
        step += per_report
        values = {}
        for rank in range(tracker.nnodes * tracker.nproc):
            figure = figures(rank, t)
            if measure == "busy":
                p = protocol.Progress(step, 1e9 + t, figure * 1.5, figure, per_report)
            else:
                p = protocol.Progress(step, 1e9 + t, figure, -1.0, per_report)
            values[rank] = p.encode()
        out += [(t, n) for n in tracker.observe(t, values)]
        t += 1.0
    return out


def test_a_slow_node_is_named_after_the_window_with_its_ranks_and_ratio():
    tracker = Stragglers(nnodes=4, nproc=2, hosts={3: "host-c"}, window=30)
    notices = _feed(tracker, 60, lambda r, t: 0.16 if r in (6, 7) else 0.10)
    assert len(notices) == 1
    at, notice = notices[0]
    assert notice.kind == "slow" and notice.node == 3 and notice.ranks == (6, 7)
    assert 30 <= at <= 30 + 5            # the window, after the warm-up reports
    assert notice.ratio == pytest.approx(1.6)
    assert notice.line.startswith("meshrun: node 3 (host-c) is slow: 1.60x the median "
                                  "compute time per step") and notice.line.endswith("ranks 6-7")


def test_two_nodes_the_other_node_is_the_reference():
    """With two nodes the median of all ranks would sit halfway; the other node is the
    reference, so a 1.3x node is named (1.3 / 1.15 would not reach 1.25)."""
    tracker = Stragglers(nnodes=2, nproc=2, window=10)
    notices = _feed(tracker, 30, lambda r, t: 0.13 if r >= 2 else 0.10)
    assert [(n.node, n.ranks) for _, n in notices] == [(1, (2, 3))]


def test_one_slow_rank_is_named_not_its_node_mates():
    tracker = Stragglers(nnodes=2, nproc=4, window=10)
    notices = _feed(tracker, 30, lambda r, t: 0.2 if r == 5 else 0.1)
    assert [(n.node, n.ranks) for _, n in notices] == [(1, (5,))]


def test_below_the_factor_or_short_spikes_are_no_alarm():
    tracker = Stragglers(nnodes=2, nproc=2, window=10)
    # 1.2x all along; a 3x spike of rank 0 every 9 s (rank 0 writing a checkpoint)
    notices = _feed(tracker, 120, lambda r, t: (0.3 if r == 0 and int(t) % 9 == 0 else
                                                0.12 if r >= 2 else 0.10))
    assert notices == []


def test_pauses_every_rank_shares_are_no_alarm():
    tracker = Stragglers(nnodes=2, nproc=2, window=10)
    # an evaluation every 20 s makes every rank's steps 5x longer for 8 s
    notices = _feed(tracker, 120, lambda r, t: 0.5 if int(t) % 20 < 8 else 0.1)
    assert notices == []


def test_the_first_reports_do_not_count():
    tracker = Stragglers(nnodes=2, nproc=1, window=2)
    # rank 1 compiles for its first reports (10x), then is as fast as rank 0
    notices = _feed(tracker, 30, lambda r, t: 1.0 if r == 1 and t < 2 else 0.1)
    assert notices == []


def test_a_recovered_node_gets_one_line():
    tracker = Stragglers(nnodes=3, nproc=1, hosts={2: "c"}, window=5)
    notices = _feed(tracker, 40, lambda r, t: 0.2 if r == 2 and t < 20 else 0.1)
    assert [n.kind for _, n in notices] == ["slow", "recovered"]
    assert notices[1][1].line == "meshrun: node 2 (c) is no longer slow"


def test_waiters_show_the_same_step_time_only_compute_time_names_the_straggler():
    """Synchronous training: every rank's step time is the same; without arrive() there is
    nothing to tell them apart, so no node is named (and none wrongly)."""
    tracker = Stragglers(nnodes=2, nproc=2, window=5)
    assert _feed(tracker, 30, lambda r, t: 0.2, measure="step") == []
    # steps that really differ (ranks that do not wait for each other) are compared
    tracker = Stragglers(nnodes=2, nproc=2, window=5)
    notices = _feed(tracker, 30, lambda r, t: 0.2 if r < 2 else 0.1, measure="step")
    assert [(n.node, n.measure) for _, n in notices] == [(0, "step time")]


def test_summary_gives_each_node_its_times():
    tracker = Stragglers(nnodes=2, nproc=2, hosts={0: "a", 1: "b"}, window=5)
    _feed(tracker, 20, lambda r, t: 0.2 if r >= 2 else 0.1)
    rows = {row["node"]: row for row in tracker.summary()["nodes"]}
    assert rows[1]["compute_s"] == pytest.approx(0.2) and rows[0]["compute_s"] == \
        pytest.approx(0.1)
    assert rows[1]["step_time_s"] == pytest.approx(0.3) and rows[1]["named_slow"] == 1
    assert rows[1]["ratio"] > rows[0]["ratio"]


def test_rank_list():
    assert rank_list([24, 25, 26, 27]) == "ranks 24-27"
    assert rank_list([5]) == "rank 5"
    assert rank_list([2, 5, 6]) == "ranks 2, 5-6"


def test_progress_round_trips_with_and_without_timings():
    p = protocol.Progress(7, 12.5, 0.25, 0.125, 4)
    assert protocol.Progress.decode(p.encode()) == p
    old = protocol.Progress.decode(b"7 12.5")   # a worker that sends no timings
    assert old.steps == 0 and old.step == 7


def _bare_writer(mod):
    """A writer without its thread: only the training thread's side."""
    from collections import deque

    writer = object.__new__(mod._Writer)
    writer.ended_at = writer.arrived_at = None
    writer.steps, writer.gpu_busy, writer.pending, writer.shares = [], [], deque(), []
    writer.step = writer.coll = writer.active = -1
    writer.cuda = writer.end_event = writer.arrive_event = None
    writer.wake = type("W", (), {"set": lambda self: None})()
    return writer


def test_the_writer_reports_mean_step_and_compute_times(monkeypatch):
    from meshrun.worker import progress as mod

    clock = iter([0.0, 0.3, 1.0, 1.4, 2.0, 2.2, 3.0]).__next__
    monkeypatch.setattr(mod.time, "monotonic", clock)
    writer = _bare_writer(mod)
    writer.note(1)                      # t=0: the first step ends (nothing before it)
    for step in (2, 3, 4):              # arrive at 0.3, 1.4, 2.2; end at 1.0, 2.0, 3.0
        writer.arrive()
        writer.note(step)
    report = writer._report()
    assert report.step == 4 and report.steps == 3 and report.step_s == pytest.approx(1.0)
    assert report.busy_s == pytest.approx(0.3)
    assert writer._report().steps == 0  # reported once


@pytest.mark.parametrize("values", [[1.0], [1.0, 2.0], [3.0, 1.0, 2.0], [5, 1, 4, 2, 3, 3]])
def test_median_without_one_value_matches_the_slow_way(values):
    import statistics

    from meshrun.runtime.stragglers import _median_without

    ordered = sorted(values)
    for v in values:
        rest = list(ordered)
        rest.remove(v)
        assert _median_without(ordered, v) == (statistics.median(rest) if rest else None)
    assert _median_without(ordered, None) == statistics.median(ordered)


def test_one_slow_report_then_silence_is_no_alarm():
    """A rank that stops reporting (an evaluation loop without progress calls, a hang) is
    not judged on what it said before it went quiet."""
    tracker = Stragglers(nnodes=2, nproc=1, window=30)
    notices = _feed(tracker, 8, lambda r, t: 0.2 if r == 1 and t >= 7 else 0.1)
    step = 200
    for t in range(8, 60):   # nothing new from anyone for 52 s
        notices += [(t, n) for n in tracker.observe(float(t), {0: "", 1: ""})]
        step += 1
    assert notices == []


def test_a_noisy_slow_node_is_named_a_noisy_fast_one_is_not():
    """Per-report ratios that scatter around 1.5x (a CPU quota lands in bursts) name the
    node; scatter around 1.0x with the odd 1.3x report does not."""
    import random

    rng = random.Random(1)
    tracker = Stragglers(nnodes=2, nproc=1, window=30)
    notices = _feed(tracker, 60, lambda r, t: 0.1 * (rng.choice([1.1, 1.5, 1.9])
                                                      if r == 1 else 1.0))
    assert [n.node for _, n in notices] == [1]
    tracker = Stragglers(nnodes=2, nproc=1, window=30)
    notices = _feed(tracker, 120, lambda r, t: 0.1 * (rng.choice([0.9, 1.0, 1.0, 1.3])
                                                       if r == 1 else 1.0))
    assert notices == []


def test_a_restart_of_a_named_node_is_not_a_recovery():
    tracker = Stragglers(nnodes=2, nproc=1, window=10)
    notices = _feed(tracker, 20, lambda r, t: 0.2 if r == 1 else 0.1)
    assert [n.kind for _, n in notices] == ["slow"]
    # the workers restart (steps from 1 again), still slow
    notices = _feed(tracker, 30, lambda r, t: 0.2 if r == 1 else 0.1, start=20, step0=0)
    assert notices == []


def test_one_node_compares_ranks_with_the_other_ranks():
    tracker = Stragglers(nnodes=1, nproc=4, window=5)
    notices = _feed(tracker, 20, lambda r, t: 0.2 if r == 3 else 0.1)
    assert [(n.node, n.ranks) for _, n in notices] == [(0, (3,))]
    assert "of the other ranks for 5 s; rank 3" in notices[0][1].line


def test_on_a_gpu_the_compute_time_is_the_devices_read_when_complete(monkeypatch):
    """CUDA events (a fake device whose clock the test sets): the time between a step's end
    and the next arrival on the device, read only once both completed, never waited for."""
    from meshrun.worker import progress as mod

    device = {"now": 0.0, "done": 0.0}

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self):
            self.at = device["now"]

        def query(self):
            return self.at <= device["done"]

        def elapsed_time(self, other):
            return (other.at - self.at) * 1000.0

    Cuda = type("Cuda", (), {"Event": Event, "is_initialized": staticmethod(lambda: True)})

    monkeypatch.setitem(sys.modules, "torch", type("T", (), {"cuda": Cuda})())
    writer = _bare_writer(mod)
    writer.note(1)                                 # device t=0: step 1 ends
    for step, (arrive, end) in enumerate([(0.5, 1.0), (1.7, 2.0), (2.2, 3.0)], start=2):
        device["now"] = arrive
        writer.arrive()
        device["now"] = end
        writer.note(step)
    assert writer.gpu_busy == []                   # nothing completed yet: nothing read
    device["done"] = 3.0
    writer.note(5)                                 # every pair completed by now
    report = writer._report()
    assert report.busy_s == pytest.approx((0.5 + 0.7 + 0.2) / 3)


def test_each_nodes_figures_over_time_show_when_it_became_slow():
    """The series node_steps.json keeps for the run's page: node 1 slows down at t = 40;
    its step time over time shows it from that bucket on, node 0's does not change."""
    tracker = Stragglers(nnodes=2, nproc=1, window=10, wall_offset=1000.0)
    _feed(tracker, 80, lambda r, t: 0.2 if r == 1 and t >= 40 else 0.1)
    rows = {row["node"]: row["series"] for row in tracker.summary()["nodes"]}
    for node, points in rows.items():
        times = [p[0] for p in points]
        assert times == sorted(times) and 1000 < times[0] < 1020 and times[-1] > 1070
        assert all(p[3] is None for p in points)          # no work shares were reported
    before = [p for p in rows[1] if p[0] < 1040]
    after = [p for p in rows[1] if p[0] > 1040]
    assert all(p[2] == pytest.approx(0.1) for p in before)
    assert all(p[2] == pytest.approx(0.2) for p in after)
    assert all(p[2] == pytest.approx(0.1) for p in rows[0])
    assert all(p[1] == pytest.approx(1.5 * p[2]) for p in rows[0] + rows[1])


def test_a_long_runs_series_stays_bounded_and_keeps_its_means():
    from meshrun.runtime.stragglers import _SERIES_MAX

    tracker = Stragglers(nnodes=2, nproc=1, window=10)
    _feed(tracker, 4 * _SERIES_MAX * 10, lambda r, t: 0.1 + 0.1 * (t >= 2 * _SERIES_MAX * 10))
    for row in tracker.summary()["nodes"]:
        points = row["series"]
        assert _SERIES_MAX // 2 <= len(points) <= _SERIES_MAX
        widths = {round(b[0] - a[0], 6) for a, b in zip(points, points[1:])}
        assert len(widths) == 1 and widths.pop() >= 40    # merged, evenly
        assert points[1][2] == pytest.approx(0.1) and points[-1][2] == pytest.approx(0.2)
