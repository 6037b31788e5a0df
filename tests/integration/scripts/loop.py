"""A long-running worker for failure tests: all-reduce in a loop, report progress, write its pid.

Env: LOOP_DIR (pid files go there as pid.<rank>), LOOP_STEPS (default 100000),
HANG_RANK / HANG_AT_STEP (that rank sleeps forever at that step, in Python), LOOP_LOG=1
(each step through meshrun.log, which writes metrics.jsonl with the step's time, rather than
meshrun.progress).
"""

import os
import time

import torch
import torch.distributed as dist

import meshrun

dist.init_process_group("gloo")
rank = dist.get_rank()
folder = os.environ["LOOP_DIR"]
with open(os.path.join(folder, f"pid.{rank}"), "w") as handle:
    handle.write(str(os.getpid()))
hang_rank = int(os.environ.get("HANG_RANK", "-1"))
hang_at = int(os.environ.get("HANG_AT_STEP", "-1"))
value = torch.ones(1)
for step in range(int(os.environ.get("LOOP_STEPS", "100000"))):
    if rank == hang_rank and step == hang_at:
        print(f"rank {rank} hanging at step {step}", flush=True)
        time.sleep(3600)
    dist.all_reduce(value)
    if os.environ.get("LOOP_LOG") == "1":
        meshrun.log(step=step)
    else:
        meshrun.progress(step)
    time.sleep(0.05)
meshrun.destroy_process_group()  # with every rank: no exit race
