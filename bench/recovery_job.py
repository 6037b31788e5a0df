"""The fixed-work training job of bench/recovery.py: a plain torch.distributed script (gloo),
the same under `meshrun run` and under torchrun, nothing of meshrun imported.

Each step has a global batch of ``SAMPLES`` (12) samples, whatever the world size (12 is a
multiple of 3 and 4: a job that shrinks keeps its batch); rank r of a world of W takes
samples r, r + W, ... . Each sample's gradient (1,024 floats) is a function of the step and
the sample alone; a step all-reduces the ranks' sums and sleeps ``RECOVERY_SLEEP_S`` (0.2 s:
the GPU's time, which two CPU cores must not distort), then updates the replicated weights
``w`` with the mean over the 12 samples, the same way on every rank. Each rank appends the
samples it trained at each step to ``RECOVERY_DIR/samples.jsonl``. Every
``RECOVERY_CKPT`` steps rank 0 writes ``w`` and the step to ``RECOVERY_DIR/ckpt.pt``
(atomically); a (re)started job resumes from it. Rank 0 appends one line per completed step
to ``RECOVERY_DIR/steps.jsonl``: the step, the wall time, the world size.

A sample's gradient is exact to sum, so a step's sum is the same bits in every world and
every order: a run gives the ``w`` of :func:`expected` bit for bit however often it
resumed and whatever worlds it trained in, exactly when every step's 12 samples were each
counted once.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

SAMPLES = 12   # a step's global batch


def gradient(step: int, sample: int) -> torch.Tensor:
    """Sample ``sample``'s gradient at ``step``: multiples of 1/1024 below 1 in size, so that
    any sum of a few of them is exact in float64 and the all-reduce's order cannot change a
    bit: the final weights are known without running it (bench/recovery.py)."""
    gen = torch.Generator().manual_seed(step * 100_003 + sample)
    return torch.randint(-1023, 1024, (1024,), generator=gen).to(torch.float64) / 1024


def mine(rank: int, world: int) -> range:
    """The samples rank ``rank`` of a world of ``world`` trains at each step."""
    return range(rank, SAMPLES, world)


def expected(steps: int) -> torch.Tensor:
    """The weights a run of ``steps`` steps ends with, however it went, if every step's
    samples were each counted once."""
    w = torch.zeros(1024, dtype=torch.float64)
    for step in range(1, steps + 1):
        w -= 0.01 * sum(gradient(step, i) for i in range(SAMPLES)) / SAMPLES
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
    samples = open(os.path.join(folder, "samples.jsonl"), "a", buffering=1)
    for step in range(start + 1, steps + 1):
        grad = torch.zeros(1024, dtype=torch.float64)
        for i in mine(rank, world):
            grad += gradient(step, i)
        dist.all_reduce(grad)
        time.sleep(pause)
        w -= 0.01 * grad / SAMPLES
        samples.write(json.dumps({"step": step, "t": time.time(), "world": world,
                                  "rank": rank, "samples": list(mine(rank, world))}) + "\n")
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
