"""torchrun's own inputs, ``PET_<FLAG>``: set by Kubeflow PyTorchJob v1 (elastic and newer
operators) and by Kubeflow Trainer v2 (TrainJob), which exports only these.

``PET_NNODES`` may be an elastic range ``MIN:MAX``; meshrun runs a fixed node
count and accepts a range only when MIN == MAX. ``PET_NPROC_PER_NODE`` may be
``auto``/``gpu``/``cpu``, which means "count this node's devices". ``PET_RDZV_ENDPOINT``
(``host:port``, ``[fd00::1]:29400``) gives the master when ``PET_MASTER_ADDR`` is unset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .address import split_endpoint
from .base import Claims, HostInfo, Sourced, parse_int, parse_nnodes, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
         "PET_NPROC_PER_NODE", "PET_RDZV_ENDPOINT", "WORLD_SIZE")

_TRAINER_MASTER = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-node-0-0\.")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    names = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
             "PET_NPROC_PER_NODE", "PET_RDZV_ENDPOINT")
    if not any(env.get(name) for name in names):
        return None
    master = env.get("PET_MASTER_ADDR", "").strip()
    trainer = _TRAINER_MASTER.match(master)
    if trainer and not env.get("WORLD_SIZE"):
        platform = "kubeflow-trainer-v2"
    elif env.get("WORLD_SIZE"):
        platform = "kubeflow-pytorchjob"
    else:
        platform = "torchrun-pet"
    claims = Claims(platform=platform)
    claims.nnodes = _nnodes(env)
    claims.node_rank = read_int(env, "PET_NODE_RANK")
    nproc = env.get("PET_NPROC_PER_NODE", "").strip()
    if nproc and nproc not in ("auto", "gpu", "cpu", "cuda"):
        claims.nproc_per_node = Sourced(parse_int(nproc, "PET_NPROC_PER_NODE", minimum=1),
                                        "PET_NPROC_PER_NODE")
    if master:
        claims.master_addr = Sourced(master, "PET_MASTER_ADDR")
    claims.master_port = read_int(env, "PET_MASTER_PORT", minimum=1)
    endpoint = env.get("PET_RDZV_ENDPOINT", "").strip()
    if endpoint and not master:
        # host:port, [v6]:port, [v6] or a bare v6 address, read as torch reads --rdzv-endpoint.
        addr, port = split_endpoint(endpoint, "PET_RDZV_ENDPOINT")
        claims.master_addr = Sourced(addr, "PET_RDZV_ENDPOINT")
        if port is not None:
            claims.master_port = Sourced(port, "PET_RDZV_ENDPOINT")
    if trainer:
        claims.run_id = Sourced(f"trainjob-{trainer.group('job')}",
                                f"derived from the job name in PET_MASTER_ADDR={master}", False)
    return claims


def _nnodes(env: Mapping[str, str]) -> Sourced | None:
    raw = env.get("PET_NNODES", "").strip()
    if not raw:
        return None
    return Sourced(parse_nnodes(raw, "PET_NNODES"), "PET_NNODES")
