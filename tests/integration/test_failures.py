"""Failures on two real node agents on loopback: a killed agent, a lost store host, a hang,
SIGTERM. Each test starts `meshrun run` twice (node 0 and node 1) with short timeouts."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    SCRIPTS,
    Nodes,
    alive,
    assert_timeline_drawn_as_recorded,
    clean_env,
    free_port,
    goodput,
    meshrun,
    page_in_a_browser,
    timeline_records,
)

pytestmark = pytest.mark.slow
LOOP = str(SCRIPTS / "loop.py")
# The watchdog at 0.2 s beats (hidden --beat): a node timeout of 1-2 s is 5-10 missed beats,
# as 15 s is at the default 1 s beat. The tests that prove the defaults say so and keep them.
FAST = ("--beat", "0.2")
HANG_ONCE = str(SCRIPTS / "hang_first_attempt.py")


def _start(tmp_path: Path, *extra: str, env_extra: dict | None = None, nproc: int = 2,
           script: str = LOOP):
    """Two `meshrun run` nodes of job "fail" running ``script`` (meshrun.harness.Nodes);
    returns them and every worker's pid (rank -> pid) once each has written its pid file."""
    nodes = Nodes(tmp_path, ["--", script], nnodes=2, nproc=nproc, extra=extra, run_id="fail",
                  env=clean_env(LOOP_DIR=str(tmp_path), **(env_extra or {}))).start()
    procs = nodes.procs
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
    procs, pids = _start(tmp_path, *FAST, "--node-timeout", "2", "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        killed_at = time.monotonic()
        procs[1].kill()                                    # SIGKILL node 1's agent
        deadline = time.monotonic() + 5
        while any(alive(pids[r]) for r in (2, 3)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pids[r]) for r in (2, 3)), "node 1's workers outlived its agent"
        rc = procs[0].wait(timeout=40)
        took = time.monotonic() - killed_at
        out = (tmp_path / "node0.out").read_text()
        assert rc == 4, out[-3000:]
        assert took < 30
        assert "meshrun: node 1 (" in out and "is lost: last heartbeat" in out, out[-3000:]
        assert not any(alive(pids[r]) for r in (0, 1))
    finally:
        _cleanup(procs, pids)


