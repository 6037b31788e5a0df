"""Hot spares (``--spares``, runtime/membership.py) on real node agents on loopback: a node's
whole process tree SIGKILLed (as a machine dies) or SIGSTOPped (frozen), a spare taking its
seat, every node's workers resuming from the newest complete checkpoint, the node started
again and waiting as a spare, and the job finishing. The weights at the end are compared
bit for bit with a run that had no failure."""

import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers import Nodes, clean_env, goodput

# timing: each test bounds how soon the spare takes over (and runs 3 nodes, whose load would
# read as a slow node in the quota tests beside it)
# Not the `timing` group as a whole (it is the suite's longest serial chain): the tests that
# share the module's reference run go on one worker (conftest: a module fixture's group);
# the frozen node's, which times the node timeout, is a `timing` test.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

STEPS, INTERVAL = 40, 10
RECIPE = ["--recipe", "mlp-tp", "--set", f"train.steps={STEPS}", "--set", "train.log_every=1",
          "--set", f"checkpoint.interval={INTERVAL}"]
FAST = ["--beat", "0.2", "--hang-timeout", "0", "--slow-window", "0"]


def _step(folder, run_id: str) -> int:
    path = folder / "logs" / run_id / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[-1])["step"] if lines else 0


def _until_step(nodes: Nodes, run_id: str, step: int, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while _step(nodes.folder, run_id) < step:
        assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.procs), \
            nodes.outputs()[-4000:]
        time.sleep(0.05)


def _weights(folder, run_id: str, step: int) -> dict:
    """The model's tensors of checkpoint ``step``, read back from its files (no process group:
    torch's DCP -> torch.save conversion)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = folder / f"w-{run_id}.pt"
    dcp_to_torch_save(str(folder / "checkpoints" / run_id / f"step-{step}"), str(target))
    state = torch.load(target, weights_only=False)
    return {k: v for k, v in state["model"].items() if torch.is_tensor(v)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same recipe on 2 nodes with no failure: its final weights."""
    folder = tmp_path_factory.mktemp("reference")
    with Nodes(folder, RECIPE, nnodes=2, run_id="ref", extra=FAST) as nodes:
        codes = nodes.wait(240)
        assert codes == [0, 0], nodes.outputs()[-3000:]
    return _weights(folder, "ref", STEPS)


def test_a_killed_node_s_seat_goes_to_the_spare_and_the_run_ends_with_the_failure_free_weights(
        tmp_path, reference):
    """3 nodes, --spares 1: node 1 (seated) is SIGKILLed with its workers at step >= 15.
    Spare node 2 takes seat 1; nodes 0 and 2 resume from the newest checkpoint and finish.
    Node 1 is started again: it waits as a spare and ends with the job. The final weights
    equal the failure-free run's bit for bit."""
    import torch

    nodes = Nodes(tmp_path, RECIPE, nnodes=3, run_id="sp", preflight=True,
                  extra=[*FAST, "--spares", "1"], env=clean_env())
    with nodes:
        assert nodes.wait_for("waits as a spare", node=2, timeout=90) is not None, \
            nodes.outputs()[-3000:]
        _until_step(nodes, "sp", 15)
        crashed_at = time.monotonic()
        nodes.crash(1)
        took = nodes.wait_for("spare node 2 takes its seat", node=0, timeout=30,
                              alive=(0, 2))
        assert took is not None, nodes.outputs()[-4000:]
        named_s = time.monotonic() - crashed_at
        nodes.restart(1)
        codes = nodes.wait(300)
        out0, out1, out2 = (nodes.output(k) for k in range(3))
        assert codes[0] == 0 and codes[2] == 0, nodes.outputs()[-5000:]
        assert codes[1] == 0, out1[-3000:]       # the restarted node: a spare, not needed
    assert named_s < 5, named_s                   # a dead agent's link: named in about a second
    assert "node 1 (" in out0 and "is lost (its agent's connection closed" in out0
    assert "(rank 1); every node's workers restart from the newest checkpoint " \
           "(membership epoch 1; 0 spares left)" in out0
    assert "starting 1 worker: rank 1 of 2" in out2 and "membership epoch 1" in out2
    assert "node 1 was lost earlier in this job and comes back: it waits as a spare" in out1
    assert "preflight: this node and node 0 agree" in out1
    assert "meshrun: node 1 (" in out0 and "is back and waits as a spare (1 spare now)" in out0
    assert "the job finished; spare node 1 was not needed" in out1
    resumed = [int(line.split("resumed from step ")[1].split()[0])
               for line in (tmp_path / "logs" / "sp" / "rank0.log").read_text().splitlines()
               if "resumed from step " in line]
    assert resumed and resumed[-1] % INTERVAL == 0 and resumed[-1] >= 10, resumed
    # goodput: the take-over is recovery; the steps after the checkpoint, trained again, lost
    g = goodput(tmp_path / "logs" / "sp")
    assert g["restarts"] == 1 and g["steps_again"] >= 1 and g["recovery_s"] > 0, g
    final = _weights(tmp_path, "sp", STEPS)
    assert final.keys() == reference.keys()
    assert all(torch.equal(final[k], reference[k]) for k in final)


