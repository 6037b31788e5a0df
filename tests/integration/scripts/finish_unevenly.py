"""Rank 0 finishes at once; every other rank sleeps argv[1] seconds outside any collective,
then finishes. Node 0's agent waits in torch's exit barrier for the others' agents."""

import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    print("rank 0 done", flush=True)
else:
    time.sleep(float(sys.argv[1]))
