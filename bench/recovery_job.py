"""The fixed-work training job of bench/recovery.py: a plain torch.distributed script (gloo),
the same under `meshrun run` and under torchrun, nothing of meshrun imported.

Each step all-reduces a small gradient (1,024 floats, a function of the step and the rank)
and sleeps ``RECOVERY_SLEEP_S`` (0.2 s: the GPU's time, which two CPU cores must not
distort), then updates the replicated weights ``w`` the same way on every rank. Every
``RECOVERY_CKPT`` steps rank 0 writes ``w`` and the step to ``RECOVERY_DIR/ckpt.pt``
(atomically); a (re)started job resumes from it. Rank 0 appends one line per completed step
to ``RECOVERY_DIR/steps.jsonl``: the step, the wall time, the world size.

The gradient of rank r at step s is the same whatever the world size, and the update is the
mean over the ranks: a run on the same world gives the same ``w`` bit for bit, however often
it resumed; a run on another world does not (reported, not hidden).
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    folder = os.environ["RECOVERY_DIR"]
    steps = int(os.environ.get("RECOVERY_STEPS", "1000"))
    every = int(os.environ.get("RECOVERY_CKPT", "25"))
    pause = float(os.environ.get("RECOVERY_SLEEP_S", "0.2"))
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    path = os.path.join(folder, "ckpt.pt")
    start, w = 0, torch.zeros(1024, dtype=torch.float64)
    if os.path.exists(path):
        saved = torch.load(path)
        start, w = saved["step"], saved["w"]
    log = open(os.path.join(folder, "steps.jsonl"), "a", buffering=1) if rank == 0 else None
    for step in range(start + 1, steps + 1):
        gen = torch.Generator().manual_seed(step * 100_003 + rank)
        grad = torch.randn(1024, dtype=torch.float64, generator=gen)
        dist.all_reduce(grad)
        time.sleep(pause)
        w -= 0.01 * grad / world
        if log is not None:
            log.write(json.dumps({"step": step, "t": time.time(), "world": world}) + "\n")
        if rank == 0 and step % every == 0:
            torch.save({"step": step, "w": w}, path + ".tmp")
            os.replace(path + ".tmp", path)
    if rank == 0:
        torch.save({"step": steps, "w": w}, os.path.join(folder, "final.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
