"""SLURM: ``SLURM_NNODES`` / ``SLURM_STEP_NUM_NODES``, ``SLURM_NODEID``, the first host of the
(compressed) node list as master, a port derived from ``SLURM_JOB_ID``.

meshrun must run once per node: ``srun --ntasks-per-node=1 meshrun run ...``. More
tasks on a node would each start every worker again (duplicate GPUs), so the
planner refuses them. ``SLURM_JOB_GPUS``/``SLURM_STEP_GPUS`` are global GPU ids
and are never used as ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UsageError
from .base import (
    Claims,
    HostInfo,
    Sourced,
    derived_port,
    expand_hostlist,
    expand_tasks_per_node,
    first_of,
    read_int,
)

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_NNODES", "SLURM_JOB_NUM_NODES",
         "SLURM_STEP_NUM_NODES", "SLURM_NODEID", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
         "SLURM_STEP_NODELIST", "SLURM_GPUS_ON_NODE", "SLURM_STEP_TASKS_PER_NODE")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    job = first_of(env, "SLURM_JOB_ID", "SLURM_JOBID")
    if job is None:
        return None
    job_var, job_id = job
    in_step = bool(env.get("SLURM_STEP_ID", "").strip())
    claims = Claims(platform="slurm")
    nodes_var = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES") if in_step \
        else ("SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    found = first_of(env, *nodes_var)
    if found:
        claims.nnodes = read_int(env, found[0], minimum=1)
    claims.node_rank = read_int(env, "SLURM_NODEID")
    nodelist = first_of(env, *(("SLURM_STEP_NODELIST",) if in_step else ()),
                        "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if nodelist:
        try:
            hosts = expand_hostlist(nodelist[1])
        except ValueError as exc:
            raise UsageError(f"{nodelist[0]}={nodelist[1]!r} is not a SLURM host list ({exc})",
                             subject=nodelist[0],
                             hint="pass --master-addr with the first node's address",
                             code="slurm-hostlist-bad") from None
        if hosts:
            claims.master_addr = Sourced(hosts[0], f"first host of {nodelist[0]}={nodelist[1]}",
                                         explicit=False)
    claims.master_port = derived_port(job_id, job_var)
    step = env.get("SLURM_STEP_ID", "").strip()
    claims.run_id = Sourced(f"slurm-{job_id}" + (f".{step}" if step else ""),
                            f"{job_var}" + (" and SLURM_STEP_ID" if step else ""), explicit=False)
    gpus = read_int(env, "SLURM_GPUS_ON_NODE")
    if gpus is not None and gpus.value > 0:
        claims.nproc_per_node = Sourced(gpus.value, "SLURM_GPUS_ON_NODE", explicit=False)
    claims.local_agents = _local_tasks(env, in_step, claims)
    if (not in_step and claims.nnodes is not None and claims.nnodes.value > 1
            and not env.get("SLURM_STEP_ID")):
        raise UsageError(
            f"this is the batch script of a {claims.nnodes.value}-node SLURM job "
            f"({nodes_var[0] if found is None else found[0]}={claims.nnodes.value}), outside srun "
            "(no SLURM_STEP_ID): "
            "only this node would start and the others would never join",
            subject="SLURM_STEP_ID", hint="start it on every node: srun --ntasks-per-node=1 meshrun run ...",
            code="slurm-batch-script")
    return claims


def _local_tasks(env: Mapping[str, str], in_step: bool, claims: Claims) -> Sourced | None:
    name = "SLURM_STEP_TASKS_PER_NODE" if in_step else None
    raw = env.get(name, "").strip() if name else ""
    if not raw:
        return None
    try:
        per_node = expand_tasks_per_node(raw)
    except ValueError:
        return None
    index = claims.node_rank.value if claims.node_rank is not None else 0
    count = per_node[index] if index < len(per_node) else per_node[-1]
    return Sourced(count, f"{name}={raw}")
