"""Multi-process launches on this machine: simulate, two seeds-style nodes, failures, joins."""

import subprocess
import sys
import time

import pytest
from helpers import SCRIPTS, clean_env, free_port, meshrun, own_lines, reports

pytestmark = pytest.mark.slow
REPORT = str(SCRIPTS / "report.py")


def test_simulate_two_nodes_two_processes(tmp_path):
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "2", "--run-id", "sim-test",
                   "--", REPORT, cwd=tmp_path, check_rc=0)
    found = reports(done.stdout)
    assert [r["rank"] for r in found] == [0, 1, 2, 3]
    assert [r["node_rank"] for r in found] == [0, 0, 1, 1]      # ranks 0-1 on node 0, 2-3 on 1
    assert [r["local_rank"] for r in found] == [0, 1, 0, 1]
    assert [r["meshrun_node_rank"] for r in found] == [0, 0, 1, 1]
    assert all(r["world"] == 4 and r["sum"] == 1 + 2 + 3 + 4 for r in found)
    assert all(r["omp"] == "1" and r["run_id"] == "sim-test" for r in found)
    # Console lines carry rank prefixes; logs: one per node, one per rank.
    assert "[rank3]: REPORT" in done.stdout
    run_dir = tmp_path / "logs" / "sim-test"
    assert sorted(p.name for p in run_dir.glob("*.log")) == [
        "node0.log", "node1.log", "rank0.log", "rank1.log", "rank2.log", "rank3.log"]
    assert '"rank": 2' in (run_dir / "rank2.log").read_text()
    assert "[rank2]: REPORT" in (run_dir / "node1.log").read_text()
    assert "global ranks" in (run_dir / "node1.log").read_text()  # the banner


def test_two_runs_with_the_seeds_variables(tmp_path):
    """Two separate `meshrun run` processes told only WORLD_SIZE=2 RANK=0/1 MASTER_ADDR/PORT."""
    port = str(free_port())
    procs = []
    for rank in (1, 0):
        env = clean_env(WORLD_SIZE="2", RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "meshrun", "run", "--nproc-per-node", "2", "--", REPORT],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    node1, node0 = outs
    assert "waiting for nodes: 1/2 joined" in node0 + node1
    assert "WORLD_SIZE read as nodes" in node0
    assert [r["rank"] for r in reports(node0)] == [0, 1]
    assert [r["rank"] for r in reports(node1)] == [2, 3]
    assert {r["sum"] for r in reports(node0 + node1)} == {10}
    # Same run id on both nodes without any coordination.
    assert len({r["run_id"] for r in reports(node0 + node1)}) == 1


def _error_line(stderr: str) -> str:
    """The one ``meshrun: error:`` line (the diagnosis comes after it)."""
    errors = [line for line in own_lines(stderr) if line.startswith("meshrun: error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def test_missing_node_stops_with_the_master_address(tmp_path):
    port = str(free_port())
    started = time.monotonic()
    done = meshrun("run", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                   "--master-port", port, "--join-timeout", "3", "--", REPORT, cwd=tmp_path)
    assert done.returncode == 3
    assert time.monotonic() - started < 60
    assert "waiting for nodes: 1/2 joined" in done.stdout
    error = _error_line(done.stderr)
    assert f"127.0.0.1:{port}" in error and "missing node ranks: 1" in error and "fix:" in error
    assert "meshrun: diagnosis: " in done.stderr  # the automatic diagnosis follows it


def test_unreachable_master_names_address_and_port(tmp_path):
    port = str(free_port())
    done = meshrun("run", "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                   "--master-port", port, "--join-timeout", "2", "--", REPORT, cwd=tmp_path)
    assert done.returncode == 3
    error = _error_line(done.stderr)
    assert f"127.0.0.1:{port}" in error and "did not answer" in error
    out = done.stdout + done.stderr     # waiting is quiet: no C++ client-timeout traces
    assert "socket.cpp" not in out and "frame #" not in out and "Traceback" not in out


def test_node_0_stopping_during_the_join_is_one_line_on_the_others(tmp_path):
    """Node 0 gives up on a third node that never comes; node 1, waiting with it, says
    in one line that node 0's store went away (was: a DistNetworkError traceback, exit 1)."""
    port = str(free_port())
    argv = [sys.executable, "-m", "meshrun", "run", "--nnodes", "3", "--master-addr",
            "127.0.0.1", "--master-port", port, "--run-id", "gone"]
    node0 = subprocess.Popen([*argv, "--node-rank", "0", "--join-timeout", "5", "--", REPORT],
                             cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    node1 = meshrun("run", "--nnodes", "3", "--node-rank", "1", "--master-addr", "127.0.0.1",
                    "--master-port", port, "--run-id", "gone", "--join-timeout", "60", "--",
                    REPORT, cwd=tmp_path)
    assert node0.wait(timeout=60) == 3 and "missing node ranks: 2" in node0.stderr.read()
    assert node1.returncode == 3, node1.stderr
    assert "Traceback" not in node1.stderr
    error = _error_line(node1.stderr)
    assert f"node 0's store at 127.0.0.1:{port} went away while waiting for the other nodes " \
           "to join" in error and "fix: " in error


def test_worker_failure_exit_code_and_first_error(tmp_path):
    done = meshrun("run", "--nproc-per-node", "2", "--run-id", "fail-test", "--",
                   str(SCRIPTS / "fail_on_rank.py"), "1", cwd=tmp_path)
    assert done.returncode == 7, done.stderr[-2000:]
    assert "rank 1 on node 0" in done.stderr and "exited with code 7" in done.stderr
    assert "about to fail" in (tmp_path / "logs" / "fail-test" / "rank1.log").read_text()


def test_rerun_keeps_the_earlier_logs(tmp_path):
    for _ in range(2):
        done = meshrun("run", "--run-id", "again", "--", REPORT, cwd=tmp_path, check_rc=0)
    run = tmp_path / "logs" / "again"
    assert sorted(p.name for p in run.glob("node0*.log")) == ["node0.log"]
    earlier = run / "earlier" / "1"
    assert {"node0.log", "plan.node0.json", "env.node0.json", "rank0.log"} <= {
        p.name for p in earlier.iterdir()}
    assert f"its files of this node are in {earlier.relative_to(tmp_path)}" in done.stdout + \
        done.stderr
    # one rank: the slow-node check has nobody to compare it with, and says so
    assert "slow-node check: one rank, nobody to compare it with: off" in done.stderr


def test_duplicate_node_rank_is_refused(tmp_path):
    port = str(free_port())

    def start(rank):
        return subprocess.Popen(
            [sys.executable, "-m", "meshrun", "run", "--nnodes", "3", "--node-rank", rank,
             "--master-addr", "127.0.0.1", "--master-port", port, "--join-timeout", "30",
             "--", REPORT], env=clean_env(), cwd=tmp_path, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)

    first, second = start("0"), start("1")
    time.sleep(4)
    third = meshrun("run", "--nnodes", "3", "--node-rank", "1", "--master-addr", "127.0.0.1",
                    "--master-port", port, "--", REPORT, cwd=tmp_path)
    for proc in (first, second):
        proc.kill()
        proc.communicate()
    assert third.returncode == 3, third.stderr
    assert "node rank 1 is already taken" in third.stderr
