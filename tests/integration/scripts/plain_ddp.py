"""A user's plain DDP script: nothing of meshrun's imported or called. Each step does a fixed
amount of forward work, then a backward whose gradient all-reduce DDP issues from C++.

PLAIN_SECONDS: run this long (rank 0's clock; every rank agrees through one all-reduce a
step), default 60. PLAIN_HANG_RANK / PLAIN_HANG_AT: that rank sleeps for good at that step
(in Python, outside any collective). PLAIN_WIDTH / PLAIN_REPEATS: the work of a step."""

import os
import time

import torch
import torch.distributed as dist

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
width = int(os.environ.get("PLAIN_WIDTH", "256"))
repeats = int(os.environ.get("PLAIN_REPEATS", "4"))
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)]))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(64, width)
seconds = float(os.environ.get("PLAIN_SECONDS", "60"))
hang_rank = int(os.environ.get("PLAIN_HANG_RANK", "-1"))
hang_at = int(os.environ.get("PLAIN_HANG_AT", "-1"))
started = time.monotonic()
step = 0
while True:
    step += 1
    if dist.get_rank() == hang_rank and step == hang_at:
        print(f"plain: rank {hang_rank} stops at step {step}", flush=True)
        while True:
            time.sleep(3600)
    with torch.no_grad():
        for _ in range(repeats):
            model.module(x)
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step == 1 and dist.get_rank() == 0:
        print("plain: first step done", flush=True)
    flag = torch.tensor([1.0 if time.monotonic() - started >= seconds else 0.0])
    dist.all_reduce(flag)
    if flag.item() > 0:
        break
if dist.get_rank() == 0:
    print(f"plain: {step} steps in {time.monotonic() - started:.1f} s", flush=True)
dist.destroy_process_group()