def test_a_second_failure_during_the_recovery_is_taken_over_by_the_next_spare(tmp_path, reference):
    """4 nodes, --spares 2: node 1 is SIGKILLed; as soon as spare 2 has its seat (before its
    workers have trained a step) spare 2 is SIGKILLed too; spare 3 takes the seat in epoch
    2 and the run ends with the failure-free weights."""
    import torch

    nodes = Nodes(tmp_path, RECIPE, nnodes=4, run_id="tw",
                  extra=[*FAST, "--spares", "2"], env=clean_env())
    with nodes:
        _until_step(nodes, "tw", 15)
        nodes.crash(1)
        assert nodes.wait_for("spare node 2 takes its seat", node=2, timeout=30,
                              alive=(0, 2, 3)) is not None, nodes.outputs()[-4000:]
        nodes.crash(2)
        assert nodes.wait_for("spare node 3 takes its seat", node=0, timeout=30,
                              alive=(0, 3)) is not None, nodes.outputs()[-4000:]
        codes = [nodes.procs[k].wait(timeout=240) for k in (0, 3)]
        assert codes == [0, 0], nodes.outputs()[-5000:]
    out0 = nodes.output(0)
    assert "(membership epoch 2; 0 spares left)" in out0, out0[-3000:]
    assert "starting 1 worker: rank 1 of 2" in nodes.output(3)
    final = _weights(tmp_path, "tw", STEPS)
    assert all(torch.equal(final[k], reference[k]) for k in reference)


def test_a_node_killed_while_a_checkpoint_is_written_resumes_from_the_previous_complete_one(
        tmp_path):
    """A larger model (a checkpoint takes a while to write): node 1 is SIGKILLed once the
    newest checkpoint's folder exists without its .metadata (written last, once every rank's
    shards are down). The spare takes the seat, and every node resumes from the newest
    *complete* checkpoint, never the partial one; the run finishes."""
    from meshrun.worker import checkpoint as ckpt

    big = [*RECIPE, "--set", "model.dim=512", "--set", "model.hidden=2048",
           "--set", "train.steps=30"]
    nodes = Nodes(tmp_path, big, nnodes=3, run_id="ck", extra=[*FAST, "--spares", "1"],
                  env=clean_env())
    folder = tmp_path / "checkpoints" / "ck"
    with nodes:
        deadline = time.monotonic() + 200
        while True:  # the moment step-20 (not the first: one complete exists) is half written
            assert time.monotonic() < deadline and all(p.poll() is None for p in nodes.procs), \
                nodes.outputs()[-3000:]
            partial = folder / "step-20"
            if partial.is_dir() and not (partial / ".metadata").exists():
                break
            time.sleep(0.002)
        nodes.crash(1)
        assert ckpt.newest_complete(ckpt.parse_listing(ckpt.listing(str(folder)))).step == 10
        assert nodes.wait_for("spare node 2 takes its seat", node=0, timeout=30,
                              alive=(0, 2)) is not None, nodes.outputs()[-4000:]
        codes = [nodes.procs[k].wait(timeout=300) for k in (0, 2)]
        assert codes == [0, 0], nodes.outputs()[-5000:]
    rank0 = (tmp_path / "logs" / "ck" / "rank0.log").read_text()
    resumed = [int(line.split("resumed from step ")[1].split()[0])
               for line in rank0.splitlines() if "resumed from step " in line]
    # step-20 was half written when node 1 died: the resume took step-10, or step-20 if
    # rank 0 completed it (its .metadata) before the take-over stopped it; never a partial one
    assert len(resumed) == 1 and resumed[0] in (10, 20), resumed


