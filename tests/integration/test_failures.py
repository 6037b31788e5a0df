"""Failures on two real node agents on loopback: a killed agent, a lost store host, a hang,
SIGTERM. Each test starts `meshrun run` twice (node 0 and node 1) with short timeouts."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import SCRIPTS, clean_env, free_port

pytestmark = pytest.mark.slow
LOOP = str(SCRIPTS / "loop.py")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(tmp_path: Path, *extra: str, env_extra: dict | None = None, nproc: int = 2):
    port = str(free_port())
    env = clean_env(LOOP_DIR=str(tmp_path), **(env_extra or {}))
    procs = []
    for rank in (0, 1):
        out = open(tmp_path / f"node{rank}.out", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank", str(rank),
             "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "fail",
             "--nproc-per-node", str(nproc), "--no-preflight", *extra, "--", LOOP],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 90
    while len(list(tmp_path.glob("pid.*"))) < 2 * nproc:
        assert time.monotonic() < deadline, [p.poll() for p in procs]
        time.sleep(0.2)
    pids = {int(p.name.split(".")[1]): int(p.read_text()) for p in tmp_path.glob("pid.*")}
    return procs, pids


def _cleanup(procs, pids):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_sigkilled_agent_takes_its_workers_and_the_survivor_names_it(tmp_path):
    procs, pids = _start(tmp_path, "--node-timeout", "5", "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        killed_at = time.monotonic()
        procs[1].kill()                                    # SIGKILL node 1's agent
        deadline = time.monotonic() + 5
        while any(_alive(pids[r]) for r in (2, 3)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pids[r]) for r in (2, 3)), "node 1's workers outlived its agent"
        rc = procs[0].wait(timeout=40)
        took = time.monotonic() - killed_at
        out = (tmp_path / "node0.out").read_text()
        assert rc == 4, out[-3000:]
        assert took < 30
        assert "meshrun: node 1 (" in out and "is lost: last heartbeat" in out, out[-3000:]
        assert not any(_alive(pids[r]) for r in (0, 1))
    finally:
        _cleanup(procs, pids)


def test_lost_store_host_is_named_by_the_survivor(tmp_path):
    procs, pids = _start(tmp_path, "--node-timeout", "5", "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        procs[0].kill()                                    # node 0 hosts the store
        rc = procs[1].wait(timeout=40)
        out = (tmp_path / "node1.out").read_text()
        assert rc == 4, out[-3000:]
        assert "node 0 (" in out and "which hosts the job's store, is lost" in out, out[-3000:]
        assert "Traceback" not in out.split("is lost")[1]  # one sentence, not C++ frames after
    finally:
        _cleanup(procs, pids)


def test_stopped_worker_is_reported_as_the_hang(tmp_path):
    procs, pids = _start(tmp_path, "--node-timeout", "30", "--hang-timeout", "4")
    try:
        time.sleep(2.0)
        os.kill(pids[3], signal.SIGSTOP)                   # rank 3 (node 1) freezes
        rcs = [p.wait(timeout=60) for p in procs]
        out0 = (tmp_path / "node0.out").read_text()
        assert rcs == [5, 5], (rcs, out0[-3000:])
        line = next(l for l in out0.splitlines() if "job hung" in l)
        assert "stuck: rank 3 on node 1 (" in line, line
        # the others' stacks were dumped into the run's log folder
        stacks = tmp_path / "logs" / "fail" / "stacks" / "rank0.txt"
        assert "distributed_c10d" in stacks.read_text()
    finally:
        _cleanup(procs, pids)


def test_python_level_hang_is_found_by_its_stack(tmp_path):
    procs, pids = _start(tmp_path, "--node-timeout", "30", "--hang-timeout", "4",
                         env_extra={"HANG_RANK": "1", "HANG_AT_STEP": "20"})
    try:
        rcs = [p.wait(timeout=90) for p in procs]
        out0 = (tmp_path / "node0.out").read_text()
        assert rcs == [5, 5], (rcs, out0[-3000:])
        line = next(l for l in out0.splitlines() if "job hung" in l)
        assert "stuck: rank 1 on node 0 (" in line, line
    finally:
        _cleanup(procs, pids)


def test_sigterm_stops_a_node_and_its_workers_quickly(tmp_path):
    procs, pids = _start(tmp_path, "--node-timeout", "5", "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        start = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        rc0 = procs[0].wait(timeout=30)
        assert rc0 == 128 + signal.SIGTERM
        deadline = time.monotonic() + 5
        while any(_alive(pids[r]) for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pids[r]) for r in (0, 1))
        assert time.monotonic() - start < 15
    finally:
        _cleanup(procs, pids)


def test_killing_simulate_leaves_no_node_agent_or_worker(tmp_path):
    sim = subprocess.Popen([sys.executable, "-m", "meshrun", "simulate", "--nodes", "2",
                            "--nproc-per-node", "1", "--", LOOP], cwd=tmp_path,
                           env=clean_env(LOOP_DIR=str(tmp_path)), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while len(list(tmp_path.glob("pid.*"))) < 2:
        assert time.monotonic() < deadline and sim.poll() is None
        time.sleep(0.2)
    pids = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
    sim.kill()
    sim.wait()
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids)
