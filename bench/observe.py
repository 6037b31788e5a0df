"""Slow nodes and hangs from the collectives alone (issue 19), on real layouts and users' scripts.

    python bench/observe.py slow [--layouts plain,ddp-arrive,...] [--nodes 2,4]
                                 [--factors 2,1.5] [--warm 20] [--seconds 75]
    python bench/observe.py soak [--layouts ...] [--nodes 2] [--seconds 300]
    python bench/observe.py hang [--layouts plain,hf-trainer] [--hang-timeout 20]
    python bench/observe.py cost [--repeats 5] [--seconds 20]
    ... [--json out.json]
    python bench/observe.py --markdown out.json ...       # the tables of docs/benchmarks.md

Root and the cgroup v1 cpu controller (``meshrun.harness.CpuQuota``): every simulated node's
whole process tree (its `meshrun run` agent and its workers) runs in a cgroup of its own held
to an equal CPU quota, all inside one group that outweighs the rest of the machine; the slow
node's quota is cut by the factor, for real, while the job runs. Nothing in meshrun is
switched: the scripts are run as users write them (the layouts below), and meshrun sees them
only through the worker shim's observer (``meshrun.worker.observe``).

Layouts (``LAYOUTS``): ``plain`` (tests/integration/scripts/plain_ddp.py: DDP, nothing of
meshrun's), ``ddp-arrive`` (scripts/straggle.py: DDP calling meshrun.progress and
meshrun.arrive), ``fsdp2`` (the mlp-tp recipe at tp 1: FSDP2 over every rank), ``tp-across``
(mlp-tp, tp 2 with one process a node: every tensor-parallel all-reduce crosses nodes),
``tp-within`` (mlp-tp, tp 2 with two processes a node), ``hf-trainer``, ``lightning``
(tests/integration/user_scripts) and ``accelerate`` (examples/accelerate_train.py).

* ``slow``: the job starts with like nodes; once every node's ranks have reported for
  ``--warm`` seconds the last node's quota is cut by the factor. Reported: the true
  slowdown (the job's collectives a second before the cut over after it, from rank 0's
  reports), the ratio in the line that names the node, seconds from the cut to that line
  (or not named within ``--seconds``), and false alarms (any line naming another node, or
  any before the cut).
* ``soak``: like nodes for ``--seconds`` (300: five minutes): any slow-node or hang line
  is a false alarm.
* ``hang``: rank 1 stopped for good (SIGSTOP to its worker) once the job runs, with
  ``--hang-timeout``; seconds from the stop to the hang line, and whom it names.
* ``cost``: one observation's own time (microseconds, a real gloo group), and in one run of
  two ranks (a DDP loop, steps of a few ms) the observer's thread on and off in turns of
  ``--seconds`` (``--repeats`` of each): the mean step time of each turn.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from meshrun.harness import CpuQuota, Nodes, clean_env, own_lines, workers_of
from meshrun.harness import quota_available as available

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "integration" / "scripts"
USERS = ROOT / "tests" / "integration" / "user_scripts"
LONG = "1000000"   # steps: the job runs until the bench stops it
SHARES = [65536]   # the job's weight against the rest of the machine (--shares)


@dataclass
class Layout:
    command: list[str]
    env: dict = field(default_factory=dict)
    nproc: int = 1
    extra: tuple = ()
    nodes: tuple = (2, 4)   # the node counts it runs on


def _recipe(*sets: str, nproc: int = 1) -> Layout:
    flags = ["--recipe", "mlp-tp", "--set", f"train.steps={LONG}", "--set",
             "checkpoint.interval=0", "--set", "train.log_every=1000"]
    for s in sets:
        flags += ["--set", s]
    return Layout(flags, nproc=nproc)


LAYOUTS = {
    "plain": Layout(["--", str(SCRIPTS / "plain_ddp.py")], {"PLAIN_SECONDS": "100000"}),
    "ddp-arrive": Layout(["--", str(SCRIPTS / "straggle.py")], {"STRAGGLE_SECONDS": "100000"}),
    "fsdp2": _recipe("parallel.tp=1"),
    "tp-across": _recipe("parallel.tp=2"),
    "tp-within": _recipe("parallel.tp=2", nproc=2),
    "hf-trainer": Layout(["--", str(USERS / "hf_trainer_gpt2.py"), "out"],
                         {"HF_STEPS": LONG, "HF_RESUME": "0"}),
    "lightning": Layout(["--", str(USERS / "lightning_ddp.py")], {"LIGHTNING_STEPS": LONG}),
    "accelerate": Layout(["--", str(ROOT / "examples" / "accelerate_train.py"), "--steps",
                          LONG], {"ACCELERATE_USE_CPU": "true"}),
}


NODE_SHARE = [0.9]   # of the host's cores, shared by the nodes (--node-share)
TRACE: list[str | None] = [None]   # --trace: a folder for every rank's progress values
EXTRA_ENV: dict[str, str] = {}     # --env NAME=VALUE: for every job's nodes


def node_cpus(nnodes: int, nproc: int) -> float:
    """Each node's quota: ``NODE_SHARE`` of the host's cores shared by the nodes, at most one
    CPU a worker."""
    return min(nproc * 1.0, NODE_SHARE[0] * (os.cpu_count() or 1) / nnodes)


class Job:
    """One layout's job on ``nnodes`` nodes, each node in a quota group of its own."""

    def __init__(self, folder: Path, name: str, nnodes: int, extra=(), env=None) -> None:
        layout = LAYOUTS[name]
        self.folder, self.name, self.nnodes, self.layout = folder, name, nnodes, layout
        self.cpus = node_cpus(nnodes, layout.nproc)
        self.job = CpuQuota("obsjob", shares=SHARES[0])
        self.groups = [CpuQuota(f"node{k}", cpus=self.cpus, parent=self.job)
                       for k in range(nnodes)]
        job_env = clean_env(**{"LIGHTNING_NODES": str(nnodes), **layout.env, **EXTRA_ENV,
                               **(env or {})})
        self.nodes = Nodes(folder, layout.command, nnodes=nnodes, nproc=layout.nproc,
                           extra=(*layout.extra, *extra), env=job_env, run_id="obs",
                           log_dir=folder / "logs",
                           before_start=lambda k, proc: self.groups[k].add(proc.pid))
        self.samples: list[tuple[float, int]] = []   # (monotonic, rank 0's collectives)
        self.trace: list[tuple[float, dict[int, str]]] = []  # (monotonic, every rank's value)

    def __enter__(self) -> Job:
        self.job.__enter__()
        for g in self.groups:
            g.__enter__()
        self.nodes.start()
        return self

    def __exit__(self, *exc) -> None:
        self.nodes.kill()
        for g in self.groups:
            g.__exit__(None, None, None)
        self.job.__exit__(None, None, None)

    def out(self, k: int = 0) -> str:
        try:
            return (self.folder / f"node{k}.out").read_text(errors="replace")
        except OSError:
            return ""

    def steps(self) -> dict | None:
        try:
            return json.loads((self.folder / "logs" / "obs" / "node_steps.json").read_text())
        except (OSError, ValueError):
            return None

    def agents_out(self) -> None:
        """Each node's `meshrun run` agent (node 0's hosts the job's store) out of its node's
        quota, into the job's group, once its workers started: the quota is the workers'
        machine, and an agent's threads would otherwise make node 0 the slowest node."""
        for group, proc in zip(self.groups, self.nodes.procs):
            group.release(proc.pid)

    def reporting(self) -> bool:
        """Every node's ranks have sent work shares (node 0's summary says so)."""
        s = self.steps()
        return bool(s) and len(s.get("nodes", [])) == self.nnodes and \
            all((n.get("work_reports") or 0) >= 3 for n in s["nodes"])

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.nodes.procs)

    def watch_rank0(self, stop: threading.Event) -> threading.Thread:
        """Rank 0's collectives, sampled twice a second from the job's store (the value its
        worker reports), for the true slowdown."""
        def run() -> None:
            from datetime import timedelta

            from torch.distributed import TCPStore

            from meshrun import protocol
            store = None
            while not stop.is_set():
                try:
                    if store is None:
                        store = TCPStore("127.0.0.1", self.nodes.port, is_master=False,
                                         timeout=timedelta(seconds=2), wait_for_workers=False)
                    world = self.nnodes * self.layout.nproc
                    keys = [protocol.progress_key(r) for r in range(world)]
                    if store.check(keys):
                        values = [protocol.text(v) for v in store.multi_get(keys)]
                        now = time.monotonic()
                        self.trace.append((now, dict(enumerate(values))))
                        p = protocol.Progress.decode(values[0])
                        if p.coll >= 0:
                            self.samples.append((now, p.coll))
                except Exception:  # noqa: BLE001 - the store not up yet, or gone
                    store = None
                stop.wait(0.5)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def rate(self, start: float, end: float) -> float | None:
        """Rank 0's collectives a second between ``start`` and ``end`` (monotonic)."""
        inside = [(t, c) for t, c in self.samples if start <= t <= end]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < 3:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _lines(text: str, what: str) -> list[str]:
    return [ln for ln in own_lines(text) if what in ln and ln.startswith("meshrun: ")]


