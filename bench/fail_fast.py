"""How long a job whose every node failed takes to end: meshrun against torchrun.

    python bench/fail_fast.py [--repeats 5] [--json out.json]

The script (``tests/integration/scripts/fail_at_once.py``) raises on every rank at once,
after writing the time it failed. Launchers, two nodes of one worker on loopback:

* ``torchrun``: two ``torch.distributed.run --nnodes 2 --node-rank R`` (static rendezvous);
* ``meshrun run``: two ``meshrun run --nnodes 2 --node-rank R`` (preflight on, defaults);
* ``meshrun simulate``: ``meshrun simulate --nodes 2 --nproc-per-node 1``.

Reported, median over ``--repeats`` (each run fresh): ``wall`` = seconds from starting the
launchers until the last of them exited; ``after`` = seconds from the last rank's failure
(its stamp) until the last launcher exited: the time the launcher adds once everything has
failed. Also each launcher's exit codes, and whether meshrun's output still gives the
one-line report (``rank R on node K ... exited with code 1`` and the first error).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import clean_env, free_port

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "integration" / "scripts" / "fail_at_once.py"


def commands(launcher: str, port: int) -> list[list[str]]:
    py = sys.executable
    if launcher == "simulate":
        return [[py, "-m", "meshrun", "simulate", "--nodes", "2", "--nproc-per-node", "1",
                 "--master-port", str(port), "--run-id", "failfast", "--", str(SCRIPT)]]
    out = []
    for node in range(2):
        if launcher == "torchrun":
            out.append([py, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
                        str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
                        "--nproc-per-node", "1", str(SCRIPT)])
        else:
            out.append([py, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank", str(node),
                        "--master-addr", "127.0.0.1", "--master-port", str(port),
                        "--nproc-per-node", "1", "--run-id", "failfast", "--", str(SCRIPT)])
    return out


def one(launcher: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        stamps = Path(tmp) / "stamps"
        stamps.mkdir()
        env = clean_env(FAIL_STAMPS=str(stamps), PYTHONPATH=str(ROOT / "src"))
        started = time.time()
        procs = [subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
                 for argv in commands(launcher, free_port())]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        ended = time.time()
        failed_at = max(float(f.read_text()) for f in stamps.iterdir())
        out = "\n".join(outs)
        return {"wall": round(ended - started, 2), "after": round(ended - failed_at, 2),
                "codes": [p.returncode for p in procs],
                "reported": launcher == "torchrun" or (
                    "exited with code 1" in out and "first error" in out
                    and "fails at once, on purpose" in out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    results = {}
    print(f"{'launcher':10} {'wall s':>8} {'after s':>8}  codes        reported", flush=True)
    for launcher in ("torchrun", "run", "simulate"):
        runs = [one(launcher) for _ in range(args.repeats)]
        results[launcher] = runs
        wall = statistics.median(r["wall"] for r in runs)
        after = statistics.median(r["after"] for r in runs)
        print(f"{launcher:10} {wall:8.2f} {after:8.2f}  {str(runs[0]['codes']):12} "
              f"{all(r['reported'] for r in runs)}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
