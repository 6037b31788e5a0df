"""AzureML's PyTorch distribution: ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` and a
``WORLD_SIZE`` whose meaning the docs disagree on (the planner cross-checks it), marked
by ``AZUREML_RUN_ID``/``AZUREML_EXPERIMENT_ID``. AzureML's ``NODE_COUNT`` is not always
present; when it is, it is the node count."""

from __future__ import annotations

from collections.abc import Mapping

from .base import Claims, HostInfo, Sourced, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("AZUREML_RUN_ID", "AZUREML_EXPERIMENT_ID", "NODE_COUNT", "NODE_RANK")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    marker = env.get("AZUREML_RUN_ID") or env.get("AZUREML_EXPERIMENT_ID")
    if not marker:
        return None
    claims = Claims(platform="azureml")
    claims.nnodes = read_int(env, "NODE_COUNT", minimum=1)
    claims.node_rank = read_int(env, "NODE_RANK")
    run = env.get("AZUREML_RUN_ID", "").strip()
    if run:
        claims.run_id = Sourced("aml-" + run, "AZUREML_RUN_ID", False)
    return claims
