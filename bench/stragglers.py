"""Slow nodes: how fast the detector names one, false alarms, its cost, and the node check.

    python bench/stragglers.py [detect] [overhead] [calls] [nodecheck] [--json out.json]
                               [--factors 1.2,1.5,2,4] [--nodes 2,4] [--seconds 80]

Needs root and the cgroup v1 cpu controller (meshrun.harness.CpuQuota): the slowdown is a real
CPU quota on the last node's whole process tree (its `meshrun run` agent and its workers),
never a switch inside meshrun. Every job: N `meshrun run` node agents of one worker each on
loopback, running tests/integration/scripts/straggle.py (a small DDP job on CPU that marks
its arrival with meshrun.arrive before the backward and reports meshrun.progress).

* ``detect``: for each node count and slowdown factor F, the last node's quota is the CPU
  share one worker has unthrottled (2 cores / N workers, at most one core: one thread) over
  F; the detector at its defaults (window 30 s, factor 1.25). Reported: the compute-time
  ratio the run really had (node_steps.json: the throttled node over the others), the
  seconds from the job's first step to the line naming the node (or "not named" within
  ``--seconds``), and false alarms (lines naming any other node). F = 1 is the unthrottled
  job (any line is a false alarm).
  With ``--onset S`` the quota is set S seconds after the first step instead (a node that
  slows down mid-run) and the time is counted from then.
* ``overhead``: two nodes of two workers, the detector on (defaults) and off
  (``--slow-window 0``), alternated three times, 25 s each: the script's steps per second.
* ``calls``: the worker's side alone: one ``meshrun.arrive()`` + ``meshrun.progress(step)``,
  microseconds, against a real store.
* ``nodecheck``: ``meshrun doctor --all-nodes`` on two nodes, node 1 under the quota of
  each factor: the doctors' wall time, the check's own time, the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import CpuQuota, Nodes, clean_env, free_port, own_lines
from meshrun.harness import quota_available as available

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "integration" / "scripts" / "straggle.py"


def env(**extra: str) -> dict:
    return clean_env(**extra)


def share(nodes: int, nproc: int = 1) -> float:
    """The CPU one worker has unthrottled: the host's cores over the workers, <= 1 thread."""
    return min(1.0, (os.cpu_count() or 1) / (nodes * nproc))


def job(folder: Path, nodes: int, *, nproc: int = 1, seconds: float, extra=(),
        quota: CpuQuota | None = None) -> tuple[list[int], list[str], float]:
    """Run one job; returns exit codes, each node's output, and the monotonic time of rank
    0's first step (as seen by polling node 0's output)."""
    def place(rank: int, proc: subprocess.Popen) -> None:
        if quota is not None and rank == nodes - 1:
            quota.add(proc.pid)

    procs = Nodes(folder, ["--", str(SCRIPT)], nnodes=nodes, nproc=nproc, extra=extra,
                  env=env(STRAGGLE_SECONDS=str(seconds)), run_id="b",
                  log_dir=folder / "logs", before_start=place).start().procs
    first = None
    while any(p.poll() is None for p in procs):
        if first is None and "first step done" in (folder / "node0.out").read_text():
            first = time.monotonic()
        time.sleep(0.2)
    outs = [(folder / f"node{r}.out").read_text() for r in range(nodes)]
    return [p.returncode for p in procs], outs, first or time.monotonic()


def detect(nodes: int, factor: float, seconds: float, onset: float | None = None) -> dict:
    """``onset``: the quota is set that many seconds after the job's first step (the node
    slows down mid-run), and the time to the line is counted from then."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        named_at: list[float] = []
        quota_cpus = share(nodes) / factor
        start_cpus = quota_cpus if factor > 1 and onset is None else 0
        # the kernel's 100 ms period, as docs/benchmarks.md's straggler table was measured
        with CpuQuota(f"bench{nodes}", cpus=start_cpus, period_us=100_000) as quota:
            port_watch = _Watch(folder / "node0.out", named_at)
            port_watch.start()
            slowed: list[float] = []
            if onset is not None:
                _later(folder / "node0.out", onset, lambda: (quota.set(quota_cpus),
                                                             slowed.append(time.monotonic())))
            codes, outs, first = job(folder, nodes, seconds=seconds, quota=quota)
            port_watch.stop = True
            throttled = quota.throttled_s()
        if slowed:
            first = slowed[0]
        lines = [ln for ln in own_lines(outs[0]) if " is slow: " in ln]
        slow = nodes - 1
        right = [ln for ln in lines if ln.startswith(f"meshrun: node {slow} (")]
        rows = json.loads((folder / "logs" / "b" / "node_steps.json").read_text())["nodes"]
        compute = {r["node"]: r["compute_s"] for r in rows}
        others = statistics.median(v for n, v in compute.items() if n != slow)
        return {"nodes": nodes, "factor": factor, "onset_s": onset, "quota_cpus": round(quota_cpus, 3)
                if factor > 1 else None, "measured_ratio": round(compute[slow] / others, 2),
                "named_after_s": round(named_at[0] - first, 1) if right and named_at else None,
                "false_alarms": len(lines) - len(right) + (len(right) if factor <= 1 else 0),
                "line": right[0] if right else (lines[0] if lines else ""),
                "throttled_s": round(throttled, 1), "exit": codes}


def _later(path: Path, delay: float, action) -> None:
    """On a thread: ``delay`` seconds after the job's first step (in ``path``), ``action``."""
    import threading

    def run() -> None:
        while True:
            try:
                if "first step done" in path.read_text():
                    break
            except OSError:
                pass
            time.sleep(0.2)
        time.sleep(delay)
        action()

    threading.Thread(target=run, daemon=True).start()