@pytest.mark.timing
def test_a_killed_node_is_named_within_three_seconds(tmp_path):
    """Default --node-timeout (15 s): node 1's agent is SIGKILLed; its kernel closes its
    liveness link to node 0, and node 0 names it at once (not after 15 s, nor 5 s)."""
    procs, pids = _start(tmp_path, "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        killed_at = time.monotonic()
        procs[1].kill()                         # its workers follow (PDEATHSIG)
        rc = procs[0].wait(timeout=40)
        took = time.monotonic() - killed_at
        out = (tmp_path / "node0.out").read_text()
        assert rc == 4, out[-3000:]
        found = re.search(r"node 1 \(.*\) is lost: last heartbeat ([\d.]+) s ago; its agent's "
                          r"connection closed without a goodbye", out)
        assert found, out[-3000:]
        assert float(found[1]) < 3 and took < 10, (found[1], took, out[-3000:])
    finally:
        _cleanup(procs, pids)


@pytest.mark.timing
def test_after_a_broken_collective_a_silent_node_is_named_before_the_node_timeout(tmp_path):
    """Default --node-timeout (15 s): node 1's agent freezes (SIGSTOP: its link stays open,
    as with a frozen host) and its workers die, so node 0's workers fail on the broken
    collective; node 0 names node 1 after 5 s of silence (Watchdog.suspect), not 15."""
    procs, pids = _start(tmp_path, "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        killed_at = time.monotonic()
        os.kill(procs[1].pid, signal.SIGSTOP)
        for rank in (2, 3):
            os.kill(pids[rank], signal.SIGKILL)
        rc = procs[0].wait(timeout=40)
        took = time.monotonic() - killed_at
        out = (tmp_path / "node0.out").read_text()
        assert rc == 4, out[-3000:]
        age = float(re.search(r"node 1 \(.*\) is lost: last heartbeat ([\d.]+) s ago", out)[1])
        assert 5 <= age < 10 and took < 13, (age, took, out[-3000:])
        assert "connection closed" not in out
    finally:
        os.kill(procs[1].pid, signal.SIGCONT)
        _cleanup(procs, pids)


def test_lost_store_host_is_named_by_the_survivor(tmp_path):
    procs, pids = _start(tmp_path, *FAST, "--node-timeout", "2", "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        procs[0].kill()                                    # node 0 hosts the store
        rc = procs[1].wait(timeout=40)
        out = (tmp_path / "node1.out").read_text()
        assert rc == 4, out[-3000:]
        assert "node 0 (" in out and "which hosts the job's store, is lost" in out, out[-3000:]
        # one sentence, not the agent's own frames after it; a worker's traceback (its lines
        # start "[rankN]:") may still land after the line: with links the line comes first
        after = out.split("is lost")[1].splitlines()
        assert not [ln for ln in after if ("Traceback" in ln or "frame #" in ln)
                    and not ln.startswith("[rank")], out
    finally:
        _cleanup(procs, pids)


@pytest.mark.timing
def test_frozen_store_host_is_named_within_the_node_timeout(tmp_path):
    """Node 0's agent and workers frozen (SIGSTOP): its kernel still accepts connections
    into the store's listen queue but nothing answers, the case where a TCPStore client's
    handshake waits forever. Node 1 must name node 0 within --node-timeout + a few beats."""
    procs, pids = _start(tmp_path, *FAST, "--node-timeout", "2", "--hang-timeout", "0")
    frozen = [procs[0].pid, pids[0], pids[1]]
    try:
        time.sleep(1.0)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        rc = procs[1].wait(timeout=60)
        took = time.monotonic() - stopped_at
        out = (tmp_path / "node1.out").read_text()
        assert rc == 4, out[-3000:]
        assert "node 0 (" in out and "which hosts the job's store, is lost" in out, out[-3000:]
        assert took < 2 + 8, took
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        _cleanup(procs, pids)


def test_stopped_worker_is_reported_as_the_hang(tmp_path):
    procs, pids = _start(tmp_path, *FAST, "--node-timeout", "30", "--hang-timeout", "4")
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
    procs, pids = _start(tmp_path, *FAST, "--node-timeout", "30", "--hang-timeout", "4",
                         env_extra={"HANG_RANK": "1", "HANG_AT_STEP": "20"})
    try:
        rcs = [p.wait(timeout=90) for p in procs]
        out0 = (tmp_path / "node0.out").read_text()
        assert rcs == [5, 5], (rcs, out0[-3000:])
        line = next(l for l in out0.splitlines() if "job hung" in l)
        assert "stuck: rank 1 on node 0 (" in line, line
    finally:
        _cleanup(procs, pids)


@pytest.mark.timing
def test_sigterm_stops_a_node_and_its_workers_quickly(tmp_path):
    procs, pids = _start(tmp_path, *FAST, "--node-timeout", "2", "--hang-timeout", "0")
    try:
        time.sleep(1.0)
        start = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        rc0 = procs[0].wait(timeout=30)
        assert rc0 == 128 + signal.SIGTERM
        deadline = time.monotonic() + 5
        while any(alive(pids[r]) for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pids[r]) for r in (0, 1))
        assert time.monotonic() - start < 15
        out0 = (tmp_path / "node0.out").read_text()
        assert "stopped by SIGTERM" in out0 and "Traceback" not in out0
        assert "diagnosis:" not in out0      # stopped from outside: nothing to explain
    finally:
        _cleanup(procs, pids)


def test_node_0_failing_stops_the_others_with_its_name_not_as_lost(tmp_path):
    """Rank 0 fails; rank 1 on node 1 sleeps outside any collective, so nothing but meshrun
    tells it. Node 1 reads node 0's goodbye ("failed") and stops its workers: exit 1 and a
    line naming node 0's failure, not "node 0 ... is lost" (exit 4) once its store closes."""
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "r0",
                   "--", str(SCRIPTS / "fail_on_rank.py"), "0", "sleep", cwd=tmp_path,
                   timeout=90)
    node1 = (tmp_path / "logs" / "r0" / "node1.log").read_text()
    assert "node 0 (" in node1 and "failed and ends the job: stopping node 1's workers" in node1
    assert "meshrun: the job failed because rank 0 on node 0 (" in node1    # the cause first
    assert "exited with code 7; this node's workers were stopped" in node1
    assert "is lost" not in node1 and "Traceback" not in node1
    assert "rank 0 on node 0" in done.stdout + done.stderr
    assert done.returncode == 7, done.stderr[-2000:]     # the failed worker's own code


def test_simulate_ends_naming_the_node_whose_rank_failed_first(tmp_path):
    """Rank 1 (node 1) exits 7; rank 0 (node 0) then fails in its barrier, a victim. The
    last line names node 1 and its rank, and the exit is rank 1's 7, not node 0's 1
    (issue 23: before, "simulated node 0 exited with 1 (also failed: nodes 1)")."""
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "r1",
                   "--", str(SCRIPTS / "fail_on_rank.py"), "1", cwd=tmp_path, timeout=90)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 7, done.stderr[-2000:]
    assert last.startswith("meshrun: simulated node 1 exited with 7; rank 1 failed first"), last


