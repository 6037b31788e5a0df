"""The same unchanged `meshrun run` under a real two-node SLURM cluster and a real `mpirun`.

SLURM: tests/cluster/slurm_up.sh starts slurmctld + two slurmd (node1, node2) on this host.
MPI: tests/cluster/mpi_two_hosts.sh makes two network namespaces (h1 10.77.0.1, h2 10.77.0.2)
and runs Open MPI's mpirun across them. Both need root; without it (or without the Debian
packages) they are skipped, except under CI=true where that is a failure.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import SCRIPTS, clean_env, reports, require, sh

pytestmark = pytest.mark.slow
REPORT = str(SCRIPTS / "report.py")


def _sbatch(tmp_path: Path, env: dict, body: str, timeout: float = 150) -> tuple[str, str]:
    """Submit a 2-node, 1-task-per-node job; wait for it; return (job state line, output)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + body)
    jid = sh("sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=2",
             f"--chdir={tmp_path}", "-o", f"{tmp_path}/slurm-%j.out", script,
             env=env).stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", jid], capture_output=True, text=True,
                                env=env).stdout
        if not queued.strip():
            break
        time.sleep(0.2)
    else:
        subprocess.run(["scancel", jid], env=env)
        pytest.fail(f"SLURM job {jid} still queued/running after {timeout} s:\n"
                    + (tmp_path / f"slurm-{jid}.out").read_text())
    state = sh("scontrol", "show", "job", jid, env=env).stdout
    out = tmp_path / f"slurm-{jid}.out"
    return state, out.read_text() if out.exists() else ""


@pytest.mark.slurm
def test_slurm_two_nodes_srun_meshrun_run(slurm_cluster, tmp_path):
    """srun starts one unchanged `meshrun run` per node; node ranks follow SLURM_NODEID."""
    state, out = _sbatch(tmp_path, slurm_cluster,
                         f"srun {sys.executable} -m meshrun run --nproc-per-node 2 "
                         f"-- {REPORT}\n")
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, (state, out)
    found = reports(out)
    assert [r["rank"] for r in found] == [0, 1, 2, 3], out
    assert [r["meshrun_node_rank"] for r in found] == [0, 0, 1, 1]
    assert [r["node_rank"] for r in found] == [0, 0, 1, 1]
    assert all(r["world"] == 4 and r["sum"] == 10 for r in found)
    # One run id for the job, derived from SLURM_JOB_ID on both nodes without coordination.
    assert len({r["run_id"] for r in found}) == 1 and found[0]["run_id"].startswith("slurm-")
    assert "platform" in out and "slurm" in out           # the banner names where it is


@pytest.mark.slurm
def test_slurm_batch_script_without_srun_is_refused(slurm_cluster, tmp_path):
    """The forgotten-srun trap: the batch step looks like node 0 of 2 but has no SLURM_STEP_ID."""
    state, out = _sbatch(tmp_path, slurm_cluster,
                         f"{sys.executable} -m meshrun run -- {REPORT}\necho rc=$?\n")
    assert "rc=2" in out, out
    assert "outside srun" in out and "SLURM_STEP_ID" in out
    assert "Traceback" not in out and "REPORT" not in out


@pytest.mark.mpi
def test_mpirun_one_meshrun_per_host(two_hosts, tmp_path):
    """mpirun on two hosts (network namespaces): node rank from OMPI_COMM_WORLD_RANK."""
    require("mpirun", hint=" (apt-get install openmpi-bin; scripts/test.sh does)")
    done = subprocess.run(
        [str(two_hosts), "mpirun", "-x", "MASTER_ADDR=10.77.0.1", sys.executable, "-m",
         "meshrun", "run", "--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"),
         "--", REPORT],
        capture_output=True, text=True, env=clean_env(), cwd=tmp_path,
        stdin=subprocess.DEVNULL, timeout=180)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    found = reports(done.stdout)
    assert [r["rank"] for r in found] == [0, 1, 2, 3], done.stdout
    assert [r["host"] for r in found] == ["h1", "h1", "h2", "h2"]
    assert [r["meshrun_node_rank"] for r in found] == [0, 0, 1, 1]
    assert all(r["world"] == 4 and r["sum"] == 10 for r in found)
    assert len({r["run_id"] for r in found}) == 1 and found[0]["run_id"].startswith("mpi-")
