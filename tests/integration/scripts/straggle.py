"""A small DDP job on CPU for the straggler tests and bench/stragglers.py: each step does a
fixed amount of forward work, marks its arrival (meshrun.arrive) before the backward that
carries DDP's all-reduce, and reports its step (meshrun.progress). It runs until
STRAGGLE_SECONDS have passed on rank 0 or the file STRAGGLE_STOP exists (every rank agrees
through one all-reduce a step, after the step's progress report)."""

import os
import time

import torch
import torch.distributed as dist

import meshrun

torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
width = int(os.environ.get("STRAGGLE_WIDTH", "384"))
layers = [torch.nn.Linear(width, width) for _ in range(4)]
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(128, width)
seconds = float(os.environ.get("STRAGGLE_SECONDS", "60"))
stop_file = os.environ.get("STRAGGLE_STOP", "")
repeats = int(os.environ.get("STRAGGLE_REPEATS", "4"))
started = time.monotonic()
step = 0
while True:
    step += 1
    out = x
    for _ in range(repeats):          # the step's own work: forward passes (no collective)
        with torch.no_grad():
            out = model.module(x)
    loss = model(x).square().mean()
    meshrun.arrive()
    loss.backward()                    # DDP's gradient all-reduce: every rank waits here
    opt.step()
    opt.zero_grad(set_to_none=True)
    meshrun.progress(step)
    if step == 1 and dist.get_rank() == 0:
        print("straggle: first step done", flush=True)
    done = time.monotonic() - started >= seconds or (stop_file and os.path.exists(stop_file))
    flag = torch.tensor([1.0 if done else 0.0])
    dist.all_reduce(flag)
    if flag.item() > 0:
        break
if dist.get_rank() == 0:
    print(f"straggle: {step} steps in {time.monotonic() - started:.1f} s", flush=True)
meshrun.destroy_process_group()  # with every rank: no exit race
