"""Many simulated nodes on one machine: meshrun against torchrun's static rendezvous.

    python bench/simulate_scale.py [--nodes 16,32,64] [--json out.json] [--cap 900]

For each node count N, on a script that forms the process group and all-reduces once
(every rank must see the sum over N ranks, else the run counts as failed):

- ``meshrun simulate --nodes N --nproc-per-node 1 -- allreduce.py`` (join, preflight,
  meshrun's rank-pinned rendezvous, the watchdogs, torch's elastic agent);
- N × ``torchrun --nnodes N --node-rank i --nproc-per-node 1 --master-addr 127.0.0.1
  --master-port P allreduce.py`` (torchrun's default static rendezvous, the seeds'
  command), started together.

Reports each one's wall time, from starting the launchers to the last exit. All 2 N Python processes (N agents, N workers, each
importing torch, ~2 s of CPU each) share this machine's cores, so the wall time is mostly
that import cost; a real cluster has one agent per machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from meshrun.harness import clean_env, free_port

SCRIPT = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert int(t.item()) == dist.get_world_size(), t
if dist.get_rank() == 0:
    print(f"world {dist.get_world_size()} sum {int(t.item())}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def meshrun(nodes: int, cwd: str, env: dict, cap: float) -> tuple[float, bool, str]:
    argv = [sys.executable, "-m", "meshrun", "simulate", "--nodes", str(nodes),
            "--nproc-per-node", "1", "--join-timeout", str(int(cap)), "--", "allreduce.py"]
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=cap)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, False, "timed out"
    took = time.perf_counter() - start
    ok = done.returncode == 0 and f"world {nodes} sum {nodes}" in done.stdout
    return took, ok, "" if ok else (done.stdout[-1500:] + done.stderr[-1500:])


def torchrun(nodes: int, cwd: str, env: dict, cap: float) -> tuple[float, bool, str]:
    port = free_port()
    start = time.perf_counter()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
         "--node-rank", str(i), "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
         "--master-port", str(port), "allreduce.py"],
        cwd=cwd, env={**env, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for i in range(nodes)]
    outs, codes = [], []
    deadline = start + cap
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, 9)
                except OSError:
                    pass
            return time.perf_counter() - start, False, "timed out"
        outs.append(out)
        codes.append(p.returncode)
    took = time.perf_counter() - start
    ok = all(c == 0 for c in codes) and f"world {nodes} sum {nodes}" in outs[0]
    return took, ok, "" if ok else "\n".join(o[-800:] for o in outs[:2])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="16,32,64")
    parser.add_argument("--cap", type=float, default=900.0)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    env = clean_env()
    rows = []
    with tempfile.TemporaryDirectory() as cwd:
        with open(os.path.join(cwd, "allreduce.py"), "w") as handle:
            handle.write(SCRIPT)
        for nodes in [int(n) for n in args.nodes.split(",")]:
            row: dict = {"nodes": nodes}
            for name, runner in (("meshrun", meshrun), ("torchrun", torchrun)):
                took, ok, why = runner(nodes, cwd, env, args.cap)
                row[f"{name}_s"], row[f"{name}_ok"] = round(took, 1), ok
                print(f"nodes {nodes:>3}: {name:<8} {took:6.1f} s {'ok' if ok else 'FAILED'}",
                      flush=True)
                if not ok:
                    print(why, flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"machine": f"{os.cpu_count()} cores", "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
