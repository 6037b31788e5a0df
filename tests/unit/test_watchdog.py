"""The watchdog's pure parts and its bounded store client (no torch, no processes)."""

import socket
import subprocess
import sys
import threading
import time

import pytest

from meshrun.harness import free_port
from meshrun.runtime.events import (
    hang_line,
    in_collective,
    node_lost_line,
    process_state,
    restart_verdict,
    stuck_ranks,
)
from meshrun.runtime.store import BoundedStore
from meshrun.sockets import shut_connections


@pytest.mark.parametrize("progress,stopped,silent,expected", [
    ({0: 10, 1: 10, 2: 7, 3: 10}, (), (), [2]),        # behind the others
    ({0: 10, 1: 4, 2: 7}, (), (), [1, 2]),
    ({0: 10, 1: 10}, (1,), (), [1]),                   # level: the stopped one
    ({0: 10, 1: 10}, (), (0,), [0]),                   # level: the one not answering the dump
    ({0: 10, 1: 10}, (), (), []),
    ({}, (3,), (1,), [1, 3]),                          # nobody reported progress
])
def test_stuck_ranks(progress, stopped, silent, expected):
    assert stuck_ranks(progress, stopped, silent) == expected


@pytest.mark.parametrize("left,nnodes,expected", [
    ({0: 1, 1: 1}, 2, True),
    ({0: 1, 1: 0}, 2, False),    # node 1 would stop, node 0 would wait for it in vain
    ({0: 2}, 2, False),          # node 1 never answered the probe
    ({0: 1}, 1, True),
])
def test_restart_only_when_every_node_has_a_restart_left(left, nnodes, expected):
    assert restart_verdict(left, nnodes) is expected


def test_lines_name_the_node_host_and_ranks():
    assert node_lost_line(1, "gpu-b", 15.04) == \
        "meshrun: node 1 (gpu-b) is lost: last heartbeat 15.0 s ago"
    assert "node 0 (gpu-a), which hosts the job's store, is lost" in \
        node_lost_line(0, "gpu-a", 5, store_host=True)
    assert hang_line([(3, 1, "gpu-b"), (5, 2, "gpu-c")], 300.2) == (
        "meshrun: job hung: no progress for 300 s; stuck: rank 3 on node 1 (gpu-b), "
        "rank 5 on node 2 (gpu-c)")
    assert hang_line([], 10).endswith("stuck: no rank identified")


def test_in_collective_reads_a_faulthandler_dump():
    waiting = ('  File "/x/torch/distributed/distributed_c10d.py", line 2806 in all_reduce\n'
               '  File "train.py", line 40 in <module>\n')
    sleeping = '  File "train.py", line 12 in slow\n  File "train.py", line 40 in <module>\n'
    assert in_collective(waiting)
    assert not in_collective(sleeping)


def test_process_state_of_a_stopped_process_and_a_gone_one():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        child.send_signal(19)  # SIGSTOP
        deadline = time.monotonic() + 5
        while process_state(child.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_state(child.pid) == "T"
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) == ""


class FakeStore:
    """Answers at once, or blocks in ``get`` until released (a store host that vanished)."""

    def __init__(self):
        self.data, self.release = {}, threading.Event()

    def set(self, key, value):
        self.data[key] = value

    def get(self, key):
        self.release.wait()
        return self.data[key]


def test_bounded_store_gives_up_on_a_stuck_call_and_fails_fast_until_it_returns():
    fake = FakeStore()
    store = BoundedStore(fake, timeout=0.3)
    store.set("a", "1")
    assert fake.data == {"a": "1"}
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not return within"):
        store.get("a")
    assert time.monotonic() - started < 2
    with pytest.raises(TimeoutError, match="has not returned"):
        store.set("b", "2")             # refused at once, not queued behind the stuck call
    assert "b" not in fake.data
    assert store.close(0.2) is False    # still stuck: close says so
    fake.release.set()


def test_bounded_store_close_ends_its_thread():
    store = BoundedStore(FakeStore(), timeout=1)
    store.set("k", "v")
    assert store.close(2) is True


def test_shut_connections_wakes_a_reader_whose_peer_went_silent():
    unix = socket.socketpair()         # a Unix socket (empty peer name) is passed over
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    peer, _ = server.accept()          # stays open and silent: no close, no reset
    got: list = []
    reader = threading.Thread(target=lambda: got.append(client.recv(1)))
    reader.start()
    time.sleep(0.1)
    assert reader.is_alive()
    assert shut_connections(port, ("127.0.0.1",)) == 1
    reader.join(2)
    assert not reader.is_alive() and got == [b""]
    assert shut_connections(port + 1 if port < 65535 else port - 1) == 0  # any address
    for s in (client, peer, server, *unix):
        s.close()


