"""examples/accelerate_train.py, an unmodified accelerate script, on two simulated nodes.

The workers get torchrun's variables from meshrun and the ACCELERATE_* variables of
``meshrun.render.accelerate.hf_worker_env`` (what ``meshrun run --accelerate`` adds), here
for a job that accumulates 2 micro-batches per step.
"""

import os

import pytest
from helpers import ROOT, clean_env, meshrun, reports

from meshrun.facts import HostFacts
from meshrun.plan import make_plan
from meshrun.render.accelerate import hf_worker_env
from meshrun.topology import Flags

pytestmark = pytest.mark.slow
EXAMPLE = str(ROOT / "examples" / "accelerate_train.py")


def test_accelerate_script_on_two_simulated_nodes(tmp_path):
    if os.environ.get("CI") != "true":
        pytest.importorskip("accelerate")
    # The plan each simulated node makes here: 2 CPU nodes x 1 process.
    plan = make_plan({}, Flags(nnodes="2", node_rank="0", nproc_per_node="1",
                               master_addr="127.0.0.1"), HostFacts(hostname="sim", gpus=()))
    job = {"train": {"per_device_batch": 16, "grad_accum": 2, "grad_clip": 1.0},
           "parallel": {"tp": 1, "mixed_precision": "auto"},
           "world_size": 2, "dp": 2, "effective_batch": 64}
    extra = {var.name: var.value for var in hf_worker_env(plan, job)}
    assert extra["ACCELERATE_USE_CPU"] == "true"
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "acc-test",
                   "--", EXAMPLE, "--steps", "20", "--batch", "16",
                   env=clean_env(**extra), cwd=tmp_path, timeout=180, check_rc=0)
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
