"""The rendezvous: rank-pinned rounds on meshrun's own join, through torch's
``RendezvousHandler`` interface (as torch's own static rendezvous is), for torch's elastic
agent. Registered under :data:`RDZV_BACKEND` for ``launch_agent``.

The join (:func:`meshrun.runtime.store.join`) has already put every node in the job, each
with the rank its platform gave it; nothing is left to negotiate. A round is:

1. node 0 starts a fresh TCPStore server for this round's workers on a port the kernel
   picks (bound from then on: nothing else on the host can take it in between) and
   publishes it (``meshrun/round/<r>/workers``);
2. every node counts itself in ``meshrun/round/<r>/arrived``; the last one sets
   ``meshrun/round/<r>/ready``; every node waits for that (in one-second slices: a signal
   is handled between them, and a node that already said goodbye ends the wait at once);
3. the round's answer: this node's group rank is its seat in the job's membership
   (:mod:`meshrun.runtime.membership`: its node rank, unless it is a spare that took a lost
   node's seat), the world is every seated node, the workers' store is the round's server (``use_agent_store``: every worker is a client of
   it, so a restarted attempt never reads a key the previous one left), and torch's agent
   keeps its own keys (worker ranks, the exit barrier) under ``meshrun/round/<r>/``.

Global ranks follow the seats: seat s runs ranks s*nproc .. s*nproc+nproc-1 (without spares,
seat k is node k, as the plan says). Spares do not arrive until they hold a seat.

A spare's take-over (node 0's watchdog decides it: a new membership epoch, with ``round``
the round its seats meet in): every seated node's workers are restarted into that round;
a round is ready once as many nodes arrived as there are seats.

Restarts (``--max-restarts``, hang restarts): a node whose workers failed starts round
r + 1 on its own; node 0's watchdog sees the arrival and says so in its watch
(:class:`meshrun.protocol.Watch` ``round``), and every other node's agent, asking
:meth:`num_nodes_waiting`, restarts its workers and arrives too. Node 0's store work per
round is O(N): one counter call and one wait per node.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from .. import protocol
from ..plan import LaunchPlan
from ..signing import SignedStore, tallied, tally, wrap
from .membership import Membership
from .store import CALL_S, BoundedStore, JobStore

RDZV_BACKEND = "meshrun-pinned"
_SLICE_S = 1.0


class Rounds:
    """The rounds, as this node knows them: the one its workers run in (``current``) and
    the newest any node has arrived at (``wanted``, kept by the watchdog), the goodbyes
    the watchdog has read (a node that ended cannot join another round), and the job's
    membership (``members``: node 0's watchdog decides it, every watchdog keeps it here)."""

    def __init__(self, members: Membership | None = None) -> None:
        self.current = -1
        self.wanted = 0
        self.goodbyes: dict[int, str] = {}
        self.members = members  # None: the plan's (no spare has taken a seat)
        self.held = False       # a hang restart is under way: see :meth:`hold`
        self.lock = threading.Lock()
        self.announced = 0      # the membership epoch this node's workers were last set up for
        self.on_epoch: Any = None  # the launcher's set-up of an epoch's workers (see entered)

    def entered(self, plan: LaunchPlan) -> None:
        """The round torch's agent just joined belongs to a membership epoch newer than the
        one this node's workers were set up for: its agent restarted them into it itself
        (its poll of :meth:`nodes_waiting` saw another node there first) instead of the
        launcher's loop, so the launcher's ``on_epoch`` sets the epoch up now (the workers'
        MESHRUN_* variables, the console line, the logs' epoch mark) before they start."""
        members = self.membership(plan)
        set_up = self.on_epoch
        if set_up is not None and self.claim(members.epoch):
            set_up(members, "a membership change")

    def claim(self, epoch: int) -> bool:
        """Note that this node's workers are being set up for ``epoch``: False when they
        already were (by the launcher's loop, or by :meth:`entered`)."""
        with self.lock:
            if epoch <= self.announced:
                return False
            self.announced = epoch
            return True

    def hold(self) -> None:
        """A hang restart of this node's workers is decided but not yet done: until this
        node's agent arrives at its next round, no newer round counts as "nodes waiting".
        Otherwise torch's agent, polling :meth:`num_nodes_waiting` while another node that
        acted first already arrived, restarts the hung workers as a membership change,
        which does not count as a restart (TORCHELASTIC_RESTART_COUNT unchanged) and races
        this node's own kill of them."""
        with self.lock:
            self.held = True

    def nodes_waiting(self) -> int:
        """1 when a node waits in a round newer than this node's workers' (its agent then
        restarts them to join it), else 0; 0 while a hang restart is :meth:`hold`-ing."""
        with self.lock:
            return 1 if self.wanted > self.current >= 0 and not self.held else 0

    def membership(self, plan: LaunchPlan) -> Membership:
        with self.lock:
            members = self.members
        return members or Membership.initial(plan.nnodes, plan.spares)


class RoundError(Exception):
    """The round cannot form: the rendezvous' one line for the agent's failure."""


def register_backend(job: JobStore, plan: LaunchPlan, rounds: Rounds) -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    def create(params: Any) -> Any:
        return _handler(job, plan, rounds)

    registry._registry[RDZV_BACKEND] = create  # re-registration across runs in one process


def next_round(calls: Any, plan: LaunchPlan, rounds: Rounds, *,
               host_workers: Any = None, clock: Any = time.monotonic) -> tuple[int, Any]:
    """Arrive at this node's next round and wait for every node; returns (the round, the
    workers' endpoint). ``host_workers()`` (node 0) starts the round's worker store and
    returns its endpoint. Raises :class:`RoundError` when the round cannot form."""
    members = rounds.membership(plan)
    with rounds.lock:
        rnd = max(rounds.current + 1, members.round)
    if not members.seated(plan.node_rank):
        raise RoundError(f"node {plan.node_rank} holds no seat in the job "
                         f"({members.role(plan.node_rank)} in membership epoch {members.epoch})")
    seats = len(members.seats)
    if plan.is_master:
        endpoint = host_workers()
        calls.set(protocol.round_workers_key(rnd), endpoint.encode())
    arrived_key, seated = protocol.round_arrived_key(rnd), members.seats
    if tally(calls, arrived_key, plan.node_rank) >= seats and \
            tallied(calls, arrived_key, seated, seats) >= seats:
        calls.set(protocol.round_ready_key(rnd), "1")
    deadline = clock() + plan.join_timeout
    ready = [protocol.round_ready_key(rnd)]
    while not _ready(calls, ready[0]):
        members = rounds.membership(plan)
        ended = sorted(n for n in dict(rounds.goodbyes)
                       if n != plan.node_rank and members.seated(n))
        if ended and rnd > 0:
            raise RoundError(
                f"restart round {rnd} cannot gather every node: node(s) "
                f"{', '.join(map(str, ended))} already ended")
        if not members.seated(plan.node_rank):
            raise RoundError(f"node {plan.node_rank} lost its seat while waiting for round "
                             f"{rnd} ({members.reason or 'membership epoch ' + str(members.epoch)})")
        if clock() >= deadline:
            count = tallied(calls, arrived_key, seated, seats)
            raise RoundError(f"rendezvous round {rnd}: only {count} of {seats} nodes "
                             f"arrived within {plan.join_timeout} s")
        if calls.check(ready):  # there, but not node 0's signed "1": a stranger's; look
            time.sleep(_SLICE_S)  # again a slice later (the last node's own may follow)
            continue
        try:
            calls.wait(ready, timedelta(seconds=_SLICE_S))
        except RuntimeError:  # torch's wait timed out: a slice ended, look again
            pass              # (a bounded call that gave up, CallTimeout, goes up)
    key = protocol.round_workers_key(rnd)
    try:
        endpoint = protocol.Endpoint.decode(calls.get(key))
    except ValueError as exc:   # something other than node 0 wrote it: say what, and where
        raise RoundError(f"rendezvous round {rnd}: {key} holds no endpoint node 0 wrote "
                         f"({exc}; something else writes to this job's store)") from None
    with rounds.lock:
        rounds.current = rnd
        rounds.wanted = max(rounds.wanted, rnd)
        rounds.held = False
    return rnd, endpoint


def _ready(calls: Any, key: str) -> bool:
    """The round is ready: its key is there, and (with a job token) signed."""
    if not calls.check([key]):
        return False
    return not isinstance(calls, SignedStore) or calls.get(key) == b"1"


def seat_and_world(plan: LaunchPlan, rounds: Rounds) -> tuple[int, int]:
    """This node's group rank and the number of seats, as the membership says now."""
    members = rounds.membership(plan)
    seat = members.seat_of(plan.node_rank)
    return (plan.node_rank if seat is None else seat), len(members.seats)


def _handler(job: JobStore, plan: LaunchPlan, rounds: Rounds) -> Any:
    from torch.distributed import PrefixStore, TCPStore
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousClosedError,
        RendezvousHandler,
        RendezvousInfo,
        RendezvousStoreInfo,
    )

    servers: list[Any] = []

    def host_workers() -> protocol.Endpoint:
        # The kernel picks the port and the server keeps it: no window for another process.
        server = TCPStore(plan.master_addr, 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=max(60, plan.join_timeout)))
        del servers[:-1]  # the round before the previous one: its workers are long gone
        servers.append(server)
        return protocol.Endpoint(plan.master_addr, server.port)

    class PinnedRendezvous(RendezvousHandler):
        """meshrun's rounds (see the module): the group rank is the platform's node rank."""

        def __init__(self) -> None:
            self._calls = wrap(BoundedStore(job.store, CALL_S), job.signing)

        def get_backend(self) -> str:
            return RDZV_BACKEND

        @property
        def use_agent_store(self) -> bool:
            return True  # the workers are clients of the round's server (see host_workers)

        def next_rendezvous(self) -> Any:
            try:
                rnd, endpoint = next_round(self._calls, plan, rounds,
                                           host_workers=host_workers)
            except RoundError as exc:
                raise RendezvousClosedError(str(exc)) from None
            rounds.entered(plan)
            store = PrefixStore(protocol.round_prefix(rnd), job.store)
            seat, world = seat_and_world(plan, rounds)
            return RendezvousInfo(store, seat, world,
                                  RendezvousStoreInfo(endpoint.host, endpoint.port))

        def is_closed(self) -> bool:
            return False

        def set_closed(self) -> None:
            pass

        def num_nodes_waiting(self) -> int:
            """Nodes waiting in a newer round (from node 0's watch, no store call): the
            agent then restarts this node's workers to join them."""
            return rounds.nodes_waiting()

        def get_run_id(self) -> str:
            return plan.run_id

        def shutdown(self) -> bool:
            self._calls.close(1.0)
            return True

    return PinnedRendezvous()
