"""How long ``meshrun plan`` takes, for one or more source trees, in the same run.

    python bench/plan_latency.py [--repeats 20] [--tree SRC_DIR ...] [--json out.json]

Each ``--tree`` is a folder holding the ``meshrun`` package (``src`` of a checkout; default:
this checkout's). The trees are timed in turn, round by round, so that the machine's noise
falls on all of them alike: wall time of ``python -m meshrun plan --nnodes 2 --node-rank 1
--master-addr 127.0.0.1 -- train.py`` with ``PYTHONPATH=<tree>``; median and minimum. Also
checks, per tree, that the planning process never imported torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from meshrun.harness import clean_env

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["plan", "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--",
        "train.py"]
NO_TORCH = ("import sys, runpy; sys.argv = ['meshrun', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('meshrun', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'meshrun plan imported torch'\n")


def env_for(tree: str) -> dict:
    return clean_env(PYTHONPATH=tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--tree", action="append", default=[])
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    trees = args.tree or [str(ROOT / "src")]
    times: dict[str, list[float]] = {t: [] for t in trees}
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", tree], check=True)
        subprocess.run([sys.executable, "-c", NO_TORCH, *ARGS], env=env_for(tree), check=True,
                       stdout=subprocess.DEVNULL)
    for _ in range(args.repeats):
        for tree in trees:
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "meshrun", *ARGS], env=env_for(tree),
                           check=True, stdout=subprocess.DEVNULL)
            times[tree].append(time.perf_counter() - started)
    for tree, runs in times.items():
        print(f"{tree}: median {statistics.median(runs) * 1000:.0f} ms, "
              f"min {min(runs) * 1000:.0f} ms over {len(runs)} runs (no torch imported)")
    if args.json:
        Path(args.json).write_text(json.dumps(times, indent=2))


if __name__ == "__main__":
    main()
