"""The rendezvous: torch's own c10d handler (``DynamicRendezvousHandler`` over
``C10dRendezvousBackend``) on the job's store, wrapped only to pin each node's group rank to
the platform's node rank (torch would order nodes by host name), so global ranks are exactly
the plan's: node k runs ranks k*nproc .. k*nproc+nproc-1. Registered under
:data:`RDZV_BACKEND` for torch's ``launch_agent``."""

from __future__ import annotations

from typing import Any

from .. import protocol
from ..plan import LaunchPlan
from .store import JobStore

RDZV_BACKEND = "meshrun-c10d"


def register_backend(job: JobStore, plan: LaunchPlan) -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    def create(params: Any) -> Any:
        return _handler(job, plan, params)

    registry._registry[RDZV_BACKEND] = create  # re-registration across runs in one process


def _worker_store_info(store: Any, plan: LaunchPlan) -> Any:
    """Where this round's workers find their store: node 0 picks a free port on the master
    address and publishes it under meshrun's own key in the round's (prefixed) store.

    Not ``RendezvousStoreInfo.build``: that writes the keys torch's inner rendezvous writes
    too, from *its* rank 0, which need not be our node 0 (ranks there follow the nodes'
    descriptors). Two writers of one key let node 1 read the port node 0 later replaced, and
    rank 0's store then waits for workers that went elsewhere until the process-group
    timeout."""
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo
    from torch.distributed.elastic.utils.distributed import get_free_port

    if plan.is_master:
        store.set(protocol.WORKER_STORE,
                  protocol.Endpoint(plan.master_addr, get_free_port()).encode())
    where = protocol.Endpoint.decode(store.get(protocol.WORKER_STORE))
    return RendezvousStoreInfo(where.host, where.port)


def _handler(job: JobStore, plan: LaunchPlan, params: Any) -> Any:
    from datetime import timedelta

    from torch.distributed.elastic.rendezvous.api import RendezvousHandler, RendezvousInfo
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        RendezvousTimeout,
    )

    inner = DynamicRendezvousHandler.from_backend(
        run_id=params.run_id, store=job.store,
        backend=C10dRendezvousBackend(job.store, params.run_id),
        min_nodes=params.min_nodes, max_nodes=params.max_nodes,
        local_addr=plan.master_addr if plan.is_master else None,
        timeout=RendezvousTimeout(join=timedelta(seconds=plan.join_timeout)))

    class NodeRankRendezvous(RendezvousHandler):
        """torch's c10d rendezvous, with the group rank pinned to the platform's node rank."""

        def get_backend(self) -> str:
            return RDZV_BACKEND

        @property
        def use_agent_store(self) -> bool:
            # Workers get their own store per rendezvous round (rank 0 hosts it on a free
            # port, published under the round's prefix): with the agent's store shared, a
            # restart would find the previous attempt's keys (torch prefixes them by restart
            # count, which differs between a node that failed and one that followed it).
            return False

        def next_rendezvous(self) -> Any:
            info = inner.next_rendezvous()
            if info.world_size != plan.nnodes:
                raise RuntimeError(f"rendezvous formed with {info.world_size} nodes, "
                                   f"expected {plan.nnodes}")
            return RendezvousInfo(info.store, plan.node_rank, plan.nnodes,
                                  _worker_store_info(info.store, plan))

        def is_closed(self) -> bool:
            return inner.is_closed()

        def set_closed(self) -> None:
            inner.set_closed()

        def num_nodes_waiting(self) -> int:
            return inner.num_nodes_waiting()

        def get_run_id(self) -> str:
            return inner.get_run_id()

        def shutdown(self) -> bool:
            return inner.shutdown()

    return NodeRankRendezvous()
