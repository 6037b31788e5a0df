"""What the worker's frozen import of torch saves (meshrun/worker/frozen.py).

    python bench/import_freeze.py [--repeats 5] [--json out.json]

CPU seconds (user + system, the process and its children) and wall seconds, with and
without, alternating so machine noise hits both alike:

- ``import torch`` alone, and with ``torch._dynamo`` (which every script with a torch
  optimizer imports at its first ``zero_grad()``), in a plain interpreter;
- a 2-node x 2-process ``meshrun simulate`` job of ``examples/train_tiny.py`` with
  ``MESHRUN_GC_FREEZE=1`` (the default: its agents and workers freeze) and ``=0`` (none do).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import clean_env

ROOT = Path(__file__).resolve().parent.parent
FREEZE = "from meshrun.worker import frozen; frozen.install(); "
CASES = {
    "import torch": "import torch",
    "import torch, torch._dynamo": "import torch, torch._dynamo",
}


def measure(argv: list[str], env: dict, cwd: str) -> tuple[float, float]:
    """(CPU seconds of the command and its children, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[:6]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    env = clean_env()
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as cwd:
        commands = {}
        for name, code in CASES.items():
            commands[f"{name} (plain)"] = ([sys.executable, "-c", code], env)
            commands[f"{name} (frozen)"] = ([sys.executable, "-c", FREEZE + code], env)
        job = [sys.executable, "-m", "meshrun", "simulate", "--nodes", "2", "--nproc-per-node",
               "2", "--", str(ROOT / "examples" / "train_tiny.py")]
        commands["2 x 2 simulate job (nothing frozen)"] = (job, {**env, "MESHRUN_GC_FREEZE": "0"})
        commands["2 x 2 simulate job (frozen, the default)"] = (job, {**env, "MESHRUN_GC_FREEZE": "1"})
        for argv, run_env in commands.values():
            measure(argv, run_env, cwd)  # warm the page cache and the bytecode once
        names = list(commands)
        for i in range(args.repeats):
            for name in (names if i % 2 == 0 else names[::-1]):
                runs.setdefault(name, []).append(measure(*commands[name], cwd))
    result = {"repeats": args.repeats, "cpus": os.cpu_count(), "python": sys.version.split()[0],
              "median": {}, "raw": runs}
    print(f"{'':45} {'CPU-s':>7} {'wall s':>7}")
    for name, values in runs.items():
        cpu = statistics.median(v[0] for v in values)
        wall = statistics.median(v[1] for v in values)
        result["median"][name] = {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}
        print(f"{name:45} {cpu:7.2f} {wall:7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
