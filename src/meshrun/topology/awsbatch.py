"""AWS Batch multi-node parallel jobs: ``AWS_BATCH_JOB_NUM_NODES``, ``AWS_BATCH_JOB_NODE_INDEX``,
``AWS_BATCH_JOB_MAIN_NODE_INDEX``, ``AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS`` (set on
the other nodes only: the main node is the master and hosts the store itself).

Node ranks are counted from the main node, so the main node is always rank 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import Claims, HostInfo, Sourced, read_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("AWS_BATCH_JOB_ID", "AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES",
         "AWS_BATCH_JOB_MAIN_NODE_INDEX", "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    if not env.get("AWS_BATCH_JOB_NODE_INDEX"):
        return None
    claims = Claims(platform="aws-batch")
    claims.nnodes = read_int(env, "AWS_BATCH_JOB_NUM_NODES", minimum=1)
    index = read_int(env, "AWS_BATCH_JOB_NODE_INDEX")
    main = read_int(env, "AWS_BATCH_JOB_MAIN_NODE_INDEX")
    if index is not None:
        if main is not None and main.value != 0 and claims.nnodes is not None:
            rank = (index.value - main.value) % claims.nnodes.value
            claims.node_rank = Sourced(rank, "AWS_BATCH_JOB_NODE_INDEX counted from "
                                       "AWS_BATCH_JOB_MAIN_NODE_INDEX")
        else:
            claims.node_rank = index
    addr = env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "").strip()
    if addr:
        claims.master_addr = Sourced(addr, "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS")
    elif index is not None and (main is None or index.value == main.value):
        claims.master_addr = Sourced(host.hostname or "localhost",
                                     "this host (the main node of the AWS Batch job)", False)
    job = env.get("AWS_BATCH_JOB_ID", "").strip()
    if job:
        claims.run_id = Sourced("batch-" + job.split("#", 1)[0], "AWS_BATCH_JOB_ID", False)
    return claims