@pytest.mark.timing
def test_a_frozen_node_is_replaced_after_the_node_timeout_and_stops_when_it_wakes(tmp_path):
    """Node 1 SIGSTOPped with its workers: after --node-timeout the spare takes its seat;
    node 1, continued while the job goes on, reads that it was replaced and stops (exit 4)
    instead of going on with its old workers; the job finishes on nodes 0 and 2."""
    nodes = Nodes(tmp_path, RECIPE, nnodes=3, run_id="fz",
                  extra=[*FAST, "--spares", "1", "--node-timeout", "3"], env=clean_env())
    with nodes:
        _until_step(nodes, "fz", 15)
        stopped_at = time.monotonic()
        nodes.signal(1, signal.SIGSTOP)
        took = nodes.wait_for("spare node 2 takes its seat", node=0, timeout=40,
                              alive=(0, 2))
        assert took is not None, nodes.outputs()[-4000:]
        named_s = time.monotonic() - stopped_at
        nodes.signal(1, signal.SIGCONT)          # wakes while the job goes on without it
        assert nodes.procs[1].wait(timeout=60) == 4, nodes.output(1)[-3000:]
        for code in (nodes.procs[0].wait(timeout=240), nodes.procs[2].wait(timeout=60)):
            assert code == 0, nodes.outputs()[-5000:]
    # silence counts from node 1's last heartbeat, up to a beat (0.2 s) before the stop
    assert 3 - 0.5 <= named_s < 3 + 8, named_s
    assert "node 1 was found lost and its seat was given away" in nodes.output(1)


USER_SCRIPTS = Path(__file__).resolve().parent / "user_scripts"


def _need(module: str) -> None:
    if os.environ.get("CI") == "true":
        __import__(module)  # CI installs the test extras: missing is a failure there
    else:
        pytest.importorskip(module)


@pytest.mark.timing   # 4 nodes of a framework: not beside the tests that time the wall clock
@pytest.mark.parametrize("framework", ["hf-trainer", "lightning"])
def test_a_users_trainer_script_goes_on_through_a_takeover_and_a_shrink(tmp_path, framework):
    """The HF Trainer and Lightning scripts of tests/integration/user_scripts, resuming from
    their own newest checkpoint when started (what docs/elastic.md says each framework
    needs), on 4 nodes with --spares 1 and --nnodes 2:4: node 1 SIGKILLed once a checkpoint
    exists, spare 3 takes its seat (world 3); node 2 SIGKILLed once a newer checkpoint
    exists, no spare is left and the job shrinks to 2 nodes; both finish, each rank
    reporting the world of 2 it ended in."""
    if framework == "hf-trainer":
        _need("transformers")
        script = [str(USER_SCRIPTS / "hf_trainer_gpt2.py"), str(tmp_path / "out")]
        env = clean_env(HF_STEPS="60", HF_SAVE_STEPS="5", HF_RESUME="0", HF_RESUME_LAST="1",
                        OMP_NUM_THREADS="1")

        def saved() -> float:
            done = [int(p.parent.name.split("-")[1])
                    for p in (tmp_path / "out").glob("checkpoint-*/trainer_state.json")]
            return max(done, default=-1)
    else:
        _need("lightning")
        script = [str(USER_SCRIPTS / "lightning_ddp.py")]
        env = clean_env(LIGHTNING_STEPS="600", LIGHTNING_CKPT_DIR=str(tmp_path / "ckpt"),
                        OMP_NUM_THREADS="1")

        def saved() -> float:
            last = tmp_path / "ckpt" / "last.ckpt"
            return last.stat().st_mtime_ns if last.exists() else -1

    def newer_than(mark: float, alive: tuple[int, ...]) -> float:
        deadline = time.monotonic() + 150
        while (now := saved()) <= mark:
            assert time.monotonic() < deadline and all(nodes.procs[k].poll() is None
                                                       for k in alive), nodes.outputs()[-4000:]
            time.sleep(0.05)
        return now

    nodes = Nodes(tmp_path, ["--", *script], nnodes=4, run_id="fw",
                  extra=[*FAST, "--spares", "1", "--nnodes", "2:4"], env=env)
    with nodes:
        mark = newer_than(-1, (0, 1, 2, 3))
        nodes.crash(1)
        assert nodes.wait_for("spare node 3 takes its seat", node=0, timeout=30,
                              alive=(0, 2, 3)) is not None, nodes.outputs()[-4000:]
        newer_than(mark, (0, 2, 3))
        nodes.crash(2)
        assert nodes.wait_for("no spare left: the job goes on with 2 nodes", node=0, timeout=30,
                              alive=(0, 3)) is not None, nodes.outputs()[-4000:]
        codes = [nodes.procs[k].wait(timeout=240) for k in (0, 3)]
        assert codes == [0, 0], nodes.outputs()[-5000:]
    logs = tmp_path / "logs" / "fw"
    rank1 = (logs / "rank1.log").read_text()
    assert rank1.count("resuming from") >= 2, rank1[-3000:]
    # the lost node's part and the spare's, one line between (a shared log folder here)
    head = "--- meshrun: membership epoch 1: this rank runs on node 3 from here on ---"
    assert rank1.count(head) == 1 and rank1.index(head) < rank1.index("resuming from"), \
        rank1[-3000:]
    # after the shrink the spare says which rank it runs now (once seen missing in a fresh-clone
    # run: docs/testing.md, "Flakes"): its whole console and the rank's log say why, if again
    assert "starting 1 worker: rank 1 of 2" in nodes.output(3), \
        nodes.output(3)[-3000:] + "\n--- rank1.log ---\n" + rank1[-2500:]
    reports = [json.loads(line.split("REPORT ", 1)[1])
               for k in (0, 3) for line in nodes.output(k).splitlines() if "REPORT {" in line]
    assert sorted(r["rank"] for r in reports) == [0, 1], nodes.outputs()[-3000:]
    assert {r["world_size"] for r in reports} == {2}


