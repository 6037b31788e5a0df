"""The watchdog's pure parts and its bounded store client (no torch, no processes)."""

import socket
import subprocess
import sys
import threading
import time

import pytest

from meshrun.runtime.events import (
    hang_line,
    in_collective,
    node_lost_line,
    process_state,
    restart_verdict,
    stuck_ranks,
)
from meshrun.runtime.store import BoundedStore, shut_connections


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


# --- the watchdog's loop against a real TCPStore in this process ---------------------------

def _store_and_dog(**kw):
    from datetime import timedelta

    from torch.distributed import TCPStore

    from meshrun.runtime.watchdog import Watchdog

    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=5))
    events: list = []
    dog = Watchdog(host="127.0.0.1", port=master.port, node_rank=1, nnodes=2, world_size=2,
                   hosts={0: "h0", 1: "h1"}, node_timeout=kw.pop("node_timeout", 3.0),
                   hang_timeout=0, interval=0.2, on_event=events.append, **kw)
    return master, dog, events


def _beat(master, seconds: float) -> None:
    """Node 0's heartbeat, from the test, for ``seconds``."""
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += 1
        master.set("meshrun/hb/0", str(n))
        time.sleep(0.1)


def test_watchdog_connects_again_when_its_first_try_failed(monkeypatch):
    from meshrun.runtime.watchdog import Watchdog

    master, dog, events = _store_and_dog()
    real, tries = Watchdog._connect, []

    def flaky(self):
        tries.append(1)
        return None if len(tries) == 1 else real(self)

    monkeypatch.setattr(Watchdog, "_connect", flaky)
    dog.start()
    _beat(master, 1.5)
    assert len(tries) >= 2 and master.check(["meshrun/hb/1"])  # it beats: it reconnected
    assert events == [] and dog.event is None
    dog.stop("done")
    assert master.get("meshrun/done/1") == b"done" and master.add("meshrun/goodbyes", 0) == 1


def test_watchdog_stops_its_node_when_another_node_failed():
    master, dog, events = _store_and_dog()
    dog.start()
    _beat(master, 0.5)
    master.set("meshrun/done/0", "failed")     # node 0's goodbye after its workers failed
    master.add("meshrun/goodbyes", 1)          # ... and its count, as Watchdog.stop() does
    _beat(master, 1.0)
    dog.stop("failed")
    assert [e.kind for e in events] == ["peer-failed"]
    assert events[0].node == 0 and events[0].line.startswith(
        "meshrun: node 0 (h0) failed and ends the job: stopping node 1's workers")


def test_watchdog_after_a_local_failure_leaves_another_node_failure_alone():
    master, dog, events = _store_and_dog()
    dog.start()
    dog.suspect(5.0)                           # this node's own workers failed first
    master.set("meshrun/done/0", "failed")
    master.add("meshrun/goodbyes", 1)
    _beat(master, 1.0)
    dog.stop("failed")
    assert events == []                        # its own failure is the story, not node 0's


def test_ended_counts_each_node_once_and_all_ended_needs_every_node():
    """Every node counts itself in meshrun/ended when its workers end (failed, done or
    stopped): once all have, none was lost, and a failed node need not wait for a silence."""
    master, dog, events = _store_and_dog()
    dog.start()
    _beat(master, 0.3)
    dog.mark_ended()
    dog.mark_ended()                           # a second call (stop() after a failure) is no-op
    assert master.add("meshrun/ended", 0) == 1 and not dog.all_ended()
    master.add("meshrun/ended", 1)             # node 0's workers end too
    assert dog.all_ended()
    dog.stop("failed")
    assert master.add("meshrun/ended", 0) == 2 and events == []
