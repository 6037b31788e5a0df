"""Kubernetes Indexed Job: ``JOB_COMPLETION_INDEX`` is the node rank; nothing else is exported.

The node count (``spec.completions``) and node 0's address (``<job>-0.<service>``,
through a headless Service and ``spec.subdomain``) are not in the environment:
the manifest sets ``MESHRUN_NNODES`` and ``MESHRUN_MASTER_ADDR`` (``meshrun render
k8s`` writes them), or the planner says exactly which one is missing.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import Claims, HostInfo, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("JOB_COMPLETION_INDEX",)


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    if not env.get("JOB_COMPLETION_INDEX"):
        return None
    claims = Claims(platform="kubernetes-indexed-job")
    claims.node_rank = read_int(env, "JOB_COMPLETION_INDEX")
    claims.notes.append("an Indexed Job exports only the index: node count and master address "
                        "come from MESHRUN_NNODES and MESHRUN_MASTER_ADDR")
    return claims
