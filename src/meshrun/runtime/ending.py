"""A node's end in the job's store: its goodbye, the job's first cause, the nodes ended.

- the goodbye: the node's last heartbeat carries it (``done``, ``failed``, ``stopped``:
  :class:`~meshrun.runtime.events.Goodbye`), so node 0 never counts a node that left as
  lost; when the watchdog's own connection is broken or stuck, it goes once more over a
  fresh one; node 0 (the store's host), stopping for a failure or an event, keeps its store
  up until every other node said goodbye or two beats passed;
- the job's first cause (``meshrun/cause/<epoch>``): the first node to offer one keeps it
  (``compare_set`` on an absent key); every node reads it for its report;
- ``meshrun/ended/<epoch>``: each seated node counts itself once its workers are over, so
  a node whose workers failed knows when nobody is left to wait for.

Every call is one bounded call of the watchdog's connection
(:class:`~meshrun.runtime.connection.Connection`), and a store that is gone is no error here:
each node then says its own.

I/O: the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from .. import protocol
from ..signing import tallied, tally
from .connection import Connection
from .events import Goodbye
from .membership import Membership
from .store import BoundedStore, say


def _goodbye_in(raw: bytes) -> bool:
    """A heartbeat value carries a goodbye (a value that is no heartbeat carries none)."""
    try:
        return bool(protocol.Heartbeat.decode(raw).goodbye)
    except ValueError:
        return False


class Ending:
    """Node ``node``'s end, over ``conn``."""

    def __init__(self, conn: Connection, node: int, nnodes: int) -> None:
        self.conn, self.node, self.nnodes = conn, node, nnodes
        self.ended_in = -1   # the membership epoch this node counted itself ended in

    # -- the goodbye ------------------------------------------------------------------------
    def say_goodbye(self, status: Goodbye, beat: int, patience: float, *,
                    publish: Callable[[BoundedStore], None] | None = None,
                    linger: float = 0.0, lost: Collection[int] = ()) -> None:
        """This node's goodbye over the watchdog's connection (a fresh one when it is gone
        or stuck), which is then closed. Node 0 then ``publish`` es its last watch and, with
        ``linger``, keeps its store up that many seconds or until every other node not
        ``lost`` said goodbye. When a call fails (the store is gone, or this connection was
        shut: a stop signal in torch's exit barrier), the goodbye goes once more over a
        fresh connection of its own."""
        store = self.conn.usable()
        if store is None:
            return
        try:
            self.goodbye(store, status, beat)
            if publish is not None:
                publish(store)
                if linger > 0:
                    self.await_goodbyes(store, linger, lost)
        except Exception:  # noqa: BLE001 - the store may be gone, or the connection shut
            self.goodbye_again(status, beat, patience)
        self.conn.use(None)
        store.close(patience)

    def goodbye(self, store: BoundedStore, status: Goodbye, beat: int) -> None:
        """This node's last heartbeat (after beat ``beat``), carrying its goodbye."""
        store.set(protocol.heartbeat_key(self.node),
                  protocol.Heartbeat(beat + 1, Goodbye(status).value).encode())

    def goodbye_again(self, status: Goodbye, beat: int, patience: float) -> None:
        """The goodbye once more, over a fresh connection of its own (bounded like every
        call), closed after it."""
        fresh = None
        try:
            fresh = self.conn.connect()
            if fresh is not None:
                self.goodbye(fresh, status, beat)
        except Exception:  # noqa: BLE001, S110 - the store is gone: nothing to tell then
            pass
        finally:
            if fresh is not None:
                fresh.close(patience)

    def await_goodbyes(self, store: BoundedStore, seconds: float,
                       lost: Collection[int]) -> None:
        """Node 0: until every other node not ``lost`` said goodbye (their heartbeats, read
        here: the watchdog's thread is over), or ``seconds`` passed (a real wait)."""
        keys = [protocol.heartbeat_key(r) for r in range(1, self.nnodes) if r not in lost]
        until = time.monotonic() + seconds
        while time.monotonic() < until and keys and not all(
                _goodbye_in(raw) for raw in self.conn.read_all(store, keys) if raw):
            time.sleep(0.1)

    # -- the job's first cause --------------------------------------------------------------
    def offer_cause(self, cause: protocol.Cause, epoch: int) -> None:
        """Offer this node's first cause as the job's: the first node to offer one keeps it
        (``compare_set`` on an absent key; one bounded call)."""
        store = self.conn.store
        if store is None:
            return
        try:
            store.compare_set(protocol.cause_key(epoch), "", cause.encode())
        except Exception:  # noqa: BLE001, S110 - the store may be gone: each node says its own
            pass

    def job_cause(self, epoch: int, wait: float = 0.0,
                  poll: float = 0.1) -> protocol.Cause | None:
        """The job's first cause as some node offered it, waiting up to ``wait`` seconds for
        one; None when none came (or the value is not one: said once, by its key)."""
        key = protocol.cause_key(epoch)
        deadline = time.monotonic() + wait
        while True:
            store = self.conn.store
            try:
                if store is not None and store.check([key]):
                    return protocol.Cause.decode(store.get(key))
            except ValueError as exc:
                say(f"ignored {key}: {exc}")
                return None
            except Exception:  # noqa: BLE001, S110 - the store may be gone: no cause then
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll)

    # -- the end of the workers -------------------------------------------------------------
    def mark_ended(self, members: Membership) -> None:
        """Count this node in ``meshrun/ended`` (per membership epoch): its workers are over
        (once per node and epoch; a spare runs none)."""
        store = self.conn.store
        epoch = members.epoch
        if self.ended_in == epoch or store is None or not members.seated(self.node):
            return
        try:
            tally(store, protocol.ended_key(epoch), self.node)
            self.ended_in = epoch
        except Exception:  # noqa: BLE001, S110 - the store may be gone: nothing to count then
            pass

    def all_ended(self, members: Membership) -> bool:
        """Every seated node's workers are over (this node's included)."""
        store = self.conn.store
        try:
            return store is not None and tallied(store, protocol.ended_key(members.epoch),
                                                 members.seats, len(members.seats)) >= \
                len(members.seats)
        except Exception:  # noqa: BLE001
            return False
