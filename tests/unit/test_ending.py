"""A node's end in the job's store (runtime/ending.py): the goodbye heartbeat, again over a
fresh connection when a call fails, node 0's wait for the others' goodbyes, the job's
first cause and the count of nodes ended; over a store kept in a dict."""

from __future__ import annotations

import time

from test_seats import MemoryStore

from meshrun import protocol
from meshrun.runtime.ending import Ending
from meshrun.runtime.events import Goodbye
from meshrun.runtime.membership import Membership


class FakeConnection:
    """Connection's surface: the current store, a fresh one, read_all."""

    def __init__(self, store, fresh=None):
        self.store, self.fresh, self.closed = store, fresh, []

    def usable(self):
        return self.store

    def connect(self, first=False):
        return self.fresh

    def use(self, store):
        self.store = store
        return store

    def read_all(self, store, keys):
        return [store.get(k) if store.check([k]) else b"" for k in keys]


class Broken(MemoryStore):
    def set(self, key, value):
        raise ConnectionError("shut")

    def close(self, timeout):
        return True


class Closable(MemoryStore):
    closed = False

    def close(self, timeout):
        self.closed = True
        return True


def _said(store, node):
    return protocol.Heartbeat.decode(store.get(protocol.heartbeat_key(node)))


def test_the_goodbye_rides_in_the_last_heartbeat_and_node_0_publishes_after_it():
    store = Closable()
    conn = FakeConnection(store)
    published = []
    Ending(conn, 0, 1).say_goodbye(Goodbye.FAILED, 7, 1.0, publish=published.append)
    assert _said(store, 0) == protocol.Heartbeat(8, "failed")
    assert published == [store] and store.closed and conn.store is None


def test_a_failed_call_sends_the_goodbye_again_over_a_fresh_connection():
    fresh = Closable()
    Ending(FakeConnection(Broken(), fresh=fresh), 2, 3).say_goodbye(Goodbye.DONE, 4, 1.0)
    assert _said(fresh, 2) == protocol.Heartbeat(5, "done") and fresh.closed


def test_node_0_waits_for_the_others_goodbyes_but_not_for_the_lost_nor_past_its_linger():
    store = MemoryStore({protocol.heartbeat_key(1): protocol.Heartbeat(3, "done").encode(),
                         protocol.heartbeat_key(2): protocol.Heartbeat(3).encode()})
    ending = Ending(FakeConnection(store), 0, 3)
    started = time.monotonic()
    ending.await_goodbyes(store, 5.0, lost={2})       # node 2 is lost: no goodbye will come
    assert time.monotonic() - started < 1.0
    started = time.monotonic()
    ending.await_goodbyes(store, 0.3, lost=())        # node 2 still works: the linger ends it
    assert 0.3 <= time.monotonic() - started < 2.0


def test_the_first_cause_offered_is_the_jobs_and_each_node_counts_itself_ended_once():
    store = MemoryStore()
    ending = Ending(FakeConnection(store), 1, 2)
    first = protocol.Cause(3, 1, "h1", "exit 1", "boom")
    ending.offer_cause(first, 0)
    Ending(FakeConnection(store), 0, 2).offer_cause(protocol.Cause(0, 0, "h0", "x", "y"), 0)
    assert ending.job_cause(0) == first and ending.job_cause(1) is None
    members = Membership.initial(2)
    ending.mark_ended(members)
    ending.mark_ended(members)                        # once per epoch
    assert not ending.all_ended(members)
    Ending(FakeConnection(store), 0, 2).mark_ended(members)
    assert ending.all_ended(members)
    spare = Ending(FakeConnection(store), 2, 3)
    spare.mark_ended(Membership.initial(3, 1))        # a spare runs no workers
    assert int(store.get(protocol.ended_key(0))) == 2
