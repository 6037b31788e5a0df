"""Fails with exit code 7 on the rank given as argv[1]; the others wait at a barrier."""

import sys

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == int(sys.argv[1]):
    print("about to fail", flush=True)
    raise SystemExit(7)
dist.barrier()
