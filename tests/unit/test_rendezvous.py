"""meshrun's rank-pinned rendezvous rounds (runtime/rendezvous.py) against a real TCPStore
in this process: every node gets the round and node 0's workers' endpoint, a round that
cannot form ends with one line, and node 0's watchdog tells the others of a newer round."""

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest

from meshrun import protocol
from meshrun.harness import free_port
from meshrun.runtime.membership import Membership, after_loss
from meshrun.runtime.rendezvous import RoundError, Rounds, next_round, seat_and_world
from meshrun.runtime.store import BoundedStore


@pytest.fixture
def master():
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=5))
    yield store


def _client(master):
    from torch.distributed import TCPStore

    return BoundedStore(TCPStore("127.0.0.1", master.port, is_master=False,
                                 timeout=timedelta(seconds=5)), 5.0)


def _plan(node: int, nnodes: int, join_timeout: int = 10, spares: int = 0):
    return SimpleNamespace(node_rank=node, nnodes=nnodes, is_master=node == 0,
                           join_timeout=join_timeout, spares=spares)


def _round_on_threads(master, nnodes, rounds, hosted):
    results: dict[int, object] = {}

    def node(n):
        calls = _client(master)
        try:
            results[n] = next_round(calls, _plan(n, nnodes), rounds[n], host_workers=hosted)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results[n] = exc
        finally:
            calls.close(1.0)  # a serving thread left alive would make meshrun's CLI exit hard

    threads = [threading.Thread(target=node, args=(n,)) for n in range(nnodes)]
    for n, t in enumerate(threads):
        t.start()
        time.sleep(0.05 * (nnodes - n))   # node 0 is not first: the others wait for it
    for t in threads:
        t.join(20)
    return results


def test_every_node_gets_the_round_and_node_0s_endpoint_and_the_next_round_forms_too(master):
    rounds = [Rounds() for _ in range(4)]
    ports = iter(range(50001, 50010))
    hosted = lambda: protocol.Endpoint("127.0.0.1", next(ports))  # noqa: E731
    first = _round_on_threads(master, 4, rounds, hosted)
    assert first == {n: (0, protocol.Endpoint("127.0.0.1", 50001)) for n in range(4)}
    assert [r.current for r in rounds] == [0, 0, 0, 0]
    second = _round_on_threads(master, 4, rounds, hosted)
    assert second == {n: (1, protocol.Endpoint("127.0.0.1", 50002)) for n in range(4)}
    assert int(master.add(protocol.round_arrived_key(1), 0)) == 4


def test_a_round_missing_a_node_ends_at_the_join_timeout_with_the_count(master):
    start = time.monotonic()
    calls = _client(master)
    with pytest.raises(RoundError) as info:
        next_round(calls, _plan(0, 3, join_timeout=2), Rounds(),
                   host_workers=lambda: protocol.Endpoint("127.0.0.1", 1))
    calls.close(1.0)
    assert str(info.value) == "rendezvous round 0: only 1 of 3 nodes arrived within 2 s"
    assert time.monotonic() - start < 5


def test_a_restart_round_ends_at_once_when_a_node_already_said_goodbye(master):
    rounds = Rounds()
    rounds.current = 0                 # this node's workers ran round 0 and failed
    rounds.goodbyes = {1: "done"}      # node 1 finished: it will never arrive
    start = time.monotonic()
    calls = _client(master)
    with pytest.raises(RoundError, match=r"restart round 1 cannot gather every node: "
                                         r"node\(s\) 1 already ended"):
        next_round(calls, _plan(0, 2, join_timeout=60), rounds,
                   host_workers=lambda: protocol.Endpoint("127.0.0.1", 1))
    calls.close(1.0)
    assert time.monotonic() - start < 3


