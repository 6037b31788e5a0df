"""MPI launchers: Open MPI (``OMPI_COMM_WORLD_*``) and PMI/PMIx (MPICH, Intel MPI, Cray PALS).

meshrun must be started once per node (``mpirun --map-by ppr:1:node``). With one
rank per node the node count is the world size and the node rank is the MPI
rank; in general ``nnodes = size / local_size`` and ``node_rank = rank //
local_size`` (block placement). ``OMPI_COMM_WORLD_NODE_RANK`` is NOT a node
index (it is the rank among the processes on the same node) and is not used.
MPI exports no master address: pass ``--master-addr`` (or ``mpirun -x MASTER_ADDR``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UsageError
from .base import Claims, HostInfo, Sourced, first_of, parse_int

_FLAVOURS = (
    # (platform, size, rank, local size)
    ("openmpi", ("OMPI_COMM_WORLD_SIZE",), ("OMPI_COMM_WORLD_RANK",),
     ("OMPI_COMM_WORLD_LOCAL_SIZE",)),
    ("pmi", ("PMI_SIZE", "PMIX_SIZE"), ("PMI_RANK", "PMIX_RANK"),
     ("MPI_LOCALNRANKS", "PALS_LOCAL_SIZE")),
)

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE",
         "PMIX_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS", "PALS_LOCAL_SIZE",
         "PMIX_NAMESPACE")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    for platform, size_vars, rank_vars, local_vars in _FLAVOURS:
        size = first_of(env, *size_vars)
        rank = first_of(env, *rank_vars)
        if size is None or rank is None:
            continue
        world = parse_int(size[1], size[0], minimum=1)
        me = parse_int(rank[1], rank[0])
        local = first_of(env, *local_vars)
        per_node = parse_int(local[1], local[0], minimum=1) if local else 1
        if world % per_node:
            raise UsageError(f"{size[0]}={world} is not a multiple of {local[0] if local else ''}"
                             f"={per_node}: ranks are spread unevenly over the nodes",
                             subject=size[0], hint="start one meshrun per node: "
                             "mpirun --map-by ppr:1:node meshrun run ...", code="mpi-task-count")
        claims = Claims(platform=platform)
        how = f"{size[0]}={world} / {local[0]}={per_node}" if local else size[0]
        claims.nnodes = Sourced(world // per_node, how)
        claims.node_rank = Sourced(me // per_node, f"{rank[0]}={me} // {per_node}" if per_node > 1
                                   else rank[0])
        if local:
            claims.local_agents = Sourced(per_node, f"{local[0]}={per_node}")
        namespace = env.get("PMIX_NAMESPACE", "").strip()
        if namespace:
            claims.run_id = Sourced("mpi-" + namespace.replace("@", "-"), "PMIX_NAMESPACE", False)
        return claims
    return None