# --- the watchdogs' beats against a real TCPStore in this process, on a clock of the test's --
#
# Each watchdog is driven without its thread: begin() connects, then every beat() is one
# heartbeat and one judgement at the test clock's time, so the ages it judges by are exact
# and nothing waits for the wall clock (the thread is only "wait one beat, call beat()").


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def _job(nnodes: int = 2, clock=None, **kw):
    """A store set up as meshrun's join leaves it, and one watchdog per node (not started)."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from meshrun import protocol
    from meshrun.runtime.watchdog import Watchdog

    master = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=5))
    signing = kw.get("signing")  # a job token's: every value signed, every watchdog reads so
    first = signing.wrap(master) if signing is not None else master
    first.set(protocol.WATCH, protocol.Watch(0).encode())
    for node in range(nnodes):
        first.set(protocol.heartbeat_key(node), protocol.Heartbeat(0).encode())
        first.set(protocol.node_key(node),
                  protocol.NodeClaim(f"h{node}", 100 + node, f"tok{node}").encode())
    events: dict[int, list] = {n: [] for n in range(nnodes)}
    extra = {"clock": clock} if clock is not None else {}
    if signing is not None:
        extra["signing"] = signing
    if "notices" in kw:
        extra["on_notice"] = kw["notices"].append
    spares = kw.get("spares", 0)
    for name in ("min_seats", "newest_checkpoint"):
        if name in kw:
            extra[name] = kw[name]
    dogs = [Watchdog(host="127.0.0.1", port=master.port, node_rank=n, nnodes=nnodes,
                     world_size=nnodes - spares, hosts={r: f"h{r}" for r in range(nnodes)},
                     node_timeout=kw.get("node_timeout", 3.0), hang_timeout=0, interval=0.2,
                     on_event=events[n].append, spares=spares, **extra)
            for n in range(nnodes)]
    return master, dogs, events


def _beats(dogs, clock: Clock, seconds: float, until=lambda: False, beat: float = 0.2) -> float:
    """Beat every watchdog (node 0 first) every ``beat`` seconds of ``clock`` for ``seconds``
    or until ``until()``; the clock's time spent."""
    spent = 0.0
    while spent < seconds - 1e-9 and not until():
        clock.now += beat
        spent += beat
        for dog in dogs:
            if dog.event is None:
                dog.beat()
    return spent


