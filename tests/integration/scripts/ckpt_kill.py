"""Train a small FSDP2 model and save DCP checkpoints with meshrun.worker.checkpoint; optionally die
in the middle of a save.

Env: CKPT_DIR (the checkpoint folder), STEPS (train to this step), SAVE_AT (comma-separated
steps to save at), KILL_AT_SAVE=N (rank 1 SIGKILLs itself as soon as the first shard file
of step-N appears: rank 0 writes step-N/.metadata only after every rank's shards are down, so
it never does). Resumes from the newest complete checkpoint first. Rank 0 prints
"checksum after step S: X" after each save and "checksum after resume: X" after resuming.
"""

import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import meshrun
from meshrun.worker import checkpoint as ckpt

dist.init_process_group("gloo")
rank = dist.get_rank()
folder = os.environ["CKPT_DIR"]
torch.manual_seed(0)
# 16 x 512 x 512: ~25 MB of shards and Adam state per rank, written item by item, so a
# save takes long enough for the watcher below to act before rank 1 has finished its share.
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(16)])
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def checksum() -> str:
    total = sum(float(p.detach().full_tensor().double().sum()) for p in model.parameters())
    return repr(total)


kill_at = int(os.environ.get("KILL_AT_SAVE", "-1"))
if rank == 1 and kill_at >= 0:
    def die_mid_save() -> None:
        target = Path(folder) / ckpt.step_dir(kill_at)
        while not (target.is_dir() and any(target.glob("*.distcp"))):
            time.sleep(0.0005)
        os.kill(os.getpid(), signal.SIGKILL)

    sys.setswitchinterval(0.0005)  # let the watcher run promptly while the save writes
    threading.Thread(target=die_mid_save, daemon=True).start()

start = 0
found = ckpt.resume(folder, model, opt, {"step": 0})
if found is not None:
    start = found[0]
    summed = checksum()
    if rank == 0:
        print(f"checksum after resume: {summed}", flush=True)
saves = {int(s) for s in os.environ.get("SAVE_AT", "").split(",") if s}
for step in range(start + 1, int(os.environ["STEPS"]) + 1):
    torch.manual_seed(step)
    loss = model(torch.randn(8, 512)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step in saves:
        ckpt.save(folder, step, model, opt, {"step": step})
        summed = checksum()
        if rank == 0:
            print(f"checksum after step {step}: {summed}", flush=True)
if rank == 0:
    print(f"trained to step {int(os.environ['STEPS'])}", flush=True)
meshrun.destroy_process_group()  # with every rank: no exit race (meshrun.worker.leave)