class _Watch:
    """Polls node 0's output on a thread for the first 'is slow' line's time."""

    def __init__(self, path: Path, into: list[float]) -> None:
        import threading

        self.path, self.into, self.stop = path, into, False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stop and not self.into:
            try:
                if " is slow: " in self.path.read_text():
                    self.into.append(time.monotonic())
            except OSError:
                pass
            time.sleep(0.2)


def overhead() -> list[dict]:
    out = []
    for repeat in range(3):
        for label, extra in (("on", ()), ("off", ("--slow-window", "0"))):
            with tempfile.TemporaryDirectory() as tmp:
                codes, outs, _ = job(Path(tmp), 2, nproc=2, seconds=25, extra=extra)
                m = re.search(r"straggle: (\d+) steps in ([\d.]+) s", outs[0])
                out.append({"detector": label, "repeat": repeat, "exit": codes,
                            "steps_per_s": round(int(m[1]) / float(m[2]), 2) if m else None})
    return out


CALLS = """
import os, time
from datetime import timedelta
from torch.distributed import TCPStore
master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                  timeout=timedelta(seconds=5))
os.environ.update(MESHRUN_STORE=f"127.0.0.1:{master.port}", RANK="0")
import meshrun
meshrun.progress(0)
n = 200_000
t = time.perf_counter()
for step in range(1, n + 1):
    meshrun.arrive()
    meshrun.progress(step)
per = (time.perf_counter() - t) / n
print(f"{per * 1e6:.3f}")
"""


def calls() -> dict:
    """The worker's side: one meshrun.arrive() + meshrun.progress(step), in microseconds
    (a real store behind them, the writer thread sending once a second)."""
    runs = [float(subprocess.run([sys.executable, "-c", CALLS], capture_output=True,
                                 text=True, env=env(), check=True).stdout)
            for _ in range(3)]
    return {"us_per_step": runs, "median_us": statistics.median(runs)}


def nodecheck(factor: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder, port = Path(tmp), str(free_port())
        with CpuQuota("doctor", cpus=share(2) / factor if factor > 1 else 0,
                      period_us=100_000) as quota:
            started, procs = time.monotonic(), []
            for rank in (0, 1):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "meshrun", "doctor", "--all-nodes", "--nnodes", "2",
                     "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port",
                     port, "--nproc-per-node", "1", "--log-dir", str(folder / "logs")],
                    cwd=folder, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True))
                if rank == 1:
                    quota.add(procs[-1].pid)
            outs = [p.communicate(timeout=180)[0] for p in procs]
            wall = time.monotonic() - started
        verdict = json.loads(next((folder / "logs").glob("*-nodecheck/nodecheck.node0.json"))
                             .read_text())
        gflops = {n["node"]: n["gflops_per_rank"] for n in verdict["nodes"]}
        return {"factor": factor, "doctor_wall_s": round(wall, 1),
                "check_s": verdict["seconds"], "gflops": gflops,
                "named": [f["node"] for f in verdict["findings"]],
                "exit": [p.returncode for p in procs],
                "node1_says": next((ln for ln in outs[1].splitlines() if "[slow-node]" in ln),
                                   ""),
                "summary": verdict["summary"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", default=["detect", "overhead", "calls",
                                                      "nodecheck"])
    parser.add_argument("--factors", default="1,1.2,1.5,2,4")
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--seconds", type=float, default=80)
    parser.add_argument("--onset", type=float, default=None,
                        help="detect: slow the node down this long after the first step")
    parser.add_argument("--json", metavar="PATH")
    a = parser.parse_args()
    why = available()
    if why:
        sys.exit(f"bench/stragglers.py: {why}")
    factors = [float(f) for f in a.factors.split(",")]
    results: dict = {}
    if "detect" in a.parts:
        results["detect"] = []
        for nodes in (int(n) for n in a.nodes.split(",")):
            for factor in factors:
                row = detect(nodes, factor, a.seconds, a.onset)
                results["detect"].append(row)
                print(json.dumps(row), flush=True)
    if "overhead" in a.parts:
        results["overhead"] = overhead()
        for label in ("on", "off"):
            rates = [r["steps_per_s"] for r in results["overhead"] if r["detector"] == label]
            print(f"detector {label}: steps/s {rates}, median {statistics.median(rates)}",
                  flush=True)
    if "calls" in a.parts:
        results["calls"] = calls()
        print(json.dumps(results["calls"]), flush=True)
    if "nodecheck" in a.parts:
        results["nodecheck"] = [nodecheck(f) for f in factors]
        for row in results["nodecheck"]:
            print(json.dumps(row), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
