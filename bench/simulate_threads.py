"""Does ``meshrun simulate`` oversubscribe the host? An HF Trainer run, three ways.

    python bench/simulate_threads.py [--repeats 3] [--json out.json]

The script is tests/integration/user_scripts/hf_trainer_gpt2.py (a tiny GPT-2, 8 steps,
a checkpoint, a resumed second run), on 2 nodes x 1 worker on this host:

* ``torchrun``: two ``torch.distributed.run --nnodes 2`` agents (one worker each; torchrun
  leaves OMP_NUM_THREADS alone with one worker per node);
* ``simulate``: ``meshrun simulate --nodes 2 --nproc-per-node 1`` as it is now: each worker
  gets ``max(1, cpus // 2)`` threads;
* ``simulate, every core``: the same with ``OMP_NUM_THREADS=<cpus>`` set, which meshrun
  keeps: every worker on every core, which is what simulate did before.

Reported: wall seconds from start until every launcher exited, median over ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import clean_env, free_port

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "integration" / "user_scripts" / "hf_trainer_gpt2.py"


def one(kind: str, cpus: int) -> float:
    py = sys.executable
    env = clean_env(PYTHONPATH=str(ROOT / "src"))
    if kind == "simulate, every core":
        env["OMP_NUM_THREADS"] = str(cpus)
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "torchrun":
            port = str(free_port())
            argvs = [[py, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(n),
                      "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
                      port, str(SCRIPT), "out"] for n in range(2)]
        else:
            argvs = [[py, "-m", "meshrun", "simulate", "--nodes", "2", "--nproc-per-node", "1",
                      "--", str(SCRIPT), "out"]]
        started = time.monotonic()
        procs = [subprocess.Popen(a, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for a in argvs]
        codes = [p.wait(timeout=600) for p in procs]
        took = time.monotonic() - started
    if any(codes):
        print(f"  ({kind}: exit codes {codes}; counted anyway)", flush=True)
    return round(took, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    results = {}
    print(f"{cpus} CPUs; HF Trainer script, 2 nodes x 1 worker", flush=True)
    for kind in ("torchrun", "simulate", "simulate, every core"):
        runs = [one(kind, cpus) for _ in range(args.repeats)]
        results[kind] = runs
        print(f"{kind:22} median {statistics.median(runs):6.2f} s  runs {runs}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": cpus, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
