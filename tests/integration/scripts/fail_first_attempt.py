"""Fails on the first attempt (exit 3 on rank 1), succeeds after a restart."""

import json
import os

import torch
import torch.distributed as dist

import meshrun

dist.init_process_group("gloo")
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if attempt == 0 and dist.get_rank() == 1:
    raise SystemExit(3)
value = torch.ones(1)
dist.all_reduce(value)
print("REPORT " + json.dumps({"rank": dist.get_rank(), "attempt": attempt,
                              "sum": int(value.item())}), flush=True)
meshrun.destroy_process_group()  # with every rank: no exit race
