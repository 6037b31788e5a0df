"""Job isolation (a second job on a taken master port) and restarts through the rendezvous."""

import subprocess
import sys
import time

import pytest
from helpers import SCRIPTS, clean_env, free_port, meshrun, reports

pytestmark = pytest.mark.slow
REPORT = str(SCRIPTS / "report.py")


def test_second_job_on_a_taken_master_port_fails_at_once(tmp_path):
    port = str(free_port())
    # Job A's node 0 is up and waiting for its node 1.
    job_a = subprocess.Popen(
        [sys.executable, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank", "0",
         "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "job-a",
         "--join-timeout", "60", "--", REPORT],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        deadline = time.monotonic() + 30
        line = ""
        while "waiting for nodes" not in line and time.monotonic() < deadline:
            line = job_a.stdout.readline()
        # Job B's node 1 aims at job A's store: refused, not joined.
        start = time.monotonic()
        b1 = meshrun("run", "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                     "--master-port", port, "--run-id", "job-b", "--", REPORT, cwd=tmp_path)
        assert b1.returncode == 3, b1.stderr
        assert "belongs to run 'job-a'" in b1.stderr and "another job" in b1.stderr
        assert time.monotonic() - start < 20
        # Job B's node 0 on the same host and port: the port is taken.
        b0 = meshrun("run", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                     "--master-port", port, "--run-id", "job-b", "--", REPORT, cwd=tmp_path)
        assert b0.returncode == 3 and "already in use" in b0.stderr, b0.stderr
        assert job_a.poll() is None                       # job A is untouched
    finally:
        job_a.kill()
        job_a.wait()


def test_two_jobs_without_ports_on_one_host_do_not_collide(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "meshrun", "run", "--nproc-per-node", "2",
                               "--run-id", f"solo{i}", "--", REPORT],
                              cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for out in outs:
        assert [r["sum"] for r in reports(out)] == [3, 3]


def test_max_restarts_restarts_every_node_through_the_rendezvous(tmp_path):
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--max-restarts", "1",
                   "--", str(SCRIPTS / "fail_first_attempt.py"), cwd=tmp_path, check_rc=0)
    found = reports(done.stdout)
    assert [(r["rank"], r["sum"]) for r in found] == [(0, 2), (1, 2)]
    # Rank 1 failed, so node 1's agent used its restart. Node 0's agent restarts its worker
    # either because that worker failed too (its all-reduce partner died: count 1) or, if
    # node 1 re-entered the rendezvous first, for the membership change, which torch does
    # not count (TORCHELASTIC_RESTART_COUNT stays 0). Both orders happen.
    assert found[1]["attempt"] == 1 and found[0]["attempt"] in (0, 1)
