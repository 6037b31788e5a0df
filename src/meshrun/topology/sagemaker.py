"""Amazon SageMaker: ``SM_HOSTS`` (a JSON list), ``SM_CURRENT_HOST``, ``SM_NUM_GPUS``;
master = the first of ``SM_HOSTS``; ``TRAINING_JOB_NAME`` names the run."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..errors import UsageError
from .base import Claims, HostInfo, Sourced, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "TRAINING_JOB_NAME")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    raw = env.get("SM_HOSTS", "").strip()
    if not raw:
        return None
    try:
        hosts = json.loads(raw)
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts) or not hosts:
            raise ValueError
    except ValueError:
        raise UsageError(f"SM_HOSTS={raw!r} is not a JSON list of host names", subject="SM_HOSTS",
                         hint='SageMaker sets it like ["algo-1","algo-2"]; unset it outside '
                              "SageMaker", code="sagemaker-hosts-bad") from None
    claims = Claims(platform="sagemaker")
    claims.nnodes = Sourced(len(hosts), "length of SM_HOSTS")
    claims.master_addr = Sourced(sorted(hosts)[0], "first of SM_HOSTS (sorted)")
    current = env.get("SM_CURRENT_HOST", "").strip()
    if current:
        if current not in hosts:
            raise UsageError(f"SM_CURRENT_HOST={current!r} is not in SM_HOSTS={raw}",
                             subject="SM_CURRENT_HOST", hint="pass --node-rank explicitly",
                             code="sagemaker-hosts-bad")
        claims.node_rank = Sourced(sorted(hosts).index(current),
                                   "position of SM_CURRENT_HOST in sorted SM_HOSTS")
    gpus = read_int(env, "SM_NUM_GPUS")
    if gpus is not None and gpus.value > 0:
        claims.nproc_per_node = Sourced(gpus.value, "SM_NUM_GPUS", False)
    name = env.get("TRAINING_JOB_NAME", "").strip()
    if name:
        claims.run_id = Sourced("sm-" + name, "TRAINING_JOB_NAME", False)
    return claims
