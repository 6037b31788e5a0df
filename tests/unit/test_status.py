"""Node 0's status line (runtime/status.py): due every ``every`` seconds, the furthest step
(else rank 0's collectives), the rate since the line before, the ETA, the slowest node and
the last checkpoint."""

from meshrun import protocol
from meshrun.runtime.status import Status, duration


def values(*steps: int, coll: int = -1) -> dict[int, str]:
    return {r: protocol.Progress(step, 0.0, coll=coll if r == 0 else -1).encode()
            for r, step in enumerate(steps)}


def test_a_line_every_interval_with_the_rate_the_eta_the_slowest_node_and_the_checkpoint():
    status = Status(every=60.0, total_steps=600)
    assert status.beat(0.0, values(0, 0)) is None               # starts the clock
    assert status.beat(30.0, values(50, 49)) is None            # not due
    status.checkpoint(55.0, 100)
    first = status.beat(60.0, values(120, 119))
    assert first == "meshrun: status: step 120 of 600; last checkpoint step 100, 5 s ago"
    summary = {"nodes": [{"node": 0, "ratio": 0.98}, {"node": 1, "ratio": 1.05}]}
    status.checkpoint(100.0, 100)                               # the same one: still 55 s
    line = status.beat(120.0, values(300, 301), summary)
    assert line == ("meshrun: status: step 301 of 600, 3.02 steps/s, ETA 1 min 39 s; "
                    "slowest node 1 at 1.05x; last checkpoint step 100, 65 s ago")


def test_a_script_that_reports_no_steps_is_counted_in_collectives():
    status = Status(every=10.0)
    status.beat(0.0, {})
    assert status.beat(10.0, {0: "", 1: ""}) is None            # nobody reported yet
    assert status.beat(10.5, values(-1, -1, coll=500)) == "meshrun: status: collectives 500"
    assert status.beat(20.5, values(-1, -1, coll=8500)) == \
        "meshrun: status: collectives 8500, 800/s"


def test_off_and_durations():
    assert Status(every=0).beat(100.0, values(5)) is None
    assert [duration(s) for s in (5, 89, 95, 3725)] == ["5 s", "89 s", "1 min 35 s",
                                                        "1 h 02 min"]


def test_the_lines_figures_go_to_tensorboard_when_it_is_installed(tmp_path):
    """What node 0's file writer does with each line's figures (runtime/supervise.py)."""
    import pytest

    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from meshrun.runtime.supervise import _status_scalars

    status = Status(every=10.0, total_steps=100)
    board: list = []
    status.beat(0.0, {})
    status.checkpoint(5.0, 20)
    for now, step in ((10.0, 20), (20.0, 40)):
        status.beat(now, values(step, step))
        _status_scalars(board, str(tmp_path), dict(status.figures))
    events = EventAccumulator(str(tmp_path / "tensorboard" / "meshrun"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("status/steps_per_s")] == [(40, 2.0)]
    assert [(e.step, e.value) for e in events.Scalars("status/eta_s")] == [(40, 30.0)]
    assert [(e.step, e.value) for e in events.Scalars("status/checkpoint_age_s")] == \
        [(20, 5.0), (40, 15.0)]


def test_the_checkpoint_reader_lists_the_folder_off_the_beat(tmp_path, monkeypatch):
    """Node 0's reader of a recipe's newest checkpoint (runtime/supervise.py): unknown until
    its own thread has listed the folder, then the newest complete step (not an incomplete
    newer one)."""
    import time

    from meshrun.job.config import resolve
    from meshrun.plan.model import LaunchPlan
    from meshrun.runtime.supervise import _newest_checkpoint
    from meshrun.runtime.watchdog import UNKNOWN_CHECKPOINT

    folder = tmp_path / "ck"
    (folder / "step-20").mkdir(parents=True)
    (folder / "step-20" / ".metadata").write_text("")
    (folder / "step-30").mkdir()                      # incomplete
    monkeypatch.setenv("MESHRUN_CHECKPOINT_DIR", str(folder))
    config = resolve(recipe_defaults={"recipe": "mlp-tp"}, file_data=None, sets=None,
                     world_size=1, nproc_per_node=1, nnodes=1, run_id="r")
    plan = LaunchPlan.__new__(LaunchPlan)
    object.__setattr__(plan, "job", config)
    read = _newest_checkpoint(plan)
    assert read() in (UNKNOWN_CHECKPOINT, 20)        # its thread may already have listed it
    deadline = time.monotonic() + 5
    while read() == UNKNOWN_CHECKPOINT and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read() == 20