def test_node_0s_watchdog_tells_the_other_nodes_a_newer_round_is_waiting(master):
    from meshrun.runtime.watchdog import Watchdog

    master.set(protocol.WATCH, protocol.Watch(0).encode())
    for node in range(2):
        master.set(protocol.heartbeat_key(node), protocol.Heartbeat(0).encode())
    rounds = [Rounds(), Rounds()]
    for r in rounds:
        r.current = 0                  # both nodes' workers run round 0
    dogs = [Watchdog(host="127.0.0.1", port=master.port, node_rank=n, nnodes=2, world_size=2,
                     hosts={0: "h0", 1: "h1"}, node_timeout=5.0, hang_timeout=0,
                     interval=0.2, on_event=lambda e: None, rounds=rounds[n])
            for n in range(2)]
    for dog in dogs:
        dog.start()
    try:
        time.sleep(0.6)
        assert [r.wanted for r in rounds] == [0, 0]    # nobody waits: no restart
        master.add(protocol.round_arrived_key(1), 1)  # node 0's workers failed: it arrives
        end = time.monotonic() + 5
        while rounds[1].wanted < 1 and time.monotonic() < end:
            time.sleep(0.05)
        assert rounds[1].wanted == 1 and rounds[0].wanted == 1
    finally:
        for dog in dogs:
            dog.stop("done")


def test_the_workers_store_is_bound_before_its_port_is_published(master):
    """The old way took a free port (bind, release), published it, and bound it again
    seconds later: anything else on the host could take it in between. The round's store
    is now listening, on a port the kernel picked, before any node can read the port."""
    import errno
    import socket

    from meshrun.runtime.rendezvous import _handler
    from meshrun.runtime.store import JobStore

    job = JobStore(master, master.port, True)
    plan = SimpleNamespace(node_rank=0, nnodes=1, is_master=True, join_timeout=5, spares=0,
                           master_addr="127.0.0.1", run_id="r")
    handler = _handler(job, plan, Rounds())
    try:
        info = handler.next_rendezvous()
        published = protocol.Endpoint.decode(master.get(protocol.round_workers_key(0)))
        assert (info.bootstrap_store_info.master_addr,
                info.bootstrap_store_info.master_port) == (published.host, published.port)
        assert (info.rank, info.world_size) == (0, 1)
        taker = socket.socket()
        with pytest.raises(OSError) as taken:
            taker.bind(("127.0.0.1", published.port))   # nobody else can have it
        taker.close()
        assert taken.value.errno == errno.EADDRINUSE
        socket.create_connection(("127.0.0.1", published.port), timeout=2).close()
    finally:
        handler.shutdown()
        job.close_calls()


def test_a_spare_is_in_no_round_until_it_takes_a_seat_and_then_meets_the_others_in_the_epochs_round(
        master):
    """3 nodes, --spares 1: round 0 forms with nodes 0 and 1 (two seats); node 2 cannot
    arrive. Node 1 is lost: the new epoch seats node 2 in seat 1 with round 1, and nodes 0
    and 2 meet there; node 2's group rank is 1, the world still 2."""
    plans = {n: _plan(n, 3, spares=1) for n in range(3)}
    rounds = {n: Rounds() for n in range(3)}
    ports = iter(range(50101, 50110))
    hosted = lambda: protocol.Endpoint("127.0.0.1", next(ports))  # noqa: E731
    calls = _client(master)
    with pytest.raises(RoundError, match="node 2 holds no seat in the job \\(spare"):
        next_round(calls, plans[2], rounds[2], host_workers=hosted)
    results: dict[int, object] = {}

    def node(n):
        client = _client(master)
        try:
            results[n] = next_round(client, plans[n], rounds[n], host_workers=hosted)
        finally:
            client.close(1.0)

    first = [threading.Thread(target=node, args=(n,)) for n in (1, 0)]
    for t in first:
        t.start()
    for t in first:
        t.join(20)
    assert results == {0: (0, protocol.Endpoint("127.0.0.1", 50101)),
                       1: (0, protocol.Endpoint("127.0.0.1", 50101))}
    after, _ = after_loss(Membership.initial(3, 1), 1, next_round=rounds[0].current + 1)
    for n in (0, 2):
        rounds[n].members = after
    results.clear()
    second = [threading.Thread(target=node, args=(n,)) for n in (2, 0)]
    for t in second:
        t.start()
    for t in second:
        t.join(20)
    calls.close(1.0)
    assert results == {0: (1, protocol.Endpoint("127.0.0.1", 50102)),
                       2: (1, protocol.Endpoint("127.0.0.1", 50102))}
    assert seat_and_world(plans[2], rounds[2]) == (1, 2)
    assert seat_and_world(plans[0], rounds[0]) == (0, 2)


