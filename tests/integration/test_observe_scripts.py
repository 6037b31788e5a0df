"""Hangs and slow nodes in scripts that call nothing of meshrun's (issue 19): what the worker
shim's observer sees of their collectives (meshrun.worker.observe) is all the watchdog has.

* a rank of an unmodified DDP script that sleeps for good, and a rank of the unmodified HF
  Trainer script stopped with SIGSTOP, are named within --hang-timeout + 10 s;
* a node held to a CPU quota (meshrun.harness.CpuQuota, a real cgroup) is named by its
  ranks' share of time working, in the unmodified DDP script and under tensor parallelism
  across the two nodes (the mlp-tp recipe at tp 2, one process a node: its compute time
  before arrive() could not tell the nodes apart);
* with MESHRUN_OBSERVE=0 nothing is observed (no hang is seen in a script that reports no
  steps), the documented way out.

The time to name a node at the defaults, the layouts on four nodes, the users' scripts under
a quota and the five-minute runs without an alarm are in bench/observe.py
(docs/benchmarks.md); here the slow-node window is 10 s so the suite stays short.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import SCRIPTS, clean_env, own_lines

from meshrun.harness import CpuQuota, Nodes, workers_of
from meshrun.harness import quota_available as available

pytestmark = pytest.mark.slow
PLAIN = str(SCRIPTS / "plain_ddp.py")
HF = str(Path(__file__).resolve().parent / "user_scripts" / "hf_trainer_gpt2.py")
needs_quota = pytest.mark.skipif(
    available() is not None and os.environ.get("CI") != "true",
    reason=f"a CPU quota cannot be set here: {available()}")
HANG = ("--hang-timeout", "8", "--beat", "0.2")


def _hang_line(tmp_path: Path) -> str:
    out = (tmp_path / "node0.out").read_text()
    return next((ln for ln in out.splitlines() if "job hung" in ln), out[-3000:])


def _seconds_between(nodes: Nodes, first: tuple[int, str], then: tuple[int, str],
                     timeout: float) -> float | None:
    """Seconds from ``first`` (node, text) appearing to ``then`` appearing."""
    if nodes.wait_for(first[1], node=first[0], timeout=timeout) is None:
        return None
    started = time.monotonic()
    if nodes.wait_for(then[1], node=then[0], timeout=timeout) is None:
        return None
    return time.monotonic() - started


def test_a_rank_sleeping_in_an_unmodified_script_is_named_within_the_hang_timeout(tmp_path):
    """plain_ddp.py imports nothing of meshrun's; rank 1 sleeps for good at step 10 (in
    Python, outside any collective). Its collectives stop, rank 0's wait inside its next
    one: the job hangs, and rank 1 is the rank behind."""
    env = clean_env(PLAIN_SECONDS="300", PLAIN_HANG_RANK="1", PLAIN_HANG_AT="10")
    with Nodes(tmp_path, ["--", PLAIN], env=env, run_id="hang", log_dir=tmp_path / "logs",
               extra=HANG) as nodes:
        took = _seconds_between(nodes, (1, "plain: rank 1 stops at step 10"),
                                (0, "job hung"), 90)
        codes = nodes.wait(timeout=60)
    line = _hang_line(tmp_path)
    assert codes == [5, 5], line
    assert took is not None and took <= 8 + 10, (took, line)
    assert "stuck: rank 1 on node 1 (" in line and "rank 0" not in line, line
    assert "no collective completed on any rank" in line, line   # what it was judged on
    # rank 1's own thread was in the script itself, outside any collective (its sleep)
    stack = (tmp_path / "logs" / "hang" / "stacks" / "rank1.txt").read_text()
    assert re.search(r"Current thread[^\n]*\n\s+File \"[^\"]*plain_ddp\.py\"", stack), stack


def _worker(nodes: Nodes, node: int) -> int:
    found = workers_of(nodes.procs[node].pid)
    assert found, f"no worker of node {node}"
    return found[0]


@pytest.mark.timeout(400)
def test_a_stopped_rank_of_an_unmodified_hf_trainer_script_is_named(tmp_path):
    """The HF Trainer script of the suite (it knows nothing of meshrun), training; rank 1's
    process is stopped (SIGSTOP): it is named within --hang-timeout + 10 s."""
    if os.environ.get("CI") == "true":
        import transformers  # noqa: F401 - CI installs the test extras: missing is a failure
    else:
        pytest.importorskip("transformers")
    env = clean_env(HF_STEPS="1000000", HF_RESUME="0", OMP_NUM_THREADS="1")
    with Nodes(tmp_path, ["--", HF, str(tmp_path / "out")], env=env, run_id="hf",
               log_dir=tmp_path / "logs", extra=HANG) as nodes:
        assert nodes.wait_for("'loss'", timeout=240) is not None, \
            (tmp_path / "node0.out").read_text()[-3000:]
        os.kill(_worker(nodes, 1), signal.SIGSTOP)
        stopped = time.monotonic()
        named = nodes.wait_for("job hung", timeout=60)
        took = time.monotonic() - stopped if named is not None else None
        codes = nodes.wait(timeout=90)
    line = _hang_line(tmp_path)
    assert took is not None and took <= 8 + 10, (took, line)
    assert "stuck: rank 1 on node 1 (" in line and "rank 0" not in line, line
    assert codes == [5, 5], (codes, line)


def test_with_observation_off_a_script_that_reports_nothing_is_not_watched(tmp_path):
    """MESHRUN_OBSERVE=0: no collective is counted, so the sleeping rank of plain_ddp.py is
    not seen (as before the observer); the job is ended here by the test."""
    env = clean_env(PLAIN_SECONDS="300", PLAIN_HANG_RANK="1", PLAIN_HANG_AT="10",
                    MESHRUN_OBSERVE="0")
    with Nodes(tmp_path, ["--", PLAIN], env=env, run_id="off", log_dir=tmp_path / "logs",
               extra=HANG) as nodes:
        assert nodes.wait_for("plain: rank 1 stops", node=1, timeout=90) is not None
        assert nodes.wait_for("job hung", timeout=8 + 10) is None
        nodes.kill()


NODE_CPUS = 0.6   # each node's machine; the slow one gets a third of it


def _slow_job(tmp_path: Path, command: list[str], env: dict) -> tuple[str, str]:
    """Two nodes, node 1 at a third of node 0's CPU from the start, the slow-node window at
    10 s; both consoles' output once node 1 was named (or 120 s passed)."""
    with CpuQuota("job", shares=65536) as job, \
            CpuQuota("node0", cpus=NODE_CPUS, parent=job) as n0, \
            CpuQuota("node1", cpus=NODE_CPUS / 3, parent=job) as n1:
        groups = [n0, n1]
        with Nodes(tmp_path, command, env=env, run_id="slow", log_dir=tmp_path / "logs",
                   extra=("--slow-window", "10", "--hang-timeout", "0"),
                   before_start=lambda k, proc: groups[k].add(proc.pid)) as nodes:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not all(workers_of(p.pid) for p in nodes.procs):
                time.sleep(0.2)
            for group, proc in zip(groups, nodes.procs):   # the quota: the workers' machine
                group.release(proc.pid)
            nodes.wait_for("meshrun: node 1 (", timeout=180)
            nodes.wait_for("is slow", node=1, timeout=10)
            nodes.kill()
    return (tmp_path / "node0.out").read_text(), (tmp_path / "node1.out").read_text()


