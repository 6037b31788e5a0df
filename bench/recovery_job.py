"""The fixed-work training job of bench/recovery.py: a plain torch.distributed script (gloo),
the same under `meshrun run` and under torchrun, nothing of meshrun imported.

Each step all-reduces a small gradient (1,024 floats, a function of the step and the rank)
and sleeps ``RECOVERY_SLEEP_S`` (0.2 s: the GPU's time, which two CPU cores must not
distort), then updates the replicated weights ``w`` the same way on every rank. Every
``RECOVERY_CKPT`` steps rank 0 writes ``w`` and the step to ``RECOVERY_DIR/ckpt.pt``
(atomically); a (re)started job resumes from it. Rank 0 appends one line per completed step
to ``RECOVERY_DIR/steps.jsonl``: the step, the wall time, the world size.

The gradient of rank r at step s is the same whatever the world size and exact to sum, and
the update is the mean over the ranks: a run on a world gives the ``w`` of
:func:`expected` bit for bit, however often it resumed; a run that changed its world does
not (reported, not hidden).
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def gradient(step: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s gradient at ``step``: multiples of 1/1024 below 1 in size, so that any
    sum of a few of them is exact in float64 and the all-reduce's order cannot change a bit:
    the final weights of a world are known without running it (bench/recovery.py)."""
    gen = torch.Generator().manual_seed(step * 100_003 + rank)
    return torch.randint(-1023, 1024, (1024,), generator=gen).to(torch.float64) / 1024


def expected(steps: int, world: int) -> torch.Tensor:
    """The weights a run of ``steps`` steps on ``world`` ranks ends with, however it went."""
    w = torch.zeros(1024, dtype=torch.float64)
    for step in range(1, steps + 1):
        w -= 0.01 * sum(gradient(step, r) for r in range(world)) / world
    return w


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
        grad = gradient(step, rank)
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