# -- a node started again faster than the job noticed its loss (store.join's wait_lost) -------

def _rejoin(master, node: int, wait_lost: float):
    from meshrun.runtime.store import join

    plan = SimpleNamespace(node_rank=node, nnodes=3, hostname="h-new", master_addr="127.0.0.1",
                           join_timeout=10, spares=1)
    job = SimpleNamespace(calls=_client(master), port=master.port)
    try:
        return join(job, plan, wait_lost=wait_lost)
    finally:
        job.calls.close(1.0)


def _running_job_holding(master, node: int) -> None:
    """A job of 3 nodes (one a spare) that formed; ``node``'s old claim is still there."""
    for n in range(3):
        master.set(protocol.node_key(n), protocol.NodeClaim(f"h{n}", 100 + n, "old").encode())
    master.add(protocol.JOINED, 3)


def test_a_node_started_again_before_its_loss_was_noticed_waits_and_then_comes_back(master):
    _running_job_holding(master, 1)
    lost, _ = after_loss(Membership.initial(3, 1), 1, next_round=1)

    def notice_later():
        time.sleep(1.0)                      # node 0's watchdog finds node 1 lost
        master.set(protocol.MEMBERS, lost.encode())

    threading.Thread(target=notice_later).start()
    start = time.monotonic()
    members = _rejoin(master, 1, wait_lost=20)
    assert members == lost and 1 in members.lost   # node 0 then makes it the spare
    assert 0.9 < time.monotonic() - start < 10
    claim = protocol.NodeClaim.decode(master.get(protocol.node_key(1)))
    assert claim.host == "h-new"             # the claim is the new process's now


def test_a_rank_held_by_a_live_node_is_a_duplicate_after_the_wait(master):
    from meshrun.errors import StartupError

    _running_job_holding(master, 2)
    start = time.monotonic()
    with pytest.raises(StartupError) as info:
        _rejoin(master, 2, wait_lost=1.0)
    assert info.value.code == "duplicate-node-rank"
    assert "already taken by h2 pid 102" in str(info.value)
    assert 0.9 < time.monotonic() - start < 5
    claim = protocol.NodeClaim.decode(master.get(protocol.node_key(2)))
    assert claim.host == "h2"                # the live node keeps its claim


def test_a_workers_endpoint_written_by_something_else_is_named_not_a_traceback(master):
    """issue 21: a value in a round's key that node 0 did not write (a stranger's) ends the
    round with one line naming the key and what it held."""
    master.set(protocol.round_workers_key(0), "no port here")
    master.set(protocol.round_ready_key(0), "1")
    calls = _client(master)
    with pytest.raises(RoundError) as info:
        next_round(calls, _plan(1, 2), Rounds())
    calls.close(1.0)
    assert "meshrun/" in str(info.value) and "'no port here'" in str(info.value)
    assert "something else writes to this job's store" in str(info.value)
    with pytest.raises(ValueError, match="not a workers' endpoint"):
        protocol.Endpoint.decode("10.0.0.1 99999")


def test_a_round_of_a_newer_epoch_that_torch_s_agent_joined_sets_its_workers_up_once():
    """torch's agent may restart a node's workers into the next membership epoch itself (its
    poll of nodes_waiting): the launcher's set-up (the workers' variables, the console line,
    the logs' mark) then runs from the rendezvous, once per epoch; never for the epoch the
    launcher already set up."""
    from meshrun.runtime.membership import Membership
    from meshrun.runtime.rendezvous import Rounds

    rounds = Rounds(Membership(epoch=1, seats=(0, 3, 2), round=4))
    seen = []
    rounds.entered(None)  # no launcher hooked yet: nothing
    rounds.announced, rounds.on_epoch = 1, lambda m, why: seen.append((m.epoch, m.seats, why))
    rounds.entered(None)
    assert seen == []                                   # the launcher's own epoch
    rounds.members = Membership(epoch=2, seats=(0, 3), round=6)
    rounds.entered(None)
    rounds.entered(None)                                # the epoch's next round: said once
    assert seen == [(2, (0, 3), "a membership change")] and rounds.announced == 2
