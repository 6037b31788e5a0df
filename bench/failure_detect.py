"""How fast a dead or frozen node and a hung rank are noticed: meshrun against plain torchrun.

    python bench/failure_detect.py [--repeats 3] [--cap 120] [--json out.json]

Two nodes on loopback, one worker each, running ``tests/integration/scripts/loop.py``
(an all-reduce every 50 ms with ``meshrun.progress(step)``, which does nothing outside
meshrun). Each node is started in its own session; "the node" is its agent and all its
descendants (torch's agent starts workers in sessions of their own), signalled together
as a machine would fail. Launchers:

* ``meshrun run --nnodes 2 --node-rank R --master-addr 127.0.0.1 --master-port P``
  with its defaults (node timeout 15 s) and ``--hang-timeout 10`` for the hang case;
* ``torchrun --nnodes 2 --node-rank R --master-addr 127.0.0.1 --master-port P`` (the
  seeds' way: static rendezvous), gloo with torch's default timeout (30 min).

Scenarios (each started fresh, after both workers have written their pid files and 2 s
of training):

* ``killed``: SIGKILL to all of node 1's processes (agent and worker), like a power loss
  on one host. Loopback answers the dead sockets with resets, so torch notices too.
* ``frozen``: SIGSTOP to all of node 1's processes, like a frozen host or a cut link: no
  socket is closed and nothing is reset.
* ``hang``: rank 1 sleeps in Python at step 40 (``HANG_RANK``/``HANG_AT_STEP``); the clock
  starts when its "hanging" line appears.
* ``agent-killed``: SIGKILL to node 1's agent only; reported is how many of node 1's
  workers are still alive 5 s later (orphans) rather than a time.

Reported per scenario and launcher: seconds from the event until the last process of the
surviving node (node 0; in ``hang`` both nodes) exited, median over ``--repeats``;
``> cap`` when it was still running after ``--cap`` seconds (then it is killed), and
whether the survivor's output names the lost node or the stuck rank.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import alive, clean_env, free_port, signal_tree

LOOP = Path(__file__).resolve().parent.parent / "tests" / "integration" / "scripts" / "loop.py"
def argv(launcher: str, node: int, port: int, scenario: str) -> list[str]:
    if launcher == "meshrun":
        extra = ["--hang-timeout", "10" if scenario == "hang" else "0"]
        return [sys.executable, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank",
                str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
                "--nproc-per-node", "1", "--run-id", "bench", "--no-preflight", *extra, "--",
                str(LOOP)]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
            str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
            "--nproc-per-node", "1", str(LOOP)]


def signal_node(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to every process of one node (agent and workers) at once."""
    signal_tree(proc.pid, sig)


def one(launcher: str, scenario: str, cap: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="failbench-") as tmp:
        folder = Path(tmp)
        env = clean_env(LOOP_DIR=tmp)
        if scenario == "hang":
            env.update(HANG_RANK="1", HANG_AT_STEP="40")
        port = free_port()
        procs = []
        for node in (0, 1):
            with open(folder / f"node{node}.out", "w") as out:
                procs.append(subprocess.Popen(argv(launcher, node, port, scenario), cwd=tmp,
                                              env=env, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        workers: dict[int, int] = {}
        try:
            deadline = time.monotonic() + 120
            while len(list(folder.glob("pid.*"))) < 2:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"{launcher}: workers did not start: "
                                       + (folder / "node0.out").read_text()[-1500:])
                time.sleep(0.1)
            workers = {int(p.name.split(".")[1]): int(p.read_text())
                       for p in folder.glob("pid.*")}
            time.sleep(2.0)
            if scenario == "killed":
                signal_node(procs[1], signal.SIGKILL)
            elif scenario == "frozen":
                signal_node(procs[1], signal.SIGSTOP)
            elif scenario == "agent-killed":
                procs[1].kill()
                time.sleep(5.0)
                return {"orphans": int(alive(workers[1]))}
            else:  # hang: the clock starts when rank 1 says it hangs
                while "hanging at step" not in (folder / "node1.out").read_text():
                    if time.monotonic() > deadline + 60:
                        raise RuntimeError("rank 1 never reached its hang")
                    time.sleep(0.05)
            event = time.monotonic()
            watched = procs if scenario == "hang" else procs[:1]
            while any(p.poll() is None for p in watched) and time.monotonic() - event < cap:
                time.sleep(0.05)
            took = time.monotonic() - event
            done = all(p.poll() is not None for p in watched)
            out0 = (folder / "node0.out").read_text()
            named = ("node 1 (" in out0 and "is lost" in out0) if scenario != "hang" else \
                ("stuck: rank 1" in out0)
            return {"seconds": round(took, 2) if done else None, "named": named,
                    "exit_codes": [p.poll() for p in watched]}
        finally:
            for proc in procs:
                signal_node(proc, signal.SIGCONT)
                signal_node(proc, signal.SIGKILL)
                proc.wait()
            for pid in workers.values():  # orphans are no longer in their agent's tree
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap", type=float, default=120.0,
                        help="stop waiting after this many seconds (default 120)")
    parser.add_argument("--scenario", action="append",
                        choices=["killed", "frozen", "hang", "agent-killed"])
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    results: dict = {"cap_s": args.cap, "repeats": args.repeats, "rows": {}}
    for scenario in args.scenario or ["killed", "frozen", "hang", "agent-killed"]:
        for launcher in ("meshrun", "torchrun"):
            runs = [one(launcher, scenario, args.cap) for _ in range(args.repeats)]
            results["rows"][f"{scenario}/{launcher}"] = runs
            if scenario == "agent-killed":
                shown = f"orphaned workers 5 s later: {[r['orphans'] for r in runs]}"
            else:
                times = [r["seconds"] for r in runs]
                finite = [t for t in times if t is not None]
                median = (f"{statistics.median(finite):.1f} s" if len(finite) == len(times)
                          else f"> {args.cap:.0f} s")
                shown = (f"median {median}  runs {times}  named: "
                         f"{all(r['named'] for r in runs)}  exit {runs[0]['exit_codes']}")
            print(f"{scenario:13} {launcher:9} {shown}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
