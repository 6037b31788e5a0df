"""Slow nodes for real: one simulated node's whole process tree under a cgroup v1 CPU quota
(tests/cpu_quota.py), two `meshrun run` node agents on loopback running a small DDP job
(scripts/straggle.py). The detector must name the throttled node on both consoles, and an
unthrottled job must run five minutes without an alarm while the two cores are shared."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cpu_quota import CpuQuota, available
from helpers import SCRIPTS, clean_env, free_port

pytestmark = pytest.mark.slow
STRAGGLE = str(SCRIPTS / "straggle.py")
needs_quota = pytest.mark.skipif(
    available() is not None and os.environ.get("CI") != "true",
    reason=f"a CPU quota cannot be set here: {available()}")


def start_nodes(tmp_path: Path, *extra: str, nnodes: int = 2, nproc: int = 1,
                seconds: float = 120, quota: CpuQuota | None = None, slow_node: int = 1,
                env_extra: dict | None = None) -> list[subprocess.Popen]:
    """``nnodes`` `meshrun run` agents of one job; ``quota``: node ``slow_node``'s whole
    process tree goes in it (its workers, forked later, inherit it)."""
    port = str(free_port())
    env = clean_env(STRAGGLE_SECONDS=str(seconds), STRAGGLE_STOP=str(tmp_path / "stop"),
                    **(env_extra or {}))
    procs = []
    for rank in range(nnodes):
        out = open(tmp_path / f"node{rank}.out", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "meshrun", "run", "--nnodes", str(nnodes),
             "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", port,
             "--run-id", "slow", "--log-dir", str(tmp_path / "logs"),
             "--nproc-per-node", str(nproc), "--no-preflight", *extra, "--", STRAGGLE],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT))
        if quota is not None and rank == slow_node:
            quota.add(procs[-1].pid)
    return procs


def wait_for(procs, path: Path, text: str, seconds: float) -> float | None:
    """Seconds until ``text`` appears in ``path`` (None: not within ``seconds``)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if text in path.read_text(errors="replace"):
            return time.monotonic() - started
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.5)
    return None


def stop(tmp_path: Path, procs, seconds: float = 60) -> list[int | None]:
    (tmp_path / "stop").write_text("")
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=seconds))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(None)
    return codes


@needs_quota
def test_a_node_throttled_mid_run_is_named_on_every_console_within_30_s(tmp_path):
    """The detector at its defaults (window 30 s, factor 1.25): node 1 runs at full speed,
    then its process tree gets a fifth of a CPU; every console names it within 30 s."""
    with CpuQuota("node1", cpus=0) as quota:
        procs = start_nodes(tmp_path, quota=quota, seconds=240)
        try:
            assert wait_for(procs, tmp_path / "node0.out", "first step done", 90) is not None
            time.sleep(35)                     # a full window of like nodes first
            assert "is slow" not in (tmp_path / "node0.out").read_text()
            quota.set(0.2)
            took = wait_for(procs, tmp_path / "node0.out", "is slow", 45)
            out0 = (tmp_path / "node0.out").read_text()
            assert took is not None and took < 30, (took, out0[-3000:])
            assert quota.throttled_s() > 1.0     # the kernel really held node 1 back
            assert wait_for(procs, tmp_path / "node1.out", "is slow", 10) is not None
        finally:
            codes = stop(tmp_path, procs)
    out0 = (tmp_path / "node0.out").read_text()
    out1 = (tmp_path / "node1.out").read_text()
    assert codes == [0, 0], out0[-3000:] + out1[-3000:]
    line = next(ln for ln in out0.splitlines() if "is slow" in ln)
    assert line.startswith("meshrun: node 1 (") and line.endswith("; rank 1"), line
    assert re.search(r"is slow: \d\.\d\dx the median compute time per step of the other "
                     r"nodes for \d+ s; rank 1$", line), line
    assert out1.count("is slow") == 1
    run = tmp_path / "logs" / "slow"
    events = [json.loads(x) for x in (run / "events.node1.jsonl").read_text().splitlines()]
    assert events[0]["event"] == "node-slow" and events[0]["node"] == 1
    rows = {r["node"]: r for r in json.loads((run / "node_steps.json").read_text())["nodes"]}
    assert rows[1]["named_slow"] == 1 and rows[0]["named_slow"] == 0, rows


def test_an_unthrottled_job_runs_five_minutes_without_an_alarm(tmp_path):
    """Two nodes of two workers on two shared cores, the detector at its defaults."""
    procs = start_nodes(tmp_path, nproc=2, seconds=300)
    codes = [p.wait(timeout=420) for p in procs]
    out = (tmp_path / "node0.out").read_text() + (tmp_path / "node1.out").read_text()
    assert codes == [0, 0], out[-3000:]
    steps = int(out.split(" steps in ")[0].rsplit("straggle: ", 1)[1])
    assert steps > 1000, out[-2000:]
    assert "is slow" not in out, out[-3000:]
    rows = json.loads((tmp_path / "logs" / "slow" / "node_steps.json").read_text())["nodes"]
    assert len(rows) == 2 and all(r["steps_reported"] > 500 for r in rows), rows


def _doctors(tmp_path: Path, quota: CpuQuota | None) -> tuple[list[str], list[int], float]:
    port = str(free_port())
    procs, started = [], time.monotonic()
    for rank in (0, 1):
        out = open(tmp_path / f"doctor{rank}.out", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "meshrun", "doctor", "--all-nodes", "--nnodes", "2",
             "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", port,
             "--nproc-per-node", "1", "--log-dir", str(tmp_path / "logs")],
            cwd=tmp_path, env=clean_env(), stdout=out, stderr=subprocess.STDOUT))
        if quota is not None and rank == 1:
            quota.add(procs[-1].pid)
    codes = [p.wait(timeout=120) for p in procs]
    took = time.monotonic() - started
    return [(tmp_path / f"doctor{r}.out").read_text() for r in (0, 1)], codes, took


@needs_quota
def test_the_node_check_names_a_throttled_node_before_training(tmp_path):
    with CpuQuota("node1", cpus=0.3) as quota:
        outs, codes, _ = _doctors(tmp_path, quota)
    assert codes == [3, 3], outs
    for out in outs:   # both nodes' doctors say it, with the figures
        line = next(ln for ln in out.splitlines() if "[slow-node]" in ln)
        assert line.startswith("meshrun: error: node 1 (") \
            and "is slow: its compute runs at " in line and "x slower than the other nodes' median" in line, out
        assert "node 0 (" not in line
    verdict = json.loads(next((tmp_path / "logs").glob("*-nodecheck/nodecheck.node0.json"))
                         .read_text())
    assert [f["node"] for f in verdict["findings"]] == [1] and verdict["seconds"] < 10


def test_the_node_check_passes_two_like_nodes(tmp_path):
    outs, codes, took = _doctors(tmp_path, None)
    assert codes == [0, 0], outs
    assert all("no slow node [node-check]" in out for out in outs), outs


@needs_quota
def test_run_with_node_check_names_the_throttled_node_and_trains_anyway(tmp_path):
    with CpuQuota("node1", cpus=0.3) as quota:
        procs = start_nodes(tmp_path, "--node-check", "--slow-window", "0", quota=quota,
                            seconds=2)
        codes = [p.wait(timeout=120) for p in procs]
    out0 = (tmp_path / "node0.out").read_text()
    assert codes == [0, 0], out0[-3000:]
    check = out0.index("meshrun: node check: node 1 (")
    assert "is slow" in out0[check:].splitlines()[0]
    assert check < out0.index("straggle: first step done")   # before the script's first step
