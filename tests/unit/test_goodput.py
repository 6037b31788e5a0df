"""Goodput (reports/goodput.py): a run's wall time split into start-up, productive training,
checkpoints, lost work, recovery and the end, adding up to the wall time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshrun.reports.goodput import PARTS, compute, line


def rec(step: int, at: float, **extra) -> dict:
    return {"step": step, "at": at, **extra}


def test_a_run_without_failure_is_start_up_training_checkpoints_and_its_end():
    """Start at 100; the first step's record at 110; steps 2..10 one a second, step 5's
    interval holding 0.5 s of checkpoint saving; the end at 121."""
    records = [rec(1, 110.0, first_step=True)] + [
        rec(s, 109.0 + s, **({"checkpoint_s": 0.5} if s == 5 else {})) for s in range(2, 11)]
    g, why = compute(100.0, 121.0, records)
    assert why == "" and g is not None
    assert (g.startup_s, g.productive_s, g.checkpoint_s, g.lost_s, g.recovery_s, g.end_s) == \
        pytest.approx((10.0, 8.5, 0.5, 0.0, 0.0, 2.0))
    assert g.productive_share == pytest.approx(8.5 / 21) and g.restarts == 0
    assert line(g).startswith("40.5% productive of 21 s: start-up 10 s, training 8.5 s, "
                              "checkpoints 0.5 s, recovery 0.0 s, lost work 0.0 s, end 2.0 s")


def test_a_restart_is_recovery_and_the_steps_trained_again_are_lost_work():
    """Steps 1..8 (a second each from 110), a failure, the workers resume from the
    checkpoint of step 5 and log step 6 (their first step) at 130, then 7..10."""
    records = ([rec(1, 110.0, first_step=True)] + [rec(s, 109.0 + s) for s in range(2, 9)]
               + [rec(6, 130.0, first_step=True)] + [rec(s, 124.0 + s) for s in range(7, 11)])
    g, _ = compute(100.0, 135.0, records)
    # steps 6, 7, 8 of the first run were trained again: their three seconds are lost
    assert g.lost_s == pytest.approx(3.0) and g.steps_again == 3
    assert g.productive_s == pytest.approx(4.0 + 4.0)      # steps 2-5, then 7-10
    assert g.recovery_s == pytest.approx(130.0 - 117.0)    # step 8's record to step 6's again
    assert g.restarts == 1 and g.startup_s == pytest.approx(10.0)
    assert g.end_s == pytest.approx(1.0)
    assert sum(getattr(g, p) for p in PARTS) == pytest.approx(g.wall_s)


def test_a_run_with_no_timed_step_records_has_no_goodput_and_says_why():
    assert compute(100.0, 120.0, []) == (None, "no step records with a time (a recipe's "
                                                "metrics.jsonl, or meshrun.log({...}) from a "
                                                "script)")
    assert compute(100.0, 120.0, [{"step": 3, "loss": 1.0}])[0] is None     # no time
    assert compute(None, 120.0, [rec(1, 110.0)])[0] is None


def test_an_earlier_runs_records_in_the_same_file_are_not_this_runs():
    """A rerun under one run id appends to metrics.jsonl: records before its start are the
    earlier run's (steps 1-6) and count for nothing here; this run resumes at step 7."""
    records = [rec(s, 50.0 + s) for s in range(1, 7)] + [rec(7, 110.0, first_step=True)] + \
        [rec(s, 103.0 + s) for s in range(8, 13)]
    g, _ = compute(100.0, 116.0, records)
    assert g.startup_s == pytest.approx(10.0) and g.recovery_s == 0 and g.restarts == 0
    assert g.productive_s == pytest.approx(5.0) and g.end_s == pytest.approx(1.0)


def test_meshrun_log_records_carry_time_and_count_the_same_way():
    g, _ = compute(0.0, 10.0, [{"step": 1, "time": 2.0}, {"step": 2, "time": 3.0}])
    assert (g.startup_s, g.productive_s, g.end_s) == pytest.approx((2.0, 1.0, 7.0))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.floats(0, 500, allow_nan=False),
                          st.floats(0, 5, allow_nan=False), st.booleans()), max_size=40),
       st.floats(0, 100, allow_nan=False), st.floats(1, 600, allow_nan=False))
def test_the_parts_always_add_up_to_the_wall_time(marks, started, length):
    """Whatever the records (steps out of order, times before the start or after the end,
    checkpoint times longer than their intervals), the six parts are >= 0 and add up."""
    records = [rec(step, at, checkpoint_s=ck, first_step=first)
               for step, at, ck, first in marks]
    g, _ = compute(started, started + length, records)
    if g is None:
        return
    parts = [getattr(g, p) for p in PARTS]
    assert all(p >= 0 for p in parts)
    assert sum(parts) == pytest.approx(length, rel=1e-9, abs=1e-6)
