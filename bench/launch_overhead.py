"""Start-up cost of meshrun against plain torchrun, and `meshrun plan` latency.

    python bench/launch_overhead.py [--repeats 10] [--nproc 2] [--json out.json]

Runs the same tiny script (process group + one all-reduce) under
``torchrun --standalone --nproc-per-node N`` and ``meshrun run --nproc-per-node N``,
alternating the two so that machine noise hits both alike, and reports median
wall times; then times ``meshrun plan`` (which must not import torch).
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

from meshrun.harness import clean_env

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "integration" / "scripts" / "report.py"


def wall(argv: list[str], env: dict, cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    env = clean_env()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(args.nproc), str(SCRIPT)]
    meshrun = [sys.executable, "-m", "meshrun", "run", "--nproc-per-node", str(args.nproc),
               "--", str(SCRIPT)]
    plan = [sys.executable, "-m", "meshrun", "plan"]
    times: dict[str, list[float]] = {"torchrun": [], "meshrun": [], "plan": []}
    with tempfile.TemporaryDirectory() as cwd:
        wall(torchrun, env, cwd)  # warm the page cache once
        wall(meshrun, env, cwd)
        for i in range(args.repeats):
            order = (("torchrun", torchrun), ("meshrun", meshrun))
            for name, argv in (order if i % 2 == 0 else order[::-1]):
                times[name].append(wall(argv, env, cwd))
        for _ in range(max(20, args.repeats)):
            times["plan"].append(wall(plan, env, cwd))
    med = {name: statistics.median(values) for name, values in times.items()}
    overhead = (med["meshrun"] - med["torchrun"]) / med["torchrun"] * 100
    # Each meshrun run against the torchrun run next to it: robust to slow drifts.
    paired = statistics.median((m - t) / t * 100 for m, t in zip(times["meshrun"], times["torchrun"]))
    result = {"repeats": args.repeats, "nproc": args.nproc, "median_s": med,
              "min_s": {n: min(v) for n, v in times.items()},
              "overhead_percent": overhead, "paired_overhead_percent": paired,
              "cpus": os.cpu_count(), "raw_s": times}
    print(f"torchrun --standalone : median {med['torchrun']:.3f} s  (min {min(times['torchrun']):.3f})")
    print(f"meshrun run           : median {med['meshrun']:.3f} s  (min {min(times['meshrun']):.3f})")
    print(f"overhead              : {overhead:+.1f} % of the medians, {paired:+.1f} % median of pairs")
    print(f"meshrun plan          : median {med['plan'] * 1000:.0f} ms over {len(times['plan'])} runs")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