def test_a_sigkilled_rank_is_named_last_its_run_is_reported_and_a_rerun_keeps_it(tmp_path):
    """issue 23, items 1, 3 and 5 on one script of a user's own (meshrun.log, no recipe):
    rank 1 SIGKILLs itself after step 4 (no traceback, no failure record of its own), so
    simulate's last line comes from the cause the nodes agreed on in the store; `meshrun
    report` tells the failed run from what meshrun saw and the script logged; a rerun under
    the same run id moves the failed run's files into earlier/1 and succeeds."""
    script = str(SCRIPTS / "log_steps.py")
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "lg",
                   "--", script, "kill", cwd=tmp_path, timeout=90)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 137, done.stderr[-2000:]
    assert last.startswith("meshrun: simulated node 1 exited with 137; rank 1 failed first "
                           "(was killed by SIGKILL)"), last
    again = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "lg",
                    "--", script, cwd=tmp_path, timeout=90)
    assert again.returncode == 0, again.stderr[-2000:]
    run = tmp_path / "logs" / "lg"
    failed = run / "earlier" / "1"
    assert {"node0.log", "node1.log", "cause.node1.json"} <= {p.name for p in failed.iterdir()}
    assert not (run / "cause.node1.json").exists()            # the plain names: the rerun's
    shown = meshrun("report", str(run), str(failed), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines()
            if line.startswith(str(run))}
    assert rows[str(run)][1] == "succeeded" and rows[str(failed)][1] == "failed", shown.stdout
    assert f"{failed}: the job failed because rank 1 on node 1" in shown.stdout
    # the script's own records: both runs appended (a rerun continues its history)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[:4] == [1, 2, 3, 4] and steps[-8:] == list(range(1, 9)), steps


def test_every_nodes_console_leads_with_the_rank_that_failed_first(tmp_path):
    """Rank 1 (node 1) raises ValueError; rank 0 (node 0) then fails in its barrier, a
    victim. Node 0's console (the one people open first) leads with rank 1's error, and so
    does its diagnosis (issue 23: before, node 0 said only that a gloo peer was gone)."""
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "lead",
                   "--", str(SCRIPTS / "fail_on_rank.py"), "1", "raise", cwd=tmp_path,
                   timeout=90)
    assert done.returncode == 1, done.stderr[-3000:]
    node0 = (tmp_path / "logs" / "lead" / "node0.log").read_text()
    lead = ("meshrun: the job failed because rank 1 on node 1 (")
    said = [line.split(" ", 1)[1] for line in node0.splitlines()   # after the line's time
            if line.split(" ", 1)[-1].startswith(lead)]
    assert len(said) == 1, node0[-3000:]
    assert said[0].endswith("exited with code 1: ValueError: bad batch at step 10; this "
                            "node's ranks failed after it") or said[0].endswith(
        "exited with code 1: ValueError: bad batch at step 10; this node's workers were "
        "stopped"), said[0]
    assert node0.index(lead) < node0.index("meshrun: rank 0 on node 0 (") \
        if "meshrun: rank 0 on node 0 (" in node0 else True
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("meshrun: simulated node 1 exited with 1; rank 1 failed first: "
                           "ValueError: bad batch at step 10"), last
    # the traceback starts at the script: none of the shim's or runpy's frames atop it
    rank1 = (tmp_path / "logs" / "lead" / "rank1.log").read_text()
    trace = rank1[rank1.index("Traceback (most recent call last):"):]
    assert trace.splitlines()[1].startswith('  File "' + str(SCRIPTS / "fail_on_rank.py")), trace
    assert "bootstrap.py" not in rank1 and "runpy" not in rank1, rank1


