"""Shrinking (``--nnodes MIN:MAX``, runtime/membership.py) on real node agents on loopback: a
training node's whole process tree SIGKILLed with no spare left, the survivors going on with
one node fewer (contiguous group ranks, the effective batch kept through gradient
accumulation), resuming from the newest complete checkpoint, and growing back when the node returns."""

import json
import signal
import time

import pytest
from helpers import Nodes, clean_env, own_lines

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

INTERVAL, LONG = 10, 100000
# tp 1: every rank is data-parallel; 192 = 32 x 3 x 2 = 32 x 2 x 3 keeps at 3 and 2 nodes
RECIPE = ["--recipe", "mlp-tp", "--set", "train.log_every=1",
          "--set", f"checkpoint.interval={INTERVAL}", "--set", "parallel.tp=1",
          "--set", "train.effective_batch=192", "--set", "train.keep_effective_batch=true"]
FAST = ["--beat", "0.2", "--hang-timeout", "0", "--slow-window", "0"]


def _records(folder, run_id: str) -> list[dict]:
    path = folder / "logs" / run_id / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _until_step(nodes: Nodes, run_id: str, step: int, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while not (recs := _records(nodes.folder, run_id)) or recs[-1]["step"] < step:
        assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.procs), \
            nodes.outputs()[-4000:]
        time.sleep(0.05)


def test_a_lost_node_shrinks_the_job_and_when_it_returns_the_job_grows_back(tmp_path):
    """3 nodes, --nnodes 2:3: node 1 is SIGKILLed at step >= 15. Nodes 0 and 2 go on as a
    2-node job (node 2 takes group rank 1), their workers resuming from the newest
    checkpoint with grad_accum 3 instead of 2 (the batch of 192 kept). Node 1, started
    again, waits as a spare until the next complete checkpoint, then takes seat 2: the job
    grows back to 3 nodes and resumes from that checkpoint. (The job has more steps than the
    test waits for, so that node 1 comes back while it trains however loaded the machine;
    the test stops it with SIGINT once it trains in the world of 3 again.)"""
    nodes = Nodes(tmp_path, [*RECIPE, "--set", f"train.steps={LONG}"], nnodes=3, run_id="sh",
                  extra=[*FAST, "--nnodes", "2:3", "--status-every", "3"], env=clean_env())
    with nodes:
        _until_step(nodes, "sh", 15)
        nodes.crash(1)
        assert nodes.wait_for("no spare left: the job goes on with 2 nodes", node=0, timeout=30,
                              alive=(0, 2)) is not None, nodes.outputs()[-4000:]
        nodes.restart(1)
        assert nodes.wait_for("is back: the job grows to 3 nodes", node=0, timeout=150,
                              alive=(0, 1, 2)) is not None, nodes.outputs()[-4000:]
        assert nodes.wait_for("starting 1 worker: rank 2 of 3", node=1, timeout=60,
                              alive=(0, 1, 2)) is not None, nodes.outputs()[-4000:]
        out0 = nodes.output(0)
        grown = [ln for ln in out0.splitlines() if "is back: the job grows to 3 nodes" in ln]
        boundary = int(grown[0].split("from the newest checkpoint (step ")[1].split()[0])
        # the world of 3's first step and two more, and a status line with a rate (two
        # lines 3 s apart while steps went on: a short run may restart between them)
        deadline = time.monotonic() + 120
        while not ((starts := [r for r in _records(tmp_path, "sh") if r.get("first_step")])
                   and len(starts) == 3 and _records(tmp_path, "sh")[-1]["step"]
                   >= starts[-1]["step"] + 2 and " steps/s, ETA " in nodes.output(0)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.procs), \
                nodes.outputs()[-4000:]
            time.sleep(0.05)
        nodes.signal(0, signal.SIGINT, workers=False)     # Ctrl-C: the job stops
        codes = nodes.wait(120)
        out0, out1, out2 = (nodes.output(k) for k in range(3))
    assert codes[0] == 130, nodes.outputs()[-4000:]
    assert "(world size 2, the same effective batch; at least 2); every node's workers " \
           "restart from the newest checkpoint (membership epoch 1)" in out0
    assert "starting 1 worker: rank 1 of 2" in out2 and "membership epoch 1" in out2
    assert "is back and waits as a spare (1 spare now)" in out0
    assert "(membership epoch 2)" in grown[0], grown
    assert "membership epoch 2" in out1
    log0 = (tmp_path / "logs" / "sh" / "rank0.log").read_text()
    resumed = [int(line.split("resumed from step ")[1].split()[0])
               for line in log0.splitlines() if "resumed from step " in line]
    assert len(resumed) == 2 and resumed[0] % INTERVAL == 0 and resumed[0] >= 10, resumed
    assert resumed[1] >= boundary > resumed[0], (resumed, boundary)   # the newest at the restart
    assert f"world 2 = dp 2 x tp 1, {LONG} steps x 192 samples (32/device x 3 accum x 2 dp)" \
        in log0
    assert log0.count(f"world 3 = dp 3 x tp 1, {LONG} steps x 192 samples (32/device x 2 "
                      "accum x 3 dp)") == 2
    # node 0's status line (--status-every 3): the step of LONG, its rate, the last checkpoint
    status = [ln for ln in own_lines(out0) if ln.startswith("meshrun: status: step ")]
    assert any(f" of {LONG}, " in ln and " steps/s, ETA " in ln for ln in status), status
    assert any("; last checkpoint step " in ln for ln in status), status
    recs = _records(tmp_path, "sh")
    assert recs[-1]["step"] > boundary and recs[-1]["loss"] < recs[0]["loss"]


def test_below_the_minimum_a_lost_node_ends_the_job_as_without_a_range(tmp_path):
    """3 nodes, --nnodes 2:3: node 1 is SIGKILLed (the job shrinks to 2), then node 2: at
    the minimum, the loss ends the job on node 0 with the lost-node line and exit 4."""
    nodes = Nodes(tmp_path, [*RECIPE, "--set", f"train.steps={LONG}"], nnodes=3, run_id="mn",
                  extra=[*FAST, "--nnodes", "2:3"], env=clean_env())
    with nodes:
        _until_step(nodes, "mn", 3)
        nodes.crash(1)
        assert nodes.wait_for("no spare left: the job goes on with 2 nodes", node=0, timeout=30,
                              alive=(0, 2)) is not None, nodes.outputs()[-4000:]
        deadline = time.monotonic() + 120      # training in the world of 2: a step after its first
        while not ((starts := [r for r in _records(tmp_path, "mn") if r.get("first_step")])
                   and len(starts) == 2 and _records(tmp_path, "mn")[-1]["step"]
                   > starts[-1]["step"]):
            assert time.monotonic() < deadline and all(nodes.procs[k].poll() is None
                                                       for k in (0, 2)), nodes.outputs()[-4000:]
            time.sleep(0.05)
        nodes.crash(2)
        # torch's agent stops node 0's worker (blocked in a collective with the dead one)
        assert nodes.procs[0].wait(timeout=150) == 4, nodes.output(0)[-3000:]
    lost = [ln for ln in own_lines(nodes.output(0)) if "node 2 (" in ln and "is lost" in ln]
    assert lost and "goes on with" not in lost[-1], lost
