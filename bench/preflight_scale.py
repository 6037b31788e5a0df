"""What the cross-node preflight adds to a launch, and how it grows with the node count.

    python bench/preflight_scale.py [--nodes 2,4,8,16,32] [--repeats 3] [--json out.json]

For each node count N, runs ``meshrun simulate --nodes N --nproc-per-node 1`` on a
script that imports nothing (so the workers cost little and the agents' own work
dominates), alternately with and without ``--no-preflight``, and reports:

- node 0's preflight time as meshrun prints it ("preflight: ... (X s)"): from
  computing its fingerprint to the verdict every node has read;
- the whole run's wall time with and without preflight (medians) and the
  difference.

All N agents share this machine's cores, so at large N the numbers include CPU
contention that real clusters (one agent per machine) do not have.
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

from meshrun.harness import clean_env

TRIVIAL = "print('ok')\n"


def one(nodes: int, preflight: bool, cwd: str, env: dict) -> tuple[float, float | None]:
    argv = [sys.executable, "-m", "meshrun", "simulate", "--nodes", str(nodes),
            "--nproc-per-node", "1", "--join-timeout", "600"]
    if not preflight:
        argv.append("--no-preflight")
    argv += ["--", "trivial.py"]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"N={nodes} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-2000:]}")
    found = re.search(r"\[node 0\] meshrun: preflight: .*\(([\d.]+) s\)", done.stdout)
    return took, float(found.group(1)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="2,4,8,16,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    env = clean_env()
    rows = []
    with tempfile.TemporaryDirectory() as cwd:
        with open(os.path.join(cwd, "trivial.py"), "w") as handle:
            handle.write(TRIVIAL)
        for nodes in [int(n) for n in args.nodes.split(",")]:
            with_pf, without, inside = [], [], []
            for i in range(args.repeats):
                for preflight in ((True, False) if i % 2 == 0 else (False, True)):
                    took, pf = one(nodes, preflight, cwd, env)
                    (with_pf if preflight else without).append(took)
                    if pf is not None:
                        inside.append(pf)
            row = {"nodes": nodes, "preflight_s": statistics.median(inside),
                   "wall_with_s": statistics.median(with_pf),
                   "wall_without_s": statistics.median(without)}
            row["added_s"] = row["wall_with_s"] - row["wall_without_s"]
            rows.append(row)
            print(f"nodes {nodes:>3}: preflight (node 0) {row['preflight_s']:.2f} s; run "
                  f"{row['wall_with_s']:.1f} s with, {row['wall_without_s']:.1f} s without "
                  f"({row['added_s']:+.2f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"repeats": args.repeats, "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
