"""Prints argv[1] lines of 200 characters, an all-reduce every 50, then leaves a marker
file ``done.rank<r>`` in the working folder: training that logs a lot."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.zeros(1)
for i in range(int(sys.argv[1])):
    print(f"rank {rank} line {i:05d} " + "x" * 180, flush=True)
    if i % 50 == 0:
        dist.all_reduce(total)
print("rank", rank, "finished", file=sys.stderr, flush=True)
with open(f"done.rank{rank}", "w") as handle:
    handle.write("ok\n")
