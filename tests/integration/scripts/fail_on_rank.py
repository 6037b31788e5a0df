"""Fails with exit code 7 on the rank given as argv[1] (with argv[2] == "raise": raises
ValueError, exit 1); the others wait at a barrier, or with argv[2] == "sleep", sleep 120 s
outside any collective (nothing tells them)."""

import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == int(sys.argv[1]):
    print("about to fail", flush=True)
    if sys.argv[2:] == ["raise"]:
        raise ValueError("bad batch at step 10")
    raise SystemExit(7)
if sys.argv[2:] == ["sleep"]:
    time.sleep(120)
dist.barrier()
