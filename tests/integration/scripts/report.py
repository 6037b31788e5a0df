"""A tiny worker: joins the process group, all-reduces rank+1, prints one JSON line."""

import json
import os
import socket

import torch
import torch.distributed as dist

import meshrun

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print("REPORT " + json.dumps({
    "rank": rank, "world": world, "local_rank": int(os.environ["LOCAL_RANK"]),
    "node_rank": int(os.environ["GROUP_RANK"]), "sum": int(value.item()),
    "meshrun_node_rank": int(os.environ.get("MESHRUN_NODE_RANK", "-1")), "host": socket.gethostname(),
    "omp": os.environ.get("OMP_NUM_THREADS"), "run_id": os.environ.get("MESHRUN_RUN_ID"),
}), flush=True)
meshrun.destroy_process_group()  # with every rank: no exit race