def _wait(job: Job, until, seconds: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if until():
            return time.monotonic() - started
        if not job.alive():
            return None
        time.sleep(0.25)
    return None


def slow(name: str, nnodes: int, factor: float, warm: float, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp, Job(Path(tmp), name, nnodes) as job:
        ready = _wait(job, job.reporting, 240)
        row = {"layout": name, "nodes": nnodes, "nproc": job.layout.nproc, "factor": factor,
               "node_cpus": round(job.cpus, 2)}
        if ready is None:
            return {**row, "error": "never reported", "tail": job.out()[-1500:]}
        job.agents_out()
        stop = threading.Event()
        job.watch_rank0(stop)   # once the store is up (the nodes report through it)
        time.sleep(warm)
        early = _lines(job.out(), " is slow")
        cut = time.monotonic()
        job.groups[-1].set(job.cpus / factor)
        slow_node = nnodes - 1
        took = _wait(job, lambda: any(ln.startswith(f"meshrun: node {slow_node} (")
                                      for ln in _lines(job.out(), " is slow")), seconds)
        time.sleep(3)
        stop.set()
        after_end = cut + (took if took is not None else seconds)
        before, after = job.rate(cut - warm, cut), job.rate(cut + 5, after_end)
        lines = _lines(job.out(), " is slow")
        named = [ln for ln in lines if ln.startswith(f"meshrun: node {slow_node} (")]
        ratio = re.search(r"is slow: ([\d.]+)x", named[0]) if named else None
        summary = job.steps() or {}
        shares = {n["node"]: n.get("work_share") for n in summary.get("nodes", [])}
        if TRACE[0]:   # every rank's progress values, to replay the rule offline
            Path(TRACE[0]).mkdir(parents=True, exist_ok=True)
            Path(TRACE[0], f"{name}-{nnodes}-{factor:g}.json").write_text(json.dumps(
                {"cut": cut, "nproc": job.layout.nproc, "trace": job.trace}))
        return {**row, "true_slowdown": round(before / after, 2) if before and after else None,
                "line_ratio": float(ratio[1]) if ratio else None,
                "named_after_s": round(took, 1) if took is not None else None,
                "false_alarms": len(lines) - len(named) + len(early),
                "line": named[0] if named else (lines[0] if lines else ""),
                "alarms": early + [ln for ln in lines if ln not in named],
                "work_shares": shares, "hangs": len(_lines(job.out(), "job hung"))}


def soak(name: str, nnodes: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp, Job(Path(tmp), name, nnodes) as job:
        ready = _wait(job, job.reporting, 240)
        row = {"layout": name, "nodes": nnodes, "nproc": job.layout.nproc,
               "node_cpus": round(job.cpus, 2)}
        if ready is None:
            return {**row, "error": "never reported", "tail": job.out()[-1500:]}
        job.agents_out()
        stop = threading.Event()
        if TRACE[0]:
            job.watch_rank0(stop)   # every rank's values, twice a second, for the trace
        started = time.monotonic()
        _wait(job, lambda: False, seconds)
        stop.set()
        if TRACE[0]:
            Path(TRACE[0]).mkdir(parents=True, exist_ok=True)
            Path(TRACE[0], f"soak-{name}-{nnodes}.json").write_text(json.dumps(
                {"cut": started, "nproc": job.layout.nproc, "trace": job.trace}))
        outs = "\n".join(job.out(k) for k in range(nnodes))
        alarms = _lines(outs, " is slow") + _lines(outs, "job hung")
        summary = job.steps() or {}
        return {**row, "seconds": seconds, "alive": job.alive(), "false_alarms": len(alarms),
                "alarms": alarms[:4],
                "ratios": {n["node"]: n.get("ratio") for n in summary.get("nodes", [])}}


def _worker_of(job: Job, node: int) -> int | None:
    """The pid of node ``node``'s (first) worker."""
    return next(iter(workers_of(job.nodes.procs[node].pid)), None)


def hang(name: str, hang_timeout: float, nnodes: int = 2) -> dict:
    with tempfile.TemporaryDirectory() as tmp, \
            Job(Path(tmp), name, nnodes, extra=("--hang-timeout", str(hang_timeout))) as job:
        ready = _wait(job, job.reporting, 240)
        row = {"layout": name, "nodes": nnodes, "hang_timeout": hang_timeout}
        if ready is None:
            return {**row, "error": "never reported", "tail": job.out()[-1500:]}
        time.sleep(5)
        pid = _worker_of(job, 1)
        os.kill(pid, signal.SIGSTOP)
        took = _wait(job, lambda: bool(_lines(job.out(), "job hung")), hang_timeout + 60)
        line = (_lines(job.out(), "job hung") or [""])[0]
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
        return {**row, "named_after_s": round(took, 1) if took is not None else None,
                "names_rank_1": "stuck: rank 1 on node 1 " in line, "line": line}


COST = """
import sys, time, torch, torch.distributed as dist
from meshrun.worker.observe import Observer
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0,
                        world_size=1)
observer, n = Observer(), 2000
observer.sample(dist)
t = time.perf_counter()
for _ in range(n):
    observer.sample(dist)
print(f"{(time.perf_counter() - t) / n * 1e6:.2f}")
dist.destroy_process_group()
"""

# One run, two ranks of a DDP loop with steps of a few ms; the observer's thread (as the
# worker shim starts it: a sample a second) is on and off in turns of BLOCK seconds, the
# steps of each turn counted: with and without, in the same processes.
SAME_RUN = """
import sys, threading, time, torch, torch.distributed as dist
from meshrun.worker.observe import PERIOD_S, Observer
rank, port, blocks, block = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + port, rank=rank, world_size=2)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(3)]))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(32, 128)
on = threading.Event()
observer, samples = Observer(), [0]

def run():
    while True:
        time.sleep(PERIOD_S)
        if on.is_set():
            observer.sample(dist)
            samples[0] += 1

threading.Thread(target=run, daemon=True).start()
for _ in range(50):
    model(x).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
rows = []
for b in range(blocks):
    observing = b % 2 == 0
    on.set() if observing else on.clear()
    flag, steps, t = torch.zeros(1), 0, time.perf_counter()
    while True:
        model(x).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
        steps += 1
        flag[0] = 1.0 if time.perf_counter() - t >= block else 0.0
        dist.all_reduce(flag)            # every rank ends the turn at the same step
        if flag.item() > 0:
            break
    rows.append((observing, (time.perf_counter() - t) / steps * 1000))
if rank == 0:
    import json
    print(json.dumps({"rows": rows, "samples": samples[0]}))
dist.destroy_process_group()
"""


def cost(repeats: int, seconds: float) -> dict:
    from meshrun.harness import free_port

    sample_us = [float(subprocess.run([sys.executable, "-c", COST, str(free_port())],
                                      capture_output=True, text=True, env=clean_env(),
                                      check=True).stdout) for _ in range(3)]
    port, blocks = str(free_port()), 2 * repeats
    procs = [subprocess.Popen([sys.executable, "-c", SAME_RUN, str(r), port, str(blocks),
                               str(seconds)], stdout=subprocess.PIPE, text=True,
                              env=clean_env()) for r in (0, 1)]
    out = [p.communicate(timeout=blocks * seconds + 120)[0] for p in procs][0]
    rows = json.loads(out)["rows"]
    on = [ms for observing, ms in rows if observing]
    off = [ms for observing, ms in rows if not observing]
    med_on, med_off = statistics.median(on), statistics.median(off)
    return {"sample_us": sample_us, "ms_per_step_on": on, "ms_per_step_off": off,
            "median_ms_on": round(med_on, 4), "median_ms_off": round(med_off, 4),
            "overhead_pct": round(100 * (med_on / med_off - 1), 2),
            "samples": json.loads(out)["samples"]}


def markdown(paths: list[str]) -> str:
    """The rows of the JSON files ``paths`` (from ``--json``) as docs/benchmarks.md's tables."""
    rows = [r for p in paths for r in json.loads(Path(p).read_text())]
    out = []
    slow = [r for r in rows if "factor" in r]
    if slow:
        out += ["| layout | nodes x procs | quota cut | true slowdown | ratio in the line | "
                "named after the cut | false alarms |", "|---|---|---|---|---|---|---|"]
        for r in slow:
            named = f"{r['named_after_s']} s" if r.get("named_after_s") is not None else \
                "not named" + (f" ({r['error']})" if r.get("error") else "")
            ratio = f"{r['line_ratio']:.2f}x" if r.get("line_ratio") else "-"
            true = f"{r['true_slowdown']:.2f}x" if r.get("true_slowdown") else "-"
            out.append(f"| {r['layout']} | {r['nodes']} x {r['nproc']} | {r['factor']:g}x | "
                       f"{true} | {ratio} | {named} | {r.get('false_alarms', '-')} |")
    soak = [r for r in rows if "seconds" in r and "factor" not in r]
    if soak:
        out += ["", "| layout | nodes x procs | seconds | false alarms | still running |",
                "|---|---|---|---|---|"]
        out += [f"| {r['layout']} | {r['nodes']} x {r['nproc']} | {r['seconds']:g} | "
                f"{r['false_alarms']} | {r['alive']} |" for r in soak]
    hangs = [r for r in rows if "hang_timeout" in r]
    if hangs:
        out += ["", "| layout | nodes | --hang-timeout | named after the SIGSTOP | line |",
                "|---|---|---|---|---|"]
        out += [f"| {r['layout']} | {r['nodes']} | {r['hang_timeout']:g} s | "
                f"{r.get('named_after_s')} s | `{r.get('line', '')}` |" for r in hangs]
    return "\n".join(out)


def main() -> int:
    # a SIGTERM ends the bench through its clean-ups (the nodes killed, the groups removed):
    # otherwise a killed bench leaves a job training on, under its quotas
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if len(sys.argv) > 2 and sys.argv[1] == "--markdown":
        print(markdown(sys.argv[2:]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("slow", "soak", "hang", "cost"))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--factors", default="2,1.5")
    parser.add_argument("--warm", type=float, default=20)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--hang-timeout", type=float, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shares", type=int, default=65536,
                        help="the job's cpu.shares (2: only what the machine leaves idle)")
    parser.add_argument("--node-share", type=float, default=0.9,
                        help="the part of the host's cores the nodes' quotas add up to")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--trace", metavar="DIR",
                        help="slow, soak: keep every rank's progress values (twice a second) "
                             "there, to replay the rule offline")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable for every job's nodes (MESHRUN_GC_FREEZE=0, ...)")
    a = parser.parse_args()
    TRACE[0] = a.trace
    for pair in a.env:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            sys.exit(f"bench/observe.py: --env {pair!r} is not NAME=VALUE")
        EXTRA_ENV[name] = value
    SHARES[0], NODE_SHARE[0] = a.shares, a.node_share
    why = available()
    if why and a.part != "cost":
        sys.exit(f"bench/observe.py: {why}")
    names = a.layouts.split(",")
    for name in names:
        if name not in LAYOUTS:
            sys.exit(f"bench/observe.py: no layout {name!r}; the layouts: {', '.join(LAYOUTS)}")
    counts = [int(n) for n in a.nodes.split(",")]
    rows: list[dict] = []

    def keep(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=2))

    if a.part == "cost":
        keep(cost(a.repeats, a.seconds or 5))
        return 0
    for name in names:
        for n in counts:
            if n not in LAYOUTS[name].nodes:
                continue
            if a.part == "slow":
                for factor in (float(f) for f in a.factors.split(",")):
                    keep(slow(name, n, factor, a.warm, a.seconds or 75))
            elif a.part == "soak":
                keep(soak(name, n, a.seconds or 300))
            else:
                keep(hang(name, a.hang_timeout, n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
