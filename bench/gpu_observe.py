"""The observer on NCCL (issue 19), for a machine with one GPU: what meshrun.worker.observe
reads of a real NCCL process group, and what it costs.

    PYTHONPATH=src python3 bench/gpu_observe.py [--out DIR] [--steps 400] [--repeats 3]
    PYTHONPATH=src python3 bench/gpu_observe.py two [SECONDS]   # two ranks on the one GPU

One GPU holds one NCCL rank (NCCL refuses two ranks on one device), so the job is one node
of one worker, ``meshrun run`` as users start it. The worker script (``WORKER`` below, a
DDP model on the GPU: every step's gradient all-reduce issued by DDP from C++) trains, then
reads its own progress value from the job's store and prints it. Reported: whether
TORCH_NCCL_ENABLE_TIMING reached the worker, whether the completion hook was registered, the
collectives counted against the steps taken, the share of time working the hook's timings
gave, and the step time with the observer on and off (MESHRUN_OBSERVE=0), alternated three
times, same machine, same run.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r'''
import json, os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)
width, steps = 4096, int(sys.argv[1])
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)]).cuda())
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(256, width, device="cuda")
for warm in range(20):
    model(x).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
t = time.perf_counter()
for step in range(steps):
    model(x).square().mean().backward(); opt.step(); opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
per = (time.perf_counter() - t) / steps
time.sleep(2.5)   # two of the observer's samples after the last step, one report
from datetime import timedelta
from torch.distributed import TCPStore
host, port = os.environ["MESHRUN_STORE"].rsplit(":", 1)
store = TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=5),
                 wait_for_workers=False)
value = store.get(f"meshrun/progress/{dist.get_rank()}").decode()
seq = dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
print("OBSERVE " + json.dumps({"ms_per_step": per * 1000, "progress": value, "seq": seq,
      "steps": steps + 20, "timing": os.environ.get("TORCH_NCCL_ENABLE_TIMING"),
      "observe": os.environ.get("MESHRUN_OBSERVE", "1")}), flush=True)
dist.destroy_process_group()
'''


def run(folder: Path, steps: int, observe: bool, timing: bool = False) -> dict:
    script = folder / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"),
                                                    env.get("PYTHONPATH", "")) if p)
    if not observe:
        env["MESHRUN_OBSERVE"] = "0"
    if timing:   # NCCL's timing events alone, no hook: which part costs
        env["TORCH_NCCL_ENABLE_TIMING"] = "1"
    done = subprocess.run([sys.executable, "-m", "meshrun", "run", "--nproc-per-node", "1",
                           "--log-dir", str(folder / "logs"), "--", str(script), str(steps)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=240)
    m = re.search(r"OBSERVE (\{.*\})", done.stdout + done.stderr)
    if not m:
        return {"observe": observe, "exit": done.returncode,
                "tail": (done.stdout + done.stderr)[-2000:]}
    row = json.loads(m[1])
    fields = row["progress"].split()
    row.update(exit=done.returncode, coll=int(fields[5]) if len(fields) >= 8 else None,
               work=float(fields[6]) if len(fields) >= 8 else None)
    row["variant"] = "on" if observe else "timing only" if timing else "off"
    return row


TWO = r'''
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(0)
rank, seconds = dist.get_rank(), float(sys.argv[1])
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).cuda())
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(128, 2048, device="cuda")
started, step = time.monotonic(), 0
while True:
    step += 1
    loss = model(x).square().mean()
    if rank == 1:
        torch.cuda._sleep(20_000_000)    # ~10-20 ms more device work a step on rank 1
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    flag = torch.tensor([1.0 if time.monotonic() - started >= seconds else 0.0], device="cuda")
    dist.all_reduce(flag)
    if flag.item() > 0:
        break
if rank == 0:
    print(f"TWO steps {step} in {time.monotonic() - started:.1f} s", flush=True)
dist.destroy_process_group()
'''


def two(folder: Path, seconds: float) -> dict:
    """Two `meshrun run` nodes of one rank each on the one GPU (each node its own
    NCCL_HOSTID, so NCCL connects them through its socket transport), rank 1 with extra
    device work each step, MESHRUN_OBSERVE=timing, the slow-node window at 10 s: is node 1
    named by its share of time working?"""
    import socket

    script = folder / "two.py"
    script.write_text(TWO)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = []
    for node in (0, 1):
        env = dict(os.environ, MESHRUN_OBSERVE="timing", NCCL_HOSTID=f"meshrun-sim-{node}",
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"),
                                                          os.environ.get("PYTHONPATH", "")) if p))
        out = open(folder / f"node{node}.out", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank", str(node),
             "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "two",
             "--nproc-per-node", "1", "--no-preflight", "--slow-window", "10",
             "--log-dir", str(folder / "logs"), "--", str(script), str(seconds)],
            cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=seconds + 120))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(None)
    outs = [(folder / f"node{n}.out").read_text(errors="replace") for n in (0, 1)]
    slow = [ln for ln in outs[0].splitlines() if " is slow: " in ln]
    try:
        steps = json.loads(next((folder / "logs").rglob("node_steps.json")).read_text())
    except (StopIteration, OSError, ValueError):
        steps = None
    return {"exit": codes, "slow_lines": slow,
            "steps": next((ln for ln in outs[0].splitlines() if "TWO steps" in ln), ""),
            "node_steps": steps, "tail0": outs[0][-1500:] if not slow else "",
            "tail1": outs[1][-800:] if not slow else ""}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "two":
        out = Path(os.environ.get("OUT", "."))
        with tempfile.TemporaryDirectory() as tmp:
            row = two(Path(tmp), float(sys.argv[2]) if len(sys.argv) > 2 else 40)
        Path(out, "gpu_observe_two.json").write_text(json.dumps(row, indent=2))
        print(json.dumps(row, indent=1), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    a = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(a.repeats):
            for observe, timing in ((True, False), (False, False), (False, True)):
                folder = Path(tmp) / f"{repeat}-{observe}-{timing}"
                folder.mkdir()
                rows.append({"repeat": repeat, **run(folder, a.steps, observe, timing)})
                print(json.dumps(rows[-1]), flush=True)

    def ms(variant: str) -> list[float]:
        return [r["ms_per_step"] for r in rows if r.get("variant") == variant
                and "ms_per_step" in r]

    on, off, timed = ms("on"), ms("off"), ms("timing only")
    summary = {"rows": rows,
               "median_ms_on": statistics.median(on) if on else None,
               "median_ms_off": statistics.median(off) if off else None,
               "median_ms_timing_only": statistics.median(timed) if timed else None}
    if on and off:
        summary["overhead_pct"] = round(100 * (summary["median_ms_on"] / summary["median_ms_off"]
                                               - 1), 2)
    Path(a.out, "gpu_observe.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
