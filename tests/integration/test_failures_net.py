"""A node's network link cut mid-run: each side names the other as lost (exit 4).

Two "hosts" from tests/cluster/mpi_two_hosts.sh: network namespaces mr-h1 (10.77.0.1) and
mr-h2 (10.77.0.2), each with hostname h1/h2 and an ``eth0`` joined by a veth pair. Node 0 runs
on h1 and hosts the job's store; node 1 runs on h2. Setting h2's ``eth0`` down drops every
packet between them without closing a connection, as a pulled cable or a dead switch port
does: nothing gets a reset, so only heartbeats can tell. Needs root, iproute2 and util-linux:
skipped without, a failure under CI=true.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import SCRIPTS, alive, clean_env, free_port, sh

pytestmark = [pytest.mark.slow, pytest.mark.netns]
LOOP = str(SCRIPTS / "loop.py")


def test_cut_link_each_side_names_the_other(two_hosts, tmp_path):
    port = str(free_port())
    env = clean_env(LOOP_DIR=str(tmp_path))
    procs = []
    for node, host in ((0, "h1"), (1, "h2")):
        with open(tmp_path / f"node{node}.out", "w") as out:
            procs.append(subprocess.Popen(
                [str(two_hosts), "exec", host, sys.executable, "-m", "meshrun", "run",
                 "--nnodes", "2", "--node-rank", str(node), "--master-addr", "10.77.0.1",
                 "--master-port", port, "--run-id", "cut", "--nproc-per-node", "1",
                 "--beat", "0.2", "--node-timeout", "2", "--hang-timeout", "0", "--", LOOP],
                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL))
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while len(list(tmp_path.glob("pid.*"))) < 2:
            assert time.monotonic() < deadline, [p.poll() for p in procs]
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
        time.sleep(1.0)
        cut_at = time.monotonic()
        sh("ip", "-n", "mr-h2", "link", "set", "eth0", "down")
        rc0 = procs[0].wait(timeout=60)
        took0 = time.monotonic() - cut_at
        rc1 = procs[1].wait(timeout=60)
        took1 = time.monotonic() - cut_at
        out0, out1 = ((tmp_path / f"node{k}.out").read_text() for k in (0, 1))
        # The survivor (node 0, the store's host) names node 1 and its host.
        assert rc0 == 4, out0[-3000:]
        assert "meshrun: node 1 (h2) is lost: last heartbeat" in out0, out0[-3000:]
        assert took0 < 30
        # Node 1, cut off from the store, names node 0 and stops too, not after TCP's ~15 min.
        assert rc1 == 4, out1[-3000:]
        assert "meshrun: node 0 (h1), which hosts the job's store, is lost" in out1, out1[-3000:]
        assert took1 < 30
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in pids), "a worker outlived its node"
    finally:
        sh("ip", "-n", "mr-h2", "link", "set", "eth0", "up", check=False)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
