"""The seeds' platforms: ``WORLD_SIZE`` (usually the node count), ``RANK`` (node index),
``MASTER_ADDR``, ``MASTER_PORT``.

Set by Alibaba PAI-DLC, KubeBrain, Kubeflow PyTorchJob v1 (where ``RANK`` is the pod
index and ``WORLD_SIZE`` is pods, or pods x nprocPerNode since training-operator
PR #1840), Volcano's pytorch plugin and AzureML. Which reading of ``WORLD_SIZE``
applies is decided by the planner (see :func:`meshrun.plan.read_world_size`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .base import Claims, HostInfo, Sourced, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "AZUREML_RUN_ID",
         "AZUREML_EXPERIMENT_ID")
# any of them: Volcano (its pytorch plugin exports WORLD_SIZE/RANK too)
FAMILIES = ("VC_", "VK_",)

_PYTORCHJOB_MASTER = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-master-0(\.|$)")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    if not (env.get("WORLD_SIZE") or env.get("RANK")):
        return None
    master = env.get("MASTER_ADDR", "").strip()
    job = _PYTORCHJOB_MASTER.match(master)
    if any(name.startswith(("VC_", "VK_")) for name in env):
        platform = "volcano"
    elif env.get("AZUREML_RUN_ID") or env.get("AZUREML_EXPERIMENT_ID"):
        platform = "azureml"
    elif job:
        platform = "kubeflow-pytorchjob"
    else:
        platform = "world-size-rank"  # PAI-DLC, KubeBrain and the seeds' "platform" scripts
    claims = Claims(platform=platform)
    claims.world_size = read_int(env, "WORLD_SIZE", minimum=1)
    claims.node_rank = read_int(env, "RANK")
    if master:
        claims.master_addr = Sourced(master, "MASTER_ADDR")
    claims.master_port = read_int(env, "MASTER_PORT", minimum=1)
    if platform == "kubeflow-pytorchjob" and job:
        claims.run_id = Sourced(f"pytorchjob-{job.group('job')}",
                                f"derived from the job name in MASTER_ADDR={master}", explicit=False)
        if claims.master_port is None:
            claims.master_port = Sourced(23456, "default of Kubeflow PyTorchJob", explicit=False)
    return claims