def test_a_worker_killed_by_a_fatal_signal_leaves_its_python_stack(tmp_path):
    """A native abort (gloo's ``terminate called without an active exception``, a segfault)
    prints no traceback: the worker shim's faulthandler writes where in Python the rank was,
    and the failure report points at it."""
    done = meshrun("run", "--nproc-per-node", "1", "--run-id", "ab", "--",
                   str(SCRIPTS / "abort_in_native.py"), cwd=tmp_path, timeout=60)
    assert done.returncode == 128 + signal.SIGABRT, done.stderr[-2000:]
    assert "rank 0 on node 0 (" in done.stderr and "was killed by SIGABRT" in done.stderr
    stack = tmp_path / "logs" / "ab" / "stacks" / "rank0.txt"
    assert "its Python stack when it died: logs/ab/stacks/rank0.txt" in done.stderr
    text = stack.read_text()
    assert "Fatal Python error: Aborted" in text and "in native_code_gives_up" in text, text


def test_every_node_failing_ends_the_job_with_each_nodes_own_report(tmp_path):
    """Every rank raises at once. Each node reports its own failure (exit 1, its rank, the
    first error), nobody is called lost or blamed for the others, and the run is diagnosed
    once. The nodes do not wait out each other's suspicion window: each counts itself in
    meshrun/ended (bench/fail_fast.py times it against torchrun)."""
    done = meshrun("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "all",
                   "--", str(SCRIPTS / "fail_at_once.py"), cwd=tmp_path, timeout=90)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    for k in (0, 1):
        assert f"rank {k} on node {k} (" in out
        assert f"first error: RuntimeError: rank {k} fails at once, on purpose" in out
    assert "is lost" not in out and "failed and ends the job" not in out
    assert "of binary" not in out  # torch's own duplicate of meshrun's report is left out
    diagnoses = [line for line in out.splitlines() if line.startswith("meshrun: diagnosis:")]
    assert len(diagnoses) == 1 and "ranks 0-1" in diagnoses[0], diagnoses


FAKE_NODE = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=timedelta(seconds=30))
store.compare_set("meshrun/node/1", "", "fake pid 1 x")
store.add("meshrun/joined", 1)
print("joined", flush=True)
time.sleep(120)            # never heartbeats, never joins the rendezvous
"""


def test_node_lost_before_the_rendezvous_completes_is_named(tmp_path):
    """Node 1 joins meshrun's store, then goes silent before torch's rendezvous: the
    watchdog's SIGTERM comes before torch has installed its own handler (it does so only
    when it starts the workers). meshrun names the node and exits 4 (was: killed, 143)."""
    port = str(free_port())
    node0 = subprocess.Popen(
        [sys.executable, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank", "0",
         "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "early",
         "--no-preflight", *FAST, "--node-timeout", "1", "--", LOOP],
        cwd=tmp_path, env=clean_env(LOOP_DIR=str(tmp_path)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    fake = subprocess.Popen([sys.executable, "-c", FAKE_NODE, port], env=clean_env(),
                            stdout=subprocess.PIPE, text=True)
    try:
        out, _ = node0.communicate(timeout=90)
        assert node0.returncode == 4, out
        assert "node 1 (fake) is lost" in out and "Traceback" not in out
        assert not list(tmp_path.glob("pid.*"))          # no worker ever started
    finally:
        for p in (node0, fake):
            if p.poll() is None:
                p.kill()


def test_killing_simulate_leaves_no_node_agent_or_worker(tmp_path):
    sim = subprocess.Popen([sys.executable, "-m", "meshrun", "simulate", "--nodes", "2",
                            "--nproc-per-node", "1", "--", LOOP], cwd=tmp_path,
                           env=clean_env(LOOP_DIR=str(tmp_path)), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while len(list(tmp_path.glob("pid.*"))) < 2:
        assert time.monotonic() < deadline and sim.poll() is None
        time.sleep(0.2)
    workers = [int(p.read_text()) for p in tmp_path.glob("pid.*")]
    with open(f"/proc/{sim.pid}/task/{sim.pid}/children") as handle:
        agents = [int(p) for p in handle.read().split()]
    assert len(agents) == 2
    try:
        sim.kill()
        sim.wait()
        # each agent, SIGTERMed by its kernel (PDEATHSIG), stops its workers in order and
        # says goodbye to a store that is gone (bounded calls): seconds, more on a busy host
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in workers + agents) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in workers), "a worker outlived simulate"
        assert not any(alive(pid) for pid in agents), "a node agent outlived simulate"
    finally:
        for pid in workers + agents:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_hang_with_a_restart_left_restarts_every_node_and_the_job_finishes(tmp_path):
    """Rank 1 hangs in the first attempt only; --max-restarts 1: one hang line, a restart of
    every node's workers through the rendezvous, exit 0 on both nodes."""
    procs, pids = _start(tmp_path, *FAST, "--node-timeout", "30", "--hang-timeout", "4",
                         "--max-restarts", "1", script=HANG_ONCE,
                         env_extra={"HANG_RANK": "1", "HANG_AT_STEP": "20", "LOOP_STEPS": "60"})
    try:
        rcs = [p.wait(timeout=120) for p in procs]
        outs = [(tmp_path / f"node{k}.out").read_text() for k in (0, 1)]
        assert rcs == [0, 0], (rcs, outs[0][-3000:], outs[1][-3000:])
        for k, out in enumerate(outs):
            hung = [line for line in out.splitlines() if "job hung" in line]
            assert len(hung) == 1, out[-3000:]
            assert "stuck: rank 1 on node 0 (" in hung[0], hung
            assert f"restarting node {k}'s workers after the hang (restart 1 of 1)" in out
        attempts = sorted((tmp_path / "attempts").read_text().splitlines())
        assert attempts == [f"attempt {a} rank {r}" for a in (0, 1) for r in range(4)]
        # goodput (reports/goodput.py): the hang and the restart are recovery; the 20 steps
        # of the first attempt, trained again by the second (no checkpoint), are lost work
        g = goodput(tmp_path / "logs" / "fail")
        assert g["restarts"] == 1 and g["steps_again"] >= 19, g
        assert g["recovery_s"] >= 4 and g["lost_s"] > 0 and g["productive_s"] > 0, g
    finally:
        pids.update({int(p.name.split(".")[1]) + 10: int(p.read_text())
                     for p in tmp_path.glob("pid.*")})  # the second attempt's workers too
        _cleanup(procs, pids)