def _until_said(nodes: Nodes, text: str, times: int, node: int, alive: tuple[int, ...],
                timeout: float = 60) -> None:
    """Until node ``node`` has printed ``text`` ``times`` times (the nodes in ``alive`` up)."""
    assert nodes.wait_for(text, node=node, timeout=timeout, alive=alive, times=times) \
        is not None, nodes.outputs()[-4000:]


WAIT_FOR_STOP = """\
import os, sys, time
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} works", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
"""


# a node killed in its first second, before its liveness link is open and its first beat,
# is found by its silence (the node timeout and the first connection's grace: 25 s); after
# that its link's bare close names it within about a second
LINKED_S = 1.5


def test_a_flapping_node_is_kept_out_after_its_third_loss_and_the_job_goes_on(tmp_path):
    """3 nodes, --spares 1: node 1 (seated) is SIGKILLed and spare node 2 takes its seat;
    node 1, started again, waits as a spare; it is SIGKILLed twice more (a lost spare is only
    reported: training goes on untouched) and started again each time. After its third loss
    it is kept out: node 0 says so, node 1 says it waits for the job's end, nothing is
    restarted for it, and the job finishes with every node exiting 0."""
    script = tmp_path / "until_stop.py"
    script.write_text(WAIT_FOR_STOP)
    stop = tmp_path / "stop"
    nodes = Nodes(tmp_path, ["--", str(script), str(stop)], nnodes=3, run_id="fl",
                  extra=[*FAST, "--spares", "1"], env=clean_env())
    back = "is back and waits as a spare (1 spare now)"
    with nodes:
        assert nodes.wait_for("waits as a spare", node=2, timeout=90) is not None, \
            nodes.outputs()[-3000:]
        assert nodes.wait_for("rank 1 of 2 works", node=1, timeout=90) is not None, \
            nodes.outputs()[-3000:]
        time.sleep(LINKED_S)
        nodes.crash(1)                                                  # loss 1: seated
        _until_said(nodes, "spare node 2 takes its seat", 1, node=0, alive=(0, 2))
        for loss in (2, 3):
            nodes.restart(1)
            _until_said(nodes, back, loss - 1, node=0, alive=(0, 1, 2))
            time.sleep(LINKED_S)
            nodes.crash(1)                                              # losses 2, 3: a spare
            _until_said(nodes, "meshrun: spare node 1 (", loss - 1, node=0, alive=(0, 2))
        nodes.restart(1)
        _until_said(nodes, "is back but was lost 3 times in this job: kept out", 1, node=0,
                    alive=(0, 1, 2))
        _until_said(nodes, "node 1 was lost 3 times in this job: it is kept out and waits "
                    "for the job's end", 1, node=1, alive=(0, 1, 2))
        stop.touch()
        codes = nodes.wait(120)
    assert codes == [0, 0, 0], nodes.outputs()[-5000:]
    out0 = nodes.output(0)
    assert out0.count(back) == 2, out0[-4000:]                      # not a third time
    assert out0.count("training goes on; 0 spares left") == 2, out0[-4000:]
    # one take-over, and nothing restarted for the flapping spare afterwards
    assert "membership epoch 1" in out0 and "membership epoch 2" not in out0, out0[-4000:]
    assert nodes.output(2).count("rank 1 of 2 works") == 1
    assert "the job finished; spare node 1 was not needed" in nodes.output(1)
