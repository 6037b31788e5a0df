"""Liveness links (runtime/links.py): a node whose agent process dies is named in about a
second, long before its heartbeat's silence would count (node timeout 30 s here); a node
that ends in order is not. Real processes, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import pytest

from meshrun import protocol
from meshrun.harness import free_port
from meshrun.runtime.events import EventKind

NODE = textwrap.dedent("""
    import sys, time
    import torch.distributed  # its import (seconds on a loaded host) before the clock starts
    from meshrun.runtime.watchdog import Watchdog
    port, node, nnodes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dog = Watchdog(host="127.0.0.1", port=port, node_rank=node, nnodes=nnodes,
                   world_size=nnodes, hosts={r: f"h{r}" for r in range(nnodes)},
                   node_timeout=30.0, hang_timeout=0, interval=0.2,
                   on_event=lambda e: print("EVENT", e.line, flush=True))
    dog.start()
    deadline = time.monotonic() + 60
    while dog._beat < 1 and time.monotonic() < deadline:   # connected and beating
        time.sleep(0.02)
    print("started", flush=True)
    line = sys.stdin.readline()          # "stop" or EOF: end in order
    dog.stop("done")
    print("stopped", flush=True)
""")


def _master(nnodes: int):
    from torch.distributed import TCPStore

    master = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=5))
    master.set(protocol.WATCH, protocol.Watch(0).encode())
    for node in range(nnodes):
        master.set(protocol.heartbeat_key(node), protocol.Heartbeat(0).encode())
        master.set(protocol.node_key(node),  # as the join leaves it: the links carry its token
                   protocol.NodeClaim(f"h{node}", 100 + node, f"tok{node}").encode())
    return master


def _node(port: int, node: int, nnodes: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", NODE, str(port), str(node), str(nnodes)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    return proc


def _dog(port: int, node: int, nnodes: int, events: list):
    from meshrun.runtime.watchdog import Watchdog

    dog = Watchdog(host="127.0.0.1", port=port, node_rank=node, nnodes=nnodes,
                   world_size=nnodes, hosts={r: f"h{r}" for r in range(nnodes)},
                   node_timeout=30.0, hang_timeout=0, interval=0.2, on_event=events.append)
    dog.start()
    return dog


def _until(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not predicate():
        time.sleep(0.02)
    return predicate()


@pytest.mark.timing
def test_a_killed_node_is_named_by_node_0_and_the_others_within_two_seconds():
    master = _master(3)
    events0: list = []
    dog0 = _dog(master.port, 0, 3, events0)
    events2: list = []
    dog2 = _dog(master.port, 2, 3, events2)
    victim = _node(master.port, 1, 3)
    try:
        assert _until(lambda: dog0._hub is not None and dog0._hub.linked() == {1, 2}, 30)
        killed = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        assert _until(lambda: events0 and events2, 5), (events0, events2)
        named0, named2 = events0[0], events2[0]
        took = time.monotonic() - killed
        assert named0.kind == EventKind.NODE_LOST and named0.node == 1
        assert named2.kind == EventKind.NODE_LOST and named2.node == 1
        assert "its agent's connection closed without a goodbye" in named2.line, named2.line
        assert took < 2.0, took    # the heartbeat alone would take the 30 s node timeout
    finally:
        victim.kill()
        victim.wait()
        dog2.stop("stopped")
        dog0.stop("stopped")


@pytest.mark.timing
def test_a_killed_node_0_is_named_by_every_other_node_within_two_seconds():
    master = _master(2)   # this process hosts the store; node 0's agent is a process
    events: list = []
    node0 = _node(master.port, 0, 2)
    dog1 = _dog(master.port, 1, 2, events)
    try:
        assert _until(lambda: bool(dog1._link), 30)
        killed = time.monotonic()
        os.kill(node0.pid, signal.SIGKILL)
        assert _until(lambda: events, 5)
        assert time.monotonic() - killed < 2.0
        assert events[0].node == 0 and events[0].kind == EventKind.STORE_LOST
        assert "which hosts the job's store, is lost" in events[0].line
    finally:
        node0.kill()
        node0.wait()
        dog1.stop("stopped")


def test_a_node_that_ends_in_order_is_not_lost():
    master = _master(2)
    events0: list = []
    dog0 = _dog(master.port, 0, 2, events0)
    member = _node(master.port, 1, 2)
    try:
        assert _until(lambda: dog0._hub is not None and dog0._hub.linked() == {1}, 30)
        out, _ = member.communicate("stop\n", timeout=20)
        assert "stopped" in out and "EVENT" not in out
        time.sleep(1.0)
        assert events0 == [] and dog0.goodbyes.get(1) == "done"
    finally:
        member.kill()
        dog0.stop("done")


def test_a_stranger_on_the_links_port_can_neither_stop_nor_speak_for_a_node():
    """Issue 21's attack: the rank header for node 1, then close (four bytes; and the same
    with a made-up token, and with a goodbye byte): before, node 1's real link was replaced
    and both nodes stopped within 0.3 s, each saying the other died. Now each is held, then
    refused and said once on node 0; a second link with node 1's own token does not replace
    its live one either; node 1's real link still names its death at once."""
    import socket
    import struct

    master = _master(2)
    events0: list = []
    warned: list = []
    from meshrun.runtime.watchdog import Watchdog

    dog0 = Watchdog(host="127.0.0.1", port=master.port, node_rank=0, nnodes=2, world_size=2,
                    hosts={0: "h0", 1: "h1"}, node_timeout=30.0, hang_timeout=0,
                    interval=0.2, on_event=events0.append, on_warning=warned.append)
    dog0.start()
    member = _node(master.port, 1, 2)
    try:
        assert _until(lambda: dog0._hub is not None and dog0._hub.linked() == {1}, 30)
        port = dog0._hub.port
        for payload in (struct.pack("!I", 1), struct.pack("!I8s", 1, b"guessed!"),
                        struct.pack("!I8s", 1, b"guessed!") + b"f",
                        struct.pack("!I8s", 1, b"tok1\0\0\0\0")):   # node 1's own token
            with socket.create_connection(("127.0.0.1", port)) as stranger:
                stranger.sendall(payload)
            time.sleep(0.2)
        lingering = socket.create_connection(("127.0.0.1", port))   # stays open
        lingering.sendall(struct.pack("!I8s", 1, b"guessed!"))
        idle = socket.create_connection(("127.0.0.1", port))        # never says a word
        time.sleep(6.5)                        # past the unverified links' 5 s
        lingering.close()
        idle.settimeout(2.0)
        assert idle.recv(1) == b""             # the hub closed it: no idle pile-up
        idle.close()
        assert events0 == [] and dog0.goodbyes == {}, (events0, dog0.goodbyes)
        assert dog0._hub.linked() == {1} and dog0._hub.dead() == {}
        assert member.poll() is None           # node 1 did not stop either
        assert warned and all(w.startswith("meshrun: ignored a liveness link claiming node 1 "
                                           "from 127.0.0.1:") for w in warned), warned
        assert any("did not carry the token" in w for w in warned), warned      # lingering
        assert any("closed before its token was checked" in w for w in warned), warned
        assert any("link is already open" in w for w in warned), warned
        killed = time.monotonic()
        os.kill(member.pid, signal.SIGKILL)
        assert _until(lambda: events0, 5) and events0[0].node == 1
        assert time.monotonic() - killed < 2.0
    finally:
        member.kill()
        member.wait()
        dog0.stop("stopped")


def test_a_link_still_held_for_its_claim_gets_node_0_s_goodbye():
    """A node that came back a moment before the job ended: node 0 has not read its new
    claim yet, so its link is held unverified. Node 0's end must still send it the goodbye
    byte (a bare close would read as node 0's death: the flapping-node test saw exit 4)."""
    import socket

    from meshrun.runtime.links import _HEADER, Hub

    hub = Hub("127.0.0.1", tokens={1: "old1"})
    hub.start()
    try:
        back = socket.create_connection(("127.0.0.1", hub.port))
        back.sendall(_HEADER.pack(1, b"new1\0\0\0\0"))       # its new claim's token
        assert _until(lambda: hub.unverified() == [1], 5)
    finally:
        hub.close("d")
    back.settimeout(2.0)
    assert back.recv(1) == b"d"
    back.close()