# --- checkpoints and restarts -------------------------------------------------------------

CKPT_KILL = str(SCRIPTS / "ckpt_kill.py")


@pytest.mark.timeout(420)  # two runs of up to 180 s
def test_kill_during_a_checkpoint_save_keeps_the_previous_one_and_the_rerun_resumes(tmp_path):
    """Rank 1 dies (SIGKILL) while step-3 is being written: step-3 stays without .metadata,
    step-2 stays the newest complete checkpoint and loads bit for bit in the rerun, which
    replaces the partial step-3."""
    from meshrun.worker import checkpoint as ckpt

    folder = tmp_path / "ckpt"
    partial = folder / "step-3"
    args = ("simulate", "--nodes", "2", "--nproc-per-node", "1", "--run-id", "ck", "--",
            CKPT_KILL)
    env = {"CKPT_DIR": str(folder), "STEPS": "3", "SAVE_AT": "2,3"}
    killed = meshrun(*args, env=clean_env(**env, KILL_AT_SAVE="3"), cwd=tmp_path, timeout=180)
    out = killed.stdout + killed.stderr
    assert killed.returncode != 0, out[-3000:]
    assert "rank 1 on node 1 (" in out and "was killed by SIGKILL" in out, out[-3000:]
    assert list(partial.glob("*.distcp")), "the kill came before any shard was written"
    assert not (partial / ".metadata").exists()
    found = ckpt.parse_listing(ckpt.listing(str(folder)))
    assert found == [ckpt.Found(2, "step-2", True), ckpt.Found(3, "step-3", False)]
    assert ckpt.newest_complete(found) == ckpt.Found(2, "step-2", True)
    saved = re.search(r"checksum after step 2: (\S+)", out).group(1)

    rerun = meshrun(*args, env=clean_env(**env), cwd=tmp_path, timeout=180, check_rc=0)
    out = rerun.stdout + rerun.stderr
    assert f"resumed from step 2 ({folder / 'step-2'})" in out, out[-3000:]
    assert f"checksum after resume: {saved}" in out  # the model and optimizer as saved
    assert (f"removing incomplete {partial} (no .metadata: an interrupted save) before "
            "saving step 3 again") in out
    assert "trained to step 3" in out
    assert (partial / ".metadata").is_file()