def _wait(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_watchdog_connects_again_when_its_first_try_failed(monkeypatch):
    from meshrun import protocol

    clock = Clock()
    master, (dog0, dog1), events = _job(clock=clock)
    real, tries = dog1._conn.connect, []

    def flaky(first=False):                    # node 1's connection only
        tries.append(1)
        if len(tries) == 1:
            return None
        return real(first)

    monkeypatch.setattr(dog1._conn, "connect", flaky)
    dog0.begin()
    dog1.begin()
    assert dog1._conn.store is None            # the first try failed
    beat = lambda: protocol.Heartbeat.decode(master.get(protocol.heartbeat_key(1))).beat  # noqa: E731
    _beats([dog0, dog1], clock, 1.0)
    # it connected again (on its next beat; a loaded machine may need a try more) and beat
    assert beat() >= 3 and len(tries) >= 2
    assert events == {0: [], 1: []}
    dog1.stop("done")
    assert protocol.Heartbeat.decode(master.get(protocol.heartbeat_key(1))).goodbye == "done"
    _beats([dog0], clock, 0.2)
    assert dog0.goodbyes.get(1) == "done"      # node 0 read the goodbye
    dog0.stop("done")
    assert events == {0: [], 1: []}


def test_a_node_that_failed_stops_the_others_through_node_0():
    clock = Clock()
    master, dogs, events = _job(3, clock=clock)
    for dog in dogs:
        dog.begin()
    _beats(dogs, clock, 0.6)
    dogs[2].stop("failed")                     # node 2's own workers failed
    _beats(dogs[:2], clock, 0.4)               # node 0 reads it, node 1 reads node 0's watch
    for node in (0, 1):
        assert [e.kind for e in events[node]] == ["peer-failed"] and events[node][0].node == 2
    assert events[1][0].line.startswith(
        "meshrun: node 2 (h2) failed and ends the job: stopping node 1's workers")
    dogs[1].stop("stopped")
    dogs[0].stop("stopped")


def test_node_0_failing_reaches_the_others_before_its_store_closes():
    clock = Clock()
    master, (dog0, dog1), events = _job(clock=clock)
    dog0.begin()
    dog1.begin()
    _beats([dog0, dog1], clock, 0.6)
    dog0.stop("failed")                        # publishes its goodbye in the watch first
    _beats([dog1], clock, 0.2)
    assert [e.kind for e in events[1]] == ["peer-failed"] and events[1][0].node == 0
    dog1.stop("stopped")


def test_watchdog_after_a_local_failure_leaves_another_node_failure_alone():
    clock = Clock()
    master, (dog0, dog1), events = _job(clock=clock)
    dog0.begin()
    dog1.begin()
    dog1.suspect(5.0)                          # this node's own workers failed first
    _beats([dog0, dog1], clock, 0.4)
    dog0.stop("failed")
    _beats([dog1], clock, 1.0)
    dog1.stop("failed")
    assert events[1] == []                     # its own failure is the story, not node 0's


def test_a_silent_node_is_named_by_node_0_and_by_every_other_node_at_the_node_timeout():
    from meshrun import protocol

    clock = Clock()
    master, dogs, events = _job(3, clock=clock, node_timeout=1.0)
    master.set(protocol.heartbeat_key(2), protocol.Heartbeat(7).encode())  # it beat, then
    for dog in dogs[:2]:                                                     # went silent
        dog.begin()
    spent = _beats(dogs[:2], clock, 5.0, until=lambda: bool(events[0] and events[1]))
    assert 1.0 <= spent <= 1.4, spent          # its timeout, and a beat for node 1 to read it
    for node in (0, 1):
        assert [(e.kind, e.node) for e in events[node]] == [("node-lost", 2)]
        assert events[node][0].line.startswith("meshrun: node 2 (h2) is lost: last heartbeat")
    watch = protocol.Watch.decode(master.get(protocol.WATCH))
    assert [n for n, _ in watch.lost] == [2]
    dogs[1].stop("stopped")
    dogs[0].stop("stopped")


def test_a_node_that_never_beat_gets_its_first_connection_time_first():
    """A watchdog's first connection may take seconds on a loaded host (32 agents on 2
    cores took over 10): a node still at the join's beat 0 is not lost after the node
    timeout alone (32 simulated nodes: false alarms), only 10 s later."""
    from meshrun.runtime.connection import FIRST_CONNECT_S

    clock = Clock()
    master, dogs, events = _job(3, clock=clock, node_timeout=1.0)
    dogs[0].begin()
    dogs[1].begin()                            # node 2 has not connected yet
    spent = _beats(dogs[:2], clock, 30.0, until=lambda: bool(events[0]))
    assert 1.0 + FIRST_CONNECT_S <= spent <= 1.0 + FIRST_CONNECT_S + 0.4, spent
    assert [(e.kind, e.node) for e in events[0]] == [("node-lost", 2)]
    dogs[1].stop("stopped")
    dogs[0].stop("stopped")


def test_a_frozen_node_0_watchdog_is_named_by_the_others():
    from meshrun import protocol

    clock = Clock()
    master, (dog0, dog1), events = _job(clock=clock, node_timeout=1.0)
    master.set(protocol.WATCH, protocol.Watch(5).encode())  # node 0 beat, then froze
    dog1.begin()                               # node 0's watch never changes again
    spent = _beats([dog1], clock, 5.0, until=lambda: bool(events[1]))
    assert 1.0 <= spent <= 1.2, spent
    assert [(e.kind, e.node) for e in events[1]] == [("node-lost", 0)]
    assert "which hosts the job's store, is lost" in events[1][0].line
    dog1.stop("stopped")


def test_ended_counts_each_node_once_and_all_ended_needs_every_node():
    """Every node counts itself in meshrun/ended when its workers end (failed, done or
    stopped): once all have, none was lost, and a failed node need not wait for a silence."""
    master, (dog0, dog1), events = _job()
    dog0.begin()
    dog1.begin()
    dog1.mark_ended()
    dog1.mark_ended()                          # a second call (stop() after a failure) is no-op
    assert master.add("meshrun/ended", 0) == 1 and not dog1.all_ended()
    dog0.mark_ended()                          # node 0's workers end too
    assert dog1.all_ended()
    dog1.stop("failed")
    dog0.stop("stopped")
    assert master.add("meshrun/ended", 0) == 2


def test_the_first_node_to_offer_a_cause_keeps_it_and_a_bad_one_is_named(capsys):
    """Nodes whose own rank failed offer their first cause; the first offer stays the job's
    (a victim's node reads it, waiting a bounded time for it); a value there that is not a
    cause is said by its key, never taken for one."""
    from meshrun import protocol

    master, (dog0, dog1), events = _job()
    dog0.begin()
    dog1.begin()
    began = time.monotonic()
    assert dog0.job_cause(wait=0.3) is None and time.monotonic() - began >= 0.3
    first = protocol.Cause(1, 1, "h1", "exited with code 1", "ValueError: bad")
    dog1.offer_cause(first)
    dog0.offer_cause(protocol.Cause(0, 0, "h0", "exited with code 1", "RuntimeError: late"))
    assert dog0.job_cause() == first and dog1.job_cause() == first
    master.set(protocol.cause_key(0), "garbage")
    assert dog0.job_cause() is None
    assert "ignored meshrun/cause/0: not a cause record: 'garbage'" in capsys.readouterr().out
    dog1.stop("failed")
    dog0.stop("failed")


def test_node_0_store_load_per_beat_grows_linearly():
    """Node 0's store serves two calls a beat per other node plus a constant: count them."""
    from meshrun.runtime import store as store_module

    calls = [0]
    real = store_module.BoundedStore._call

    def counting(self, name, *args, **kw):
        calls[0] += 1
        return real(self, name, *args, **kw)

    for nnodes in (2, 6):
        clock = Clock()
        master, dogs, events = _job(nnodes, clock=clock)
        store_module.BoundedStore._call = counting
        try:
            for dog in dogs:
                dog.begin()
            _beats(dogs, clock, 0.6)           # connected, liveness links open
            assert all(d._link for d in dogs[1:]), [d._link for d in dogs]
            calls[0] = 0
            _beats(dogs, clock, 2.0)           # ten beats of every node
            counted = calls[0]
            for dog in dogs:
                dog.stop("done")
        finally:
            store_module.BoundedStore._call = real
        # each other node: its heartbeat and a read of the watch; node 0: one read of every
        # heartbeat and the watch it publishes (+1 in a real run: the rendezvous' round
        # counter; +1 with hang detection or the straggler check: every rank's progress)
        assert counted == 10 * (2 * (nnodes - 1) + 2), (nnodes, counted)
        assert events == {n: [] for n in range(nnodes)}


EXIT_WHILE_CONNECTING = """
import socket, sys, time
from meshrun.cli import _exit_if_stuck
from meshrun.runtime.watchdog import Watchdog
frozen = socket.create_server(("127.0.0.1", 0))    # accepts, never answers: a frozen host
dog = Watchdog(host="127.0.0.1", port=frozen.getsockname()[1], node_rank=1, nnodes=2,
               world_size=2, hosts={}, node_timeout=30.0, hang_timeout=0, interval=0.2,
               on_event=print)
dog.start()
time.sleep(1.0)            # the watchdog thread is inside TCPStore's handshake (C++)
dog.stop("done")           # gives up on joining it after a few seconds
print("alive", dog.is_alive(), flush=True)
sys.exit(_exit_if_stuck(0))
"""


def test_meshrun_exits_cleanly_while_the_watchdog_is_inside_a_connection_attempt():
    """A daemon thread inside a C++ call at interpreter exit aborts the process ("terminate
    called without an active exception", exit 134): seen on 2 of 32 simulated nodes whose
    watchdog was reconnecting when their run ended."""
    done = subprocess.run([sys.executable, "-c", EXIT_WHILE_CONNECTING], capture_output=True,
                          text=True, timeout=60)
    assert "alive True" in done.stdout, done.stdout     # the situation was reproduced
    assert done.returncode == 0, (done.returncode, done.stderr[-1500:])
    assert "terminate called" not in done.stderr


def test_joining_a_frozen_node_0_ends_at_the_join_timeout():
    """TCPStore's handshake has no deadline: against a host that accepts and never answers
    a member's join used to wait forever. It must end at the join timeout with one line."""
    from dataclasses import replace

    from unit_fakes import plan as make

    from meshrun.errors import StartupError
    from meshrun.runtime.store import open_store

    frozen = socket.create_server(("127.0.0.1", 0))
    member = replace(make({"MESHRUN_NNODES": "2", "MESHRUN_NODE_RANK": "1",
                           "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(frozen.getsockname()[1])}), join_timeout=3)
    assert not member.is_master
    start = time.monotonic()
    try:
        with pytest.raises(StartupError) as info:
            open_store(member)
    finally:
        frozen.close()
    assert time.monotonic() - start < 8
    assert "did not answer within 3 s" in str(info.value) and info.value.code == "master-unreachable"


def test_a_slow_node_is_named_on_every_node_once_and_summarised():
    """Node 0 reads every rank's progress (hang detection off), its straggler check names
    node 1 once its window (1 s of the test's clock) is full, and node 1 prints the same
    notice once, from the watch."""
    from meshrun import protocol
    from meshrun.runtime.stragglers import Stragglers

    clock = Clock()
    master, dogs, events = _job(2, clock=clock)
    notices: dict[int, list] = {0: [], 1: []}
    summaries: list = []
    dogs[0].slow = Stragglers(2, 1, {0: "h0", 1: "h1"}, window=1.0)
    for node, dog in enumerate(dogs):
        dog.on_notice = notices[node].append
    dogs[0].on_summary = lambda summary, final=False: summaries.append(summary)
    for rank in range(2):
        master.set(protocol.progress_key(rank), b"")
    for dog in dogs:
        dog.begin()
    step, spent = 0, 0.0
    while spent < 15 and not notices[1]:
        step += 10
        for rank, busy in ((0, 0.1), (1, 0.2)):   # a new report from every rank each beat
            master.set(protocol.progress_key(rank),
                       protocol.Progress(step, time.time(), 0.3, busy, 10).encode())
        spent += _beats(dogs, clock, 0.2)
    assert notices[1] and notices[1] == notices[0][:1], notices
    assert notices[1][0]["line"].startswith("meshrun: node 1 (h1) is slow: 2.00x")
    assert spent < 3.0, spent                  # warm-up (2 reports) + its 1 s window
    _beats(dogs, clock, 0.6)
    assert len(notices[1]) == 1       # printed once, though the watch still carries it
    for dog in dogs[::-1]:
        dog.stop("done")
    assert events == {0: [], 1: []}
    rows = {row["node"]: row for row in summaries[-1]["nodes"]}
    assert rows[1]["compute_s"] == 0.2 and rows[0]["compute_s"] == 0.1


def _coll(rank_colls: dict[int, int]) -> dict[int, bytes]:
    from meshrun import protocol

    return {r: protocol.Progress(-1, time.time(), coll=c, work=0.5).encode().encode()
            for r, c in rank_colls.items()}


def test_a_hang_in_a_script_that_reports_no_steps_is_judged_on_its_collectives():
    """Two ranks of a script that calls nothing of meshrun's: only the observer's counts
    come. Rank 1 stops issuing collectives, rank 0 waits in its next one: no count moves for
    the hang timeout, and rank 1, behind, is named, with what the judgement rested on."""
    from meshrun import protocol

    clock = Clock()
    master, dogs, events = _job(2, clock=clock)
    for dog in dogs:
        dog.hang_timeout = 4.0
        dog.begin()
    for beat in range(10):                       # both progress, then rank 1 stops at 20
        for rank, value in _coll({0: 10 + 2 * beat, 1: min(20, 10 + 2 * beat)}).items():
            master.set(protocol.progress_key(rank), value)
        _beats(dogs, clock, 0.2)
    for rank, value in _coll({0: 21, 1: 20}).items():   # rank 0 issued its next one, waits
        master.set(protocol.progress_key(rank), value)
    assert _beats(dogs, clock, 4.0) >= 4.0 and not events[0]   # not before the timeout
    deadline = time.monotonic() + 10
    while not events[0] and time.monotonic() < deadline:    # the probe answers (no workers)
        _beats(dogs, clock, 0.2)
        time.sleep(0.05)
    assert events[0], "no hang"
    line = events[0][0].line
    assert "stuck: rank 1 on node 1 (h1)" in line and "rank 0" not in line, line
    assert "no collective completed on any rank" in line, line
    for dog in dogs[::-1]:
        dog.stop("stopped")


def test_a_hang_restart_holds_off_the_newer_round_until_this_nodes_agent_arrives_at_it():
    """A hang with a restart left on both nodes: node 1 acts first and its agent arrives at
    round 1, while node 0 (which acts last) has not yet killed its hung workers. Until node
    0's agent itself arrives, its rendezvous must not report a node waiting: torch's agent
    would restart the hung workers as a membership change, which does not count as a
    restart (the new workers would see TORCHELASTIC_RESTART_COUNT 0 again)."""
    from meshrun import protocol
    from meshrun.runtime.rendezvous import Rounds

    clock = Clock()
    master, dogs, events = _job(2, clock=clock)
    rounds = [Rounds(), Rounds()]
    for n, dog in enumerate(dogs):
        rounds[n].current = 0                      # both nodes' workers run round 0
        dog.rounds = rounds[n]
        dog.hang_timeout = 2.0
        dog.restarts_left = lambda: 1
        dog.local_pids = lambda n=n: {n: 999_999_000 + n}   # no such process: no answer
        dog.send_signal = lambda pid, sig: None
        dog.begin()
    for rank, value in _coll({0: 30, 1: 30}).items():
        master.set(protocol.progress_key(rank), value)
    deadline = time.monotonic() + 20
    while not dogs[1].restarts and time.monotonic() < deadline:   # node 1 acts first
        _beats(dogs, clock, 0.2)
        time.sleep(0.05)
    assert dogs[1].restarts and dogs[1].restarts[0].restart, [e.line for e in events[1]]
    assert not dogs[0].restarts and rounds[0].held
    master.add(protocol.round_arrived_key(1), 1)   # node 1's agent arrives at round 1
    _beats(dogs[:1], clock, 0.2)
    assert rounds[0].wanted == 1
    assert rounds[0].nodes_waiting() == 0          # held: node 0 kills its own first
    _beats(dogs, clock, 3.0, until=lambda: bool(dogs[0].restarts))
    assert dogs[0].restarts                        # node 0 acted: its workers were killed
    for dog in dogs[::-1]:
        dog.stop("done")


def test_rounds_report_a_waiting_node_only_when_not_held():
    from meshrun.runtime.rendezvous import Rounds

    rounds = Rounds()
    assert rounds.nodes_waiting() == 0            # no workers yet (current -1)
    rounds.current, rounds.wanted = 0, 1
    assert rounds.nodes_waiting() == 1            # a failed node waits in round 1
    rounds.hold()
    assert rounds.nodes_waiting() == 0            # a hang restart of this node is pending


def test_no_hang_is_judged_once_some_nodes_workers_are_over():
    """Node 1's workers finished (its goodbye says done): rank 0 alone, saving or uploading
    with no collective for longer than the hang timeout, is the job ending, not a hang."""
    from meshrun import protocol

    clock = Clock()
    master, dogs, events = _job(2, clock=clock)
    for dog in dogs:
        dog.hang_timeout = 2.0
        dog.begin()
    for rank, value in _coll({0: 30, 1: 30}).items():
        master.set(protocol.progress_key(rank), value)
    _beats(dogs, clock, 0.4)
    dogs[1].stop("done")
    for _ in range(100):             # 20 s of the clock, 5 s of real time for any probe
        _beats(dogs[:1], clock, 0.2)
        time.sleep(0.05)
    assert events[0] == [], [e.line for e in events[0]]
    dogs[0].stop("done")


# -- spares (runtime/membership.py): node 0 decides, every node adopts -----------------------

def test_a_lost_node_with_a_spare_left_is_a_takeover_every_node_adopts_not_a_stop():
    """3 nodes, --spares 1: node 1 goes silent; node 0 gives its seat to spare node 2 in
    epoch 1 and restarts (an event the launcher restarts for, not one that stops the job);
    node 2 reads the watch and is seated; nothing is reported as the job's loss."""
    from meshrun import protocol

    clock = Clock()
    master, dogs, events = _job(3, clock=clock, node_timeout=1.0, spares=1)
    master.set(protocol.heartbeat_key(1), protocol.Heartbeat(5).encode())  # beat, then silent
    for dog in (dogs[0], dogs[2]):
        dog.begin()
    _beats([dogs[0], dogs[2]], clock, 5.0, until=lambda: bool(events[0] and events[2]))
    for node in (0, 2):
        assert [(e.kind, e.node) for e in events[node]] == [("takeover", 1)]
        assert dogs[node].event is None                 # the job goes on
        assert dogs[node].members.seats == (0, 2) and dogs[node].members.epoch == 1
    assert events[0][0].line.startswith(
        "meshrun: node 1 (h1) is lost (last heartbeat 1.")
    assert "spare node 2 takes its seat (rank 1); every node's workers restart from the " \
        "newest checkpoint (membership epoch 1; 0 spares left)" in events[0][0].line
    assert events[2][0].line == events[0][0].line       # one line, every node
    watch = protocol.Watch.decode(master.get(protocol.WATCH))
    assert watch.lost == () and watch.members["seats"] == [0, 2]
    from meshrun.runtime.membership import Membership

    assert Membership.from_json(watch.members) == \
        Membership.decode(master.get(protocol.MEMBERS))         # for a node coming back
    _beats([dogs[0], dogs[2]], clock, 2.0)
    assert len(events[0]) == 1                          # decided once
    dogs[2].stop("stopped")
    dogs[0].stop("stopped")


def test_a_lost_spare_is_only_reported_and_a_lost_node_then_stops_the_job():
    from meshrun import protocol

    clock = Clock()
    notices: list = []
    master, dogs, events = _job(3, clock=clock, node_timeout=1.0, spares=1, notices=notices)
    master.set(protocol.heartbeat_key(2), protocol.Heartbeat(5).encode())  # the spare, silent
    for dog in dogs[:2]:
        dog.begin()
    _beats(dogs[:2], clock, 3.0, until=lambda: bool(notices))
    assert [n["kind"] for n in notices] == ["spare-lost"]
    assert notices[0]["line"].startswith("meshrun: spare node 2 (h2) is lost") and \
        notices[0]["line"].endswith("training goes on; 0 spares left")
    assert events == {0: [], 1: [], 2: []} and dogs[0].members.spares == ()
    dogs[1].stop("stopped")   # said goodbye: no loss; stop beating node 1 instead
    dogs[0].stop("stopped")


def test_a_node_replaced_while_frozen_stops_when_it_wakes_and_a_restarted_one_waits_as_a_spare():
    """Node 1 is silent past the timeout (frozen): spare 2 takes its seat. When node 1's
    watchdog beats again it reads that it was replaced and stops (REPLACED). Started again
    (a new claim under its rank, as meshrun's join makes it), node 1 waits as a spare."""
    from meshrun import protocol

    clock = Clock()
    notices: list = []
    master, dogs, events = _job(3, clock=clock, node_timeout=1.0, spares=1, notices=notices)
    master.set(protocol.node_key(1), protocol.NodeClaim("h1", 11, "aaaa").encode())
    for dog in dogs:
        dog.begin()
    _beats(dogs, clock, 0.6)
    _beats([dogs[0], dogs[2]], clock, 5.0, until=lambda: bool(events[0]))   # node 1 frozen
    assert [e.kind for e in events[0]] == ["takeover"]
    _beats([dogs[1]], clock, 0.2)                                            # it wakes
    assert dogs[1].event is not None and dogs[1].event.kind == "replaced"
    assert "node 1 was found lost and its seat was given away" in dogs[1].event.line
    master.set(protocol.node_key(1), protocol.NodeClaim("h1b", 12, "bbbb").encode())
    master.set(protocol.heartbeat_key(1), protocol.Heartbeat(0).encode())
    _beats([dogs[0], dogs[2]], clock, 1.0, until=lambda: bool(notices))
    assert [n["kind"] for n in notices] == ["node-returned"]
    assert notices[0]["line"] == "meshrun: node 1 (h1b) is back and waits as a spare (1 spare now)"
    assert dogs[0].members.spares == (1,) and dogs[0].members.lost == ()
    _beats([dogs[0], dogs[2]], clock, 3.0)     # at beat 0: its first connection's grace
    assert dogs[0].members.spares == (1,) and len(notices) == 1
    dogs[1].stop("stopped")
    dogs[2].stop("stopped")
    dogs[0].stop("stopped")


# -- shrinking and growing back (--nnodes MIN:MAX) -----------------------------------------

def test_with_no_spare_a_lost_node_shrinks_the_job_and_at_the_minimum_one_stops_it():
    """4 nodes, --nnodes 3:4: node 1 goes silent; node 0 shrinks the job to seats (0, 2, 3)
    in epoch 1 (node 2 holds group rank 1 now), every other node adopts it and restarts;
    a second loss at the minimum of 3 stops the job."""
    from meshrun import protocol

    clock = Clock()
    master, dogs, events = _job(4, clock=clock, node_timeout=1.0, min_seats=3)
    master.set(protocol.heartbeat_key(1), protocol.Heartbeat(5).encode())  # beat, then silent
    live = [dogs[0], dogs[2], dogs[3]]
    for dog in live:
        dog.begin()
    _beats(live, clock, 5.0, until=lambda: all(events[n] for n in (0, 2, 3)))
    for node in (0, 2, 3):
        assert [(e.kind, e.node) for e in events[node]] == [("takeover", 1)]
        assert dogs[node].event is None
        assert dogs[node].members.seats == (0, 2, 3) and dogs[node].members.epoch == 1
    assert "no spare left: the job goes on with 3 nodes (world size 3, the same effective " \
        "batch; at least 3); every node's workers restart from the newest checkpoint " \
        "(membership epoch 1)" in events[0][0].line
    assert events[2][0].line == events[0][0].line
    master.set(protocol.heartbeat_key(3), protocol.Heartbeat(99).encode())  # node 3 silent
    _beats([dogs[0], dogs[2]], clock, 5.0, until=lambda: dogs[0].event is not None)
    assert dogs[0].event is not None and dogs[0].event.kind == "node-lost" and \
        dogs[0].event.node == 3                                   # at the minimum: fatal
    for dog in (dogs[3], dogs[2], dogs[0]):
        dog.stop("stopped")
    assert dogs[0]._world() == range(3)       # the shrunk world's ranks are the ones read


def test_a_node_back_in_a_shrunk_job_is_seated_again_only_after_a_newer_checkpoint():
    """3 nodes, --nnodes 2:3: node 1 is lost (shrink), then started again: it waits as a
    spare while the newest complete checkpoint is the one of when it came back (step 20);
    once step 30 is complete, node 0 seats it in a new last seat (epoch 2, seats 0, 2, 1)."""
    from meshrun import protocol

    clock = Clock()
    notices: list = []
    newest = [20]
    master, dogs, events = _job(3, clock=clock, node_timeout=1.0, min_seats=2,
                                newest_checkpoint=lambda: newest[0], notices=notices)
    master.set(protocol.heartbeat_key(1), protocol.Heartbeat(5).encode())
    for dog in (dogs[0], dogs[2]):
        dog.begin()
    _beats([dogs[0], dogs[2]], clock, 5.0, until=lambda: bool(events[0]))
    assert dogs[0].members.seats == (0, 2)
    master.set(protocol.node_key(1), protocol.NodeClaim("h1b", 12, "bbbb").encode())
    master.set(protocol.heartbeat_key(1), protocol.Heartbeat(0).encode())
    _beats([dogs[0], dogs[2]], clock, 3.0)
    assert [n["kind"] for n in notices] == ["node-returned"]
    assert dogs[0].members.spares == (1,) and dogs[0].members.epoch == 1   # not yet
    newest[0] = -2                                  # the folder not read (yet): wait
    _beats([dogs[0], dogs[2]], clock, 1.0)
    assert dogs[0].members.epoch == 1
    newest[0] = 30
    _beats([dogs[0], dogs[2]], clock, 1.0, until=lambda: dogs[0].members.epoch == 2)
    members = dogs[0].members
    assert members.epoch == 2 and members.seats == (0, 2, 1) and members.spares == ()
    assert events[0][-1].kind == "takeover" and events[0][-1].line == (
        "meshrun: node 1 (h1b) is back: the job grows to 3 nodes (world size 3, the same "
        "effective batch); every node's workers restart from the newest checkpoint (step 30 or "
        "newer) "
        "(membership epoch 2)")
    _beats([dogs[0], dogs[2]], clock, 1.0, until=lambda: dogs[2].members.epoch == 2)
    assert dogs[2].members.seats == (0, 2, 1) and events[2][-1].line == events[0][-1].line
    for dog in (dogs[1], dogs[2], dogs[0]):
        dog.stop("stopped")


def test_the_probe_signals_only_a_process_that_catches_sigusr1():
    """A worker still starting (no stack-dump handler yet) would be killed by SIGUSR1: the
    kernel's SigCgt says which processes have the handler."""
    import signal

    from meshrun.runtime.events import catches

    bare = subprocess.Popen(["sleep", "30"])
    dumping = subprocess.Popen([sys.executable, "-c", (
        "import faulthandler, signal, sys, time; "
        "faulthandler.register(signal.SIGUSR1, file=sys.stderr); print('ready', flush=True); "
        "time.sleep(30)")], stdout=subprocess.PIPE, text=True)
    try:
        assert dumping.stdout.readline().strip() == "ready"
        assert catches(dumping.pid, signal.SIGUSR1)
        assert not catches(bare.pid, signal.SIGUSR1)
        assert catches(2**22 + 12345, signal.SIGUSR1)      # /proc cannot say: as before
    finally:
        for proc in (bare, dumping):
            proc.kill()
            proc.wait()


def test_a_heartbeat_key_holding_no_heartbeat_is_no_sign_of_life_and_is_named():
    """Issue 21: something else writes into node 1's heartbeat key. Before, node 0's beat
    raised on it (it then judged nothing and published no watch, and the others called node
    0 lost); now the value counts as no heartbeat, node 1 is lost at the node timeout, and
    the line names what the key held."""
    from meshrun import protocol

    clock = Clock()
    master, dogs, events = _job(2, clock=clock, node_timeout=2.0)
    dogs[0].begin()
    master.set(protocol.heartbeat_key(1), protocol.Heartbeat(3).encode())
    _beats(dogs[:1], clock, 0.4)
    for junk in ("not a beat", "ALSO\nNOT"):
        master.set(protocol.heartbeat_key(1), junk)     # kept changing: still no beat
        _beats(dogs[:1], clock, 0.8)
    assert dogs[0]._beat >= 5 and not events[0]         # node 0 beats on, within the timeout
    _beats(dogs[:1], clock, 1.0, until=lambda: bool(events[0]))
    assert events[0], "node 1 not lost"
    line = events[0][0].line
    assert line.startswith("meshrun: node 1 (h1) is lost: last heartbeat 2.") and \
        "its heartbeat key last held 'ALSO\\nNOT', which is no meshrun heartbeat" in line, line
    dogs[0].stop("stopped")


def test_a_watch_key_holding_no_watch_is_no_sign_of_life_and_is_named():
    """Issue 21: something else writes node 0's watch key. A value written once is simply
    overwritten by node 0's next watch (no alarm); while node 0 is silent and the key holds
    no watch, node 0 is lost at the node timeout and the line names what the key held,
    instead of a decode error read as silence (a broken store connection each beat)."""
    from meshrun import protocol

    clock = Clock()
    master, (dog0, dog1), events = _job(clock=clock, node_timeout=1.0)
    master.set(protocol.WATCH, protocol.Watch(5).encode())
    dog1.begin()
    _beats([dog1], clock, 0.4)
    master.set(protocol.WATCH, protocol.Watch(6).encode())   # node 0 beat again
    _beats([dog1], clock, 0.4)
    master.set(protocol.WATCH, b"\x00forged")                 # a stranger's write
    _beats([dog1], clock, 0.4)
    master.set(protocol.WATCH, protocol.Watch(7).encode())   # node 0 writes over it
    _beats([dog1], clock, 0.4)
    assert not events[1] and dog1._conn.store is not None    # no alarm, no broken connection
    master.set(protocol.WATCH, b"garbage")                    # node 0 silent from now on
    spent = _beats([dog1], clock, 5.0, until=lambda: bool(events[1]))
    assert 0.6 <= spent <= 1.2, spent
    line = events[1][0].line
    assert "which hosts the job's store, is lost" in line and \
        "its watch (meshrun/watch) last held 'garbage', which is no meshrun value" in line, line
    dog1.stop("stopped")


@pytest.mark.parametrize("token", [True, False])
def test_forged_watch_and_goodbye_are_ignored_and_said_once_with_a_job_token(token):
    """Issue 21: a plain TCPStore client writing a well-formed watch that lists node 1 lost
    made node 1 stop blaming itself; a forged "failed" goodbye in node 1's heartbeat ended the
    job "because node 1 failed". With a job token both are ignored (nobody fires, nobody is
    blamed) and each node says once what it ignored; without one (the other case) the same
    writes do stop the job, as docs/security.md says. (Overwriting a node's heartbeat for
    longer than the node timeout still makes it count as lost, its line naming the unsigned
    values: docs/security.md.)"""
    from meshrun import protocol
    from meshrun.signing import Signer, Signing

    clock = Clock()
    signing = Signing(Signer("a-job-token-of-some-length", "run", "nonce")) if token else None
    master, dogs, events = _job(2, clock=clock, signing=signing)
    warned: dict[int, list] = {0: [], 1: []}
    for node, dog in enumerate(dogs):
        dog.on_warning = warned[node].append
        dog.begin()
    _beats(dogs, clock, 1.0)
    forged_watch = protocol.Watch(999, lost=((1, 99.0),)).encode()
    forged_goodbye = protocol.Heartbeat(999, "failed").encode()
    try:
        for _ in range(10):  # 2 s, as in the issue (node timeout 3 s): each node reads the
            clock.now += 0.2  # stranger's write before the other node's own overwrites it
            master.set(protocol.WATCH, forged_watch)
            if dogs[1].event is None:
                dogs[1].beat()
            master.set(protocol.heartbeat_key(1), forged_goodbye)
            if dogs[0].event is None:
                dogs[0].beat()
        _beats(dogs, clock, 2.0, until=lambda: bool(events[0] or events[1]))
        if not token:
            assert events[0] or events[1]   # the attack works without a token
            return
        assert not events[0] and not events[1], events
        assert 1 not in dogs[0].goodbyes and not dogs[1].goodbyes
        assert any(line.startswith("meshrun: ignored ") and "unsigned" in line and
                   "to meshrun/watch (the job token is set" in line for line in warned[1]), warned
        assert any("unsigned" in line and "to meshrun/hb/1 " in line for line in warned[0]), warned
        assert len(warned[0]) <= 2 and len(warned[1]) <= 2   # once (and again at 10x as many)
    finally:
        for dog in dogs:
            dog.stop("stopped")


def test_a_hang_timeout_with_nothing_to_watch_is_said_at_the_end_by_node_0_only():
    """issue 23: a flag that had no effect is said. No rank reported progress for longer than
    the hang timeout: node 0 says --hang-timeout watched nothing; once a rank reports, or on
    another node, or in a run shorter than the timeout, nothing is said."""
    from meshrun import protocol

    clock = Clock()
    master, dogs, events = _job(2, clock=clock)
    for dog in dogs:
        dog.hang_timeout = 2.0
        dog.begin()
    _beats(dogs, clock, 1.0)
    assert dogs[0].unwatched() is None                      # not as long as the timeout yet
    _beats(dogs, clock, 1.6)
    note = dogs[0].unwatched()
    assert note is not None and note.startswith("meshrun: note: --hang-timeout 2 had nothing "
                                                "to watch") and "meshrun.progress(step)" in note
    assert dogs[1].unwatched() is None                       # node 0 judges hangs: it says it
    for rank, value in _coll({0: 3, 1: 3}).items():
        master.set(protocol.progress_key(rank), value)
    _beats(dogs, clock, 0.4)
    assert dogs[0].unwatched() is None and events[0] == []
    for dog in dogs:
        dog.stop("done")
