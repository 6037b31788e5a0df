"""examples/accelerate_train.py, an unmodified accelerate script, on two simulated nodes.

The workers get torchrun's variables from meshrun and, with ``--accelerate``, the
ACCELERATE_* variables of ``meshrun.render.accelerate.hf_worker_env``, here for a job
that accumulates 2 micro-batches per step.
"""

import os

import pytest
from helpers import ROOT, meshrun, reports

pytestmark = pytest.mark.slow
EXAMPLE = str(ROOT / "examples" / "accelerate_train.py")


def test_accelerate_script_on_two_simulated_nodes(tmp_path):
    if os.environ.get("CI") != "true":
        pytest.importorskip("accelerate")
    # `--accelerate` gives the workers hf_worker_env's variables; the job config (--set)
    # asks for 2 micro-batches per step, which accelerate must pick up.
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "acc-test",
                   "--accelerate", "--set", "train.per_device_batch=16",
                   "--set", "train.grad_accum=2",
                   "--", EXAMPLE, "--steps", "20", "--batch", "16",
                   cwd=tmp_path, timeout=180, check_rc=0)
    env = (tmp_path / "logs" / "acc-test" / "plan.node1.json").read_text()
    assert '"ACCELERATE_USE_CPU": "true"' in env
    found = reports(done.stdout)
    assert [r["rank"] for r in found] == [0, 1], done.stdout[-3000:]
    assert [r["node_rank"] for r in found] == [0, 1]         # one process on each node
    assert [r["main"] for r in found] == [True, False]
    assert all(r["num_processes"] == 2 and r["distributed_type"] == "MULTI_CPU" for r in found)
    assert all(r["grad_accum"] == 2 and r["mixed_precision"] == "no" for r in found)
    assert all(r["steps"] == 20 for r in found)
    # Losses are averaged over both processes, so both saw the same numbers; and they fell.
    assert found[0]["first_loss"] == found[1]["first_loss"]
    assert found[0]["last_loss"] == found[1]["last_loss"]
    assert found[0]["last_loss"] < found[0]["first_loss"] / 10
    assert "[rank0]: step  20/20" in done.stdout and "[rank1]: step" not in done.stdout