def _workers_under(pid: int) -> dict[int, int]:
    """rank -> pid of the meshrun workers among ``pid``'s descendants."""
    out: dict[int, int] = {}
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/task/{current}/children") as handle:
                todo += [int(p) for p in handle.read().split()]
            with open(f"/proc/{current}/environ", "rb") as handle:
                env = dict(i.split(b"=", 1) for i in handle.read().split(b"\0") if b"=" in i)
            with open(f"/proc/{current}/cmdline", "rb") as handle:
                worker = b"meshrun.worker.bootstrap" in handle.read()
        except OSError:
            continue
        if worker and b"RANK" in env:
            out[int(env[b"RANK"])] = current
    return out


def test_recipe_with_a_restart_resumes_from_the_newest_checkpoint_after_a_killed_worker(
        tmp_path):
    """mlp-tp on 2 nodes x 1, --max-restarts 1; rank 1 is SIGKILLed mid-run: every node's
    workers restart through the rendezvous, resume from the newest complete checkpoint
    (losing at most one checkpoint interval) and finish."""
    from meshrun.worker import checkpoint as ckpt

    interval, steps = 10, 120
    with open(tmp_path / "out", "w") as log:
        sim = subprocess.Popen(
            [sys.executable, "-m", "meshrun", "simulate", "--nodes", "2", "--nproc-per-node",
             "1", "--run-id", "rr", "--max-restarts", "1", "--recipe", "mlp-tp",
             "--set", f"train.steps={steps}", "--set", "train.log_every=1",
             "--set", f"checkpoint.interval={interval}"],
            cwd=tmp_path, env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
    metrics = tmp_path / "logs" / "rr" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        logged = 0
        while logged < 45:
            assert time.monotonic() < deadline and sim.poll() is None, \
                (tmp_path / "out").read_text()[-3000:]
            time.sleep(0.05)
            lines = metrics.read_text().splitlines() if metrics.exists() else []
            logged = json.loads(lines[-1])["step"] if lines else 0
        os.kill(_workers_under(sim.pid)[1], signal.SIGKILL)
        # No checkpoint completes after the kill: rank 0 writes .metadata only once every
        # rank's shards are down.
        newest = ckpt.newest_complete(ckpt.parse_listing(ckpt.listing(
            str(tmp_path / "checkpoints" / "rr")))).step
        rc = sim.wait(timeout=180)
        out = (tmp_path / "out").read_text()
        assert rc == 0, out[-3000:]
        assert newest % interval == 0 and logged - interval <= newest <= steps, (logged, newest)
        assert f"resumed from step {newest} (checkpoints/rr/step-{newest})" in out, out[-3000:]
        assert "rank 1 on node 1" not in out  # restarted, not reported as the job's failure
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        after = [r["step"] for r in records if r["step"] > newest][-(steps - newest):]
        assert after == list(range(newest + 1, steps + 1))  # every step after the resume
        # goodput: the restart is recovery, the steps after the checkpoint trained again lost
        g = goodput(tmp_path / "logs" / "rr")
        assert g["restarts"] == 1 and g["steps_again"] >= logged - newest, (g, logged, newest)
        assert g["recovery_s"] > 0 and g["checkpoint_s"] > 0 and g["productive_s"] > 0, g
        # the run's page in a real browser: both charts drawn from every record, the
        # goodput bar, the resume on node 0's lane
        dom = page_in_a_browser(tmp_path / "logs" / "rr", "page-restart")
        steps = len({r["step"] for r in records})   # the loss: the last record of each step
        assert f'id="loss" class="chart" data-drawn="{steps}"' in dom, dom[:3000]
        assert f'id="rate" class="chart" data-drawn="{len(records)}"' in dom
        assert 'data-drawn="goodput"' in dom and 'data-kind="resumed"' in dom
        assert_timeline_drawn_as_recorded(dom, tmp_path / "logs" / "rr")
        kinds = {k for lane in timeline_records(tmp_path / "logs" / "rr").values()
                 for k, _ in lane}
        assert {"start", "joined", "workers", "restart", "done"} <= kinds, kinds
    finally:
        if sim.poll() is None:
            sim.kill()
        for pid in _workers_under(sim.pid).values():
            os.kill(pid, signal.SIGKILL)
