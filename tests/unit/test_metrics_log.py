"""The recipes' metrics log: metrics.jsonl, and TensorBoard scalars read back with
TensorBoard's own event reader (the test extras install tensorboard)."""

import json
import os

import pytest

from meshrun.recipes._loop import MetricsLog

RECORDS = [{"step": 5, "loss": 0.9, "step_time_s": 0.02, "samples_per_s": 3200.0, "psnr": 11.5,
            "first_step": True},
           {"step": 10, "loss": 0.5, "step_time_s": 0.01, "samples_per_s": 6400.0, "psnr": 14.0}]


def test_jsonl_and_tensorboard_scalars(tmp_path):
    try:
        import tensorboard  # noqa: F401
    except ImportError:  # installed by the test extras; CI must not skip this
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(
            "tensorboard is not installed (pip install -e '.[test]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLog(str(tmp_path), enabled=True)
    for record in RECORDS:
        log.write(record)
    log.close()
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] \
        == RECORDS
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    # Numbers become scalars per step; booleans (first_step) and the step itself do not.
    assert sorted(events.Tags()["scalars"]) == ["loss", "psnr", "samples_per_s", "step_time_s"]
    for tag in ("loss", "psnr"):
        got = [(e.step, round(e.value, 6)) for e in events.Scalars(tag)]
        assert got == [(r["step"], r[tag]) for r in RECORDS]


def test_disabled_on_other_ranks_writes_nothing(tmp_path):
    log = MetricsLog(str(tmp_path / "logs"), enabled=False)
    log.write(RECORDS[0])
    log.close()
    assert not (tmp_path / "logs").exists()
