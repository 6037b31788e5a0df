"""A user's own loop that records its figures with ``meshrun.log``: 8 steps, an all-reduce
each. With argv[1] == "kill": rank 1 SIGKILLs itself after step 4 (no traceback, no failure
record of its own: the way the host's OOM killer ends a rank)."""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import meshrun

dist.init_process_group("gloo")
for step in range(1, 9):
    started = time.perf_counter()
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(0.02)
    meshrun.log({"loss": 1.0 / step, "samples_per_s": 4 / (time.perf_counter() - started)},
                step=step)
    if sys.argv[1:] == ["kill"] and step == 4 and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
dist.destroy_process_group()
