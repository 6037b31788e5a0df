"""Rank 1 fails the way a CUDA OOM does (the real exception type and message); others wait."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"args: {' '.join(sys.argv[1:])}", flush=True)
if dist.get_rank() == 1:
    raise torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB"
        " of which 1.21 GiB is free. Of the allocated memory 75.3 GiB is allocated by PyTorch")
dist.barrier()
