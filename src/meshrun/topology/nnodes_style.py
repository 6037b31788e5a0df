"""Seed 004 and torchrun-style shell scripts: ``NNODES``, ``NODE_RANK``, ``NPROC_PER_NODE``,
``MASTER_ADDR`` (default localhost), ``MASTER_PORT`` (default 29500).

Seed 004's ``NPROC_PER_NODE`` default of 8 was its machines' GPU count; meshrun
counts this node's GPUs instead, so the default is never wrong on another box.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import Claims, HostInfo, Sourced, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    nproc = read_int(env, "NPROC_PER_NODE", minimum=1)
    if not (env.get("NNODES") or env.get("NODE_RANK")):
        # NPROC_PER_NODE alone (PAI-DLC's newer variable beside WORLD_SIZE/RANK, or seed 004
        # on one node) still sets the process count; it names no platform.
        return Claims(platform="", nproc_per_node=nproc) if nproc is not None else None
    claims = Claims(platform="nnodes-node-rank")
    # No default for NNODES: the planner's own default (one node) is the same, and a default
    # claimed here would be cross-checked against a WORLD_SIZE exported beside NODE_RANK
    # (AzureML) as if some variable had said "1 node".
    claims.nnodes = read_int(env, "NNODES", minimum=1)
    claims.node_rank = read_int(env, "NODE_RANK") or Sourced(0, "default of NODE_RANK", False)
    claims.nproc_per_node = nproc
    master = env.get("MASTER_ADDR", "").strip()
    claims.master_addr = (Sourced(master, "MASTER_ADDR") if master
                          else Sourced("localhost", "default of MASTER_ADDR (torchrun-style scripts)", False))
    claims.master_port = (read_int(env, "MASTER_PORT", minimum=1)
                          or Sourced(29500, "default of MASTER_PORT (torchrun-style scripts)", False))
    return claims
