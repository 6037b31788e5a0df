"""SkyPilot: ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NODE_RANK``, the first line of
``SKYPILOT_NODE_IPS`` as master, ``SKYPILOT_NUM_GPUS_PER_NODE``, ``SKYPILOT_TASK_ID``."""

from __future__ import annotations

from collections.abc import Mapping

from .base import Claims, HostInfo, Sourced, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES", "SKYPILOT_NODE_IPS",
         "SKYPILOT_NUM_GPUS_PER_NODE", "SKYPILOT_TASK_ID")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    if not (env.get("SKYPILOT_NODE_RANK") or env.get("SKYPILOT_NUM_NODES")):
        return None
    claims = Claims(platform="skypilot")
    claims.nnodes = read_int(env, "SKYPILOT_NUM_NODES", minimum=1)
    claims.node_rank = read_int(env, "SKYPILOT_NODE_RANK")
    ips = [line.strip() for line in env.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip()]
    if ips:
        claims.master_addr = Sourced(ips[0], "first line of SKYPILOT_NODE_IPS")
    gpus = read_int(env, "SKYPILOT_NUM_GPUS_PER_NODE")
    if gpus is not None and gpus.value > 0:
        claims.nproc_per_node = Sourced(gpus.value, "SKYPILOT_NUM_GPUS_PER_NODE", False)
    task = env.get("SKYPILOT_TASK_ID", "").strip()
    if task:
        # Task ids already look like "sky-2024-05-01-...": prefix only those that do not.
        run_id = task if task.startswith("sky-") else "sky-" + task
        claims.run_id = Sourced(run_id, "SKYPILOT_TASK_ID", False)
    return claims
