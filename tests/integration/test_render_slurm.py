"""``meshrun render slurm`` submitted for real to the local two-node SLURM cluster.

The rendered script is handed to ``sbatch`` as it is (no node options on the command
line: its ``#SBATCH`` lines decide), and its job must complete with ranks 0-1 on node 0
and 2-3 on node 1. The cluster is tests/cluster/slurm_up.sh (see tests/cluster/NOTES.md);
without root or the SLURM packages the test is skipped, except under CI=true.
"""

import subprocess
import sys
import time

import pytest
from helpers import SCRIPTS, reports

from meshrun.render.slurm import render_slurm
from meshrun.render.spec import spec_from_flags

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def _wait(jid: str, env: dict, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", jid], capture_output=True, text=True,
                                env=env).stdout
        if not queued.strip():
            return subprocess.run(["scontrol", "show", "job", jid], capture_output=True,
                                  text=True, env=env).stdout
        time.sleep(0.2)
    subprocess.run(["scancel", jid], env=env)
    pytest.fail(f"SLURM job {jid} still queued or running after {timeout} s")


def test_rendered_sbatch_script_runs_two_nodes_with_the_right_ranks(slurm_cluster, tmp_path):
    spec = spec_from_flags(
        "slurm", [str(SCRIPTS / "report.py"), "--note", "two words", "$HOME"],
        job_name="render-test", nnodes="2", nproc_per_node="2", gpus_per_node="0",
        setup=["echo meshrun-setup-ran", "export FROM_SETUP=yes"],
        meshrun=f"{sys.executable} -m meshrun", job_token="drawn by the script, not written")
    assert spec.cpus_per_node == 2          # not given: 1 per CPU worker, written for sbatch
    script = tmp_path / "job.sbatch"
    script.write_text(render_slurm(spec))
    submitted = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", str(script)],
                               capture_output=True, text=True, env=slurm_cluster, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    jid = submitted.stdout.strip().split(";")[0]
    state = _wait(jid, slurm_cluster, timeout=150)
    out_file = tmp_path / f"render-test-{jid}.out"            # the script's --output=%x-%j.out
    out = out_file.read_text() if out_file.exists() else ""
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, (state, out)
    assert "NumNodes=2" in state
    found = reports(out)
    assert [r["rank"] for r in found] == [0, 1, 2, 3], out
    assert [r["node_rank"] for r in found] == [0, 0, 1, 1]
    assert [r["meshrun_node_rank"] for r in found] == [0, 0, 1, 1]
    assert all(r["world"] == 4 and r["sum"] == 10 for r in found)
    assert {r["run_id"] for r in found} == {f"slurm-{jid}.0"}
    assert out.count("meshrun-setup-ran") == 1, out   # --setup: once, in the batch shell
    # The arguments reached meshrun unexpanded on both nodes (the banner shows the command).
    assert out.count("report.py --note two words $HOME") == 2, out
    # the job token the script drew reached both nodes (issue 21): their control plane signed
    assert out.count("control plane signed with the job token") == 2, out
    assert "meshrun: ignored" not in out and "drawn by the script" not in script.read_text()
