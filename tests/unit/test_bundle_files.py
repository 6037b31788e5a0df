"""meshrun.reports.bundle: a rerun with the same run id keeps the earlier run's bundle files aside
(``<name>.<mtime>.json``) and writes its own under the plain names; ``meshrun report``
reads only the plain ``plan.node<k>.json``."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

from unit_fakes import plan as make_test_plan

from meshrun.plan import Command
from meshrun.redact import REDACTED
from meshrun.reports.bundle import write_diagnosis, write_start
from meshrun.reports.report import summarize

EARLIER = time.mktime((2024, 1, 2, 3, 4, 5, 0, 0, -1))   # an earlier run's files' mtime
STAMP = time.strftime("%Y%m%d-%H%M%S", time.localtime(EARLIER))


def run_plan(run_dir: Path, world_size: int = 1):
    """A CPU plan whose log folder is ``run_dir``; ``world_size`` tells runs apart."""
    return replace(make_test_plan(command=Command("train.py", ("--lr", "3e-4"))),
                   log_dir=str(run_dir), world_size=world_size)


def age(run_dir: Path, *names: str) -> None:
    """Make files look as if an earlier run left them (a fixed, known mtime)."""
    for name in names:
        os.utime(run_dir / name, (EARLIER, EARLIER))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_first_run_keeps_nothing(tmp_path):
    run_dir = tmp_path / "run"
    assert write_start(run_plan(run_dir), {"MASTER_PORT": "29500"}) == []
    assert sorted(p.name for p in run_dir.iterdir()) == ["env.node0.json", "plan.node0.json"]


def test_rerun_keeps_earlier_plan_and_env(tmp_path):
    run_dir = tmp_path / "run"
    write_start(run_plan(run_dir, world_size=2), {"STEP": "first"})
    age(run_dir, "plan.node0.json", "env.node0.json")

    kept = write_start(run_plan(run_dir, world_size=4), {"STEP": "second"})

    assert sorted(kept) == sorted([str(run_dir / f"plan.node0.{STAMP}.json"),
                                   str(run_dir / f"env.node0.{STAMP}.json")])
    # the newest under the plain names, the earlier run's kept beside them
    assert load(run_dir / "plan.node0.json")["world_size"] == 4
    assert load(run_dir / "env.node0.json") == {"STEP": "second"}
    assert load(run_dir / f"plan.node0.{STAMP}.json")["world_size"] == 2
    assert load(run_dir / f"env.node0.{STAMP}.json") == {"STEP": "first"}


def test_reruns_in_the_same_second_keep_every_version(tmp_path):
    run_dir = tmp_path / "run"
    for step in range(3):
        write_start(run_plan(run_dir), {"STEP": str(step)})
        age(run_dir, "plan.node0.json", "env.node0.json")
    write_start(run_plan(run_dir), {"STEP": "3"})

    envs = {p.name for p in run_dir.glob("env.node0*.json")}
    assert envs == {"env.node0.json", f"env.node0.{STAMP}.json", f"env.node0.{STAMP}-1.json",
                    f"env.node0.{STAMP}-2.json"}
    assert sorted(load(run_dir / name)["STEP"] for name in envs) == ["0", "1", "2", "3"]
    assert load(run_dir / "env.node0.json") == {"STEP": "3"}
    assert len(list(run_dir.glob("plan.node0*.json"))) == 4


def test_rerun_keeps_earlier_diagnosis(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "node0.log").write_text("meshrun: starting\n")
    (run_dir / "diagnosis.node0.json").write_text('{"diagnoses": [], "earlier": true}')
    age(run_dir, "diagnosis.node0.json")

    # a rerun moves the earlier failure's diagnosis aside as it starts: if this run
    # succeeds, the plain name must not claim the earlier failure as this run's
    kept = write_start(run_plan(run_dir), {})
    assert kept == [str(run_dir / f"diagnosis.node0.{STAMP}.json")]
    assert not (run_dir / "diagnosis.node0.json").exists()

    # when this run fails too, its diagnosis gets the plain name
    assert write_diagnosis(run_plan(run_dir))
    assert "earlier" not in load(run_dir / "diagnosis.node0.json")
    assert load(run_dir / f"diagnosis.node0.{STAMP}.json")["earlier"] is True

    # and a second diagnosis of the same folder keeps the first
    age(run_dir, "diagnosis.node0.json")
    write_diagnosis(run_plan(run_dir))
    assert len(list(run_dir.glob("diagnosis.node0*.json"))) == 3


def test_report_reads_the_current_plan_not_the_kept_ones(tmp_path):
    run_dir = tmp_path / "run"
    write_start(run_plan(run_dir, world_size=2), {})
    age(run_dir, "plan.node0.json", "env.node0.json")
    write_start(run_plan(run_dir, world_size=4), {})
    # "plan.node0.<stamp>.json" sorts before "plan.node0.json": only the plain name may match
    assert sorted(p.name for p in run_dir.glob("plan.node*.json")) == [
        f"plan.node0.{STAMP}.json", "plan.node0.json"]
    (run_dir / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "loss": 1.0, "step_time_s": 0.5, "samples_per_s": 8.0}) + "\n")

    assert summarize(str(run_dir)).world_size == 4


def test_env_dump_redacts_named_secrets(tmp_path):
    run_dir = tmp_path / "run"
    env = {"PGPASSWORD": "hunter2", "MYSQL_PWD": "hunter3", "SSHPASS": "hunter4",
           "GH_PAT": "hunter5", "PWD": "/home/ml/job", "NCCL_IB_PKEY": "0",
           "CUDA_VISIBLE_DEVICES": "0,1"}
    write_start(run_plan(run_dir), env)
    assert load(run_dir / "env.node0.json") == {
        "PGPASSWORD": REDACTED, "MYSQL_PWD": REDACTED, "SSHPASS": REDACTED,
        "GH_PAT": REDACTED, "PWD": "/home/ml/job", "NCCL_IB_PKEY": "0",
        "CUDA_VISIBLE_DEVICES": "0,1"}