SLOW = re.compile(r"meshrun: node 1 \(\S+\) is slow: (\d+\.\d\d)x the median time working "
                  r"\(not waiting for the others\) of the other nodes for \d+ s; rank 1$")


def _named(out0: str, out1: str) -> float:
    lines = [ln for ln in own_lines(out0) if " is slow: " in ln]
    assert lines and all(ln.startswith("meshrun: node 1 (") for ln in lines), out0[-3000:]
    match = SLOW.match(lines[0])
    assert match, lines[0]
    assert any(SLOW.match(ln) for ln in own_lines(out1)), out1[-2000:]   # both consoles
    return float(match[1])


@needs_quota
@pytest.mark.cgroup
def test_a_throttled_node_is_named_in_an_unmodified_ddp_script(tmp_path):
    out0, out1 = _slow_job(tmp_path, ["--", PLAIN], clean_env(PLAIN_SECONDS="300"))
    assert _named(out0, out1) >= 1.6


@needs_quota
@pytest.mark.cgroup
@pytest.mark.timeout(400)
def test_a_throttled_node_is_named_under_tensor_parallelism_across_nodes(tmp_path):
    """mlp-tp at tp 2 with one process a node: every block's all-reduce crosses the nodes,
    inside the forward. Before the observer both nodes' compute times were equal (0.099 s
    and 0.098 s) and the slow one was never named."""
    command = ["--recipe", "mlp-tp", "--set", "parallel.tp=2", "--set", "train.steps=100000",
               "--set", "checkpoint.interval=0", "--set", "train.log_every=1000"]
    out0, out1 = _slow_job(tmp_path, command, clean_env())
    assert _named(out0, out1) >= 1.6
