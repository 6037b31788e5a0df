"""A real run with a slow node and a restart, and its page (issue 22's picture).

    python bench/run_page.py [--png docs/images/run-page.png]

Two `meshrun run` nodes on loopback train the mlp-tp recipe (tp 1, checkpoints every 20
steps, --max-restarts 1), each node's workers in a cgroup of its own held to an equal CPU
quota (root and the cgroup v1 cpu controller). Once both report, node 1's quota is cut 3x
(a slow node, named by the straggler check); once it is named, node 1's worker is
SIGKILLed (a restart: every node's workers resume from the newest checkpoint) and its quota
given back; the job stops after step 5,000 of 20,000. When the job
ends, `meshrun report --html` writes the page; headless Chromium loads it and takes the
screenshot. Prints what the page shows and fails unless it shows both the slow notice and
the restart (the resume on node 0's lane, recovery in the goodput bar).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshrun.harness import CpuQuota, Nodes, browser, clean_env, load_page, own_lines, workers_of
from meshrun.harness import quota_available as available

ROOT = Path(__file__).resolve().parent.parent


def _wait(what, seconds: float, nodes: Nodes) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if what():
            return True
        if any(p.poll() is not None for p in nodes.procs):
            return False
        time.sleep(0.25)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--png", default=str(ROOT / "docs" / "images" / "run-page.png"))
    parser.add_argument("--keep", metavar="DIR", help="keep the run folder there")
    a = parser.parse_args()
    why = available()
    if why:
        sys.exit(f"bench/run_page.py: {why}")
    chrome = browser()
    if chrome is None:
        sys.exit("bench/run_page.py: no headless Chromium (apt-get install "
                 "chromium-headless-shell)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        job = CpuQuota("pagejob", shares=65536)
        groups = [CpuQuota(f"page{k}", cpus=0.9, parent=job) for k in range(2)]
        command = ["--recipe", "mlp-tp", "--set", "parallel.tp=1", "--set", "train.steps=20000",
                   "--set", "train.log_every=20", "--set", "checkpoint.interval=200",
                   "--set", "model.hidden=512"]
        nodes = Nodes(folder, command, nnodes=2, run_id="page", log_dir=folder / "logs",
                      extra=["--max-restarts", "1", "--status-every", "20"],
                      env=clean_env(MESHRUN_STOP_AFTER_STEP="5000"),
                      before_start=lambda k, proc: groups[k].add(proc.pid))
        out0 = folder / "node0.out"
        with job:
            for g in groups:
                g.__enter__()
            try:
                with nodes:
                    steps = folder / "logs" / "page" / "node_steps.json"
                    assert _wait(lambda: steps.exists(), 240, nodes), nodes.outputs()[-3000:]
                    for group, proc in zip(groups, nodes.procs):
                        group.release(proc.pid)      # the quota is the workers' machine
                    time.sleep(20)
                    groups[1].set(0.3)
                    named = _wait(lambda: "is slow" in out0.read_text(), 120, nodes)
                    print(f"slow node named: {named}", flush=True)
                    time.sleep(5)
                    worker = next(iter(workers_of(nodes.procs[1].pid)))
                    os.kill(worker, signal.SIGKILL)
                    print("node 1's worker SIGKILLed", flush=True)
                    time.sleep(3)
                    groups[1].set(0.9)                   # the rest at full speed again
                    codes = nodes.wait(600)
                    print(f"exit codes {codes}", flush=True)
            finally:
                for g in groups:
                    g.__exit__(None, None, None)
        run = folder / "logs" / "page"
        subprocess.run([sys.executable, "-m", "meshrun", "report", "--html", str(run)],
                       check=True)
        dom, said = load_page(chrome, run / "report.html", Path(a.png), height=2900)
        if said:
            print(f"the page logged: {said}")
        data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)'
                                    r'</script>', dom, re.S).group(1).replace("<\\/", "</"))
        kinds = {k: [e["kind"] for e in v] for k, v in data["lanes"].items()}
        g = data["run"].get("goodput") or {}
        print(json.dumps({"lanes": kinds, "goodput": g,
                          "slow_lines": [ln for ln in own_lines(out0.read_text())
                                         if " is slow: " in ln]}, indent=1))
        print(f"screenshot: {a.png}")
        shows_both = "slow" in kinds.get("0", []) and "resumed" in kinds.get("0", []) \
            and g.get("recovery_s", 0) > 0
        print(f"the page shows the slow node and the restart: {shows_both}")
        return 0 if shows_both else 1


if __name__ == "__main__":
    raise SystemExit(main())
