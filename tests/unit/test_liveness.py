"""What the watchdog reads from the liveness links (runtime/liveness.py), on stand-ins for
the hub and the link of runtime/links.py (those are tested in test_links.py)."""

from __future__ import annotations

from types import SimpleNamespace

from meshrun.harness import free_port
from meshrun.runtime.events import Goodbye
from meshrun.runtime.liveness import Liveness


class FakeHub:
    def __init__(self, said=None, dead=None):
        self._said, self._dead, self.forgotten, self.closed = said or {}, dead or {}, [], []

    def said(self):
        return dict(self._said)

    def dead(self):
        return dict(self._dead)

    def forget(self, rank):
        self.forgotten.append(rank)

    def close(self, letter):
        self.closed.append(letter)


def test_goodbye_bytes_over_the_hub_count_for_nodes_not_heard_of_yet():
    links = Liveness(0, 4, on_change=lambda: None)
    assert links.goodbyes({}) == {} and links.dead() == {}
    links.hub = FakeHub(said={1: "d", 2: "f", 3: "?"}, dead={3: 12.0})
    assert links.goodbyes({}) == {1: Goodbye.DONE, 2: Goodbye.FAILED}   # "?": no goodbye
    assert links.goodbyes({1: Goodbye.STOPPED}) == {2: Goodbye.FAILED}  # the heartbeat's won
    assert links.dead() == {3: 12.0}
    links.forget(3)
    assert links.hub.forgotten == [3]


def test_node_0s_link_tells_its_goodbye_or_its_death():
    links = Liveness(1, 2, on_change=lambda: None)
    links.link = SimpleNamespace(goodbye="s", died_at=None)
    assert links.goodbyes({}) == {0: Goodbye.STOPPED} and not links.node_0_died({})
    links.link = SimpleNamespace(goodbye="", died_at=5.0)
    assert links.goodbyes({}) == {} and links.node_0_died({})
    assert not links.node_0_died({0: Goodbye.DONE})   # it said goodbye before it went
    links.link = False                                 # never opened: the heartbeats judge
    assert not links.node_0_died({}) and links.goodbyes({}) == {}


def test_closing_sends_the_goodbyes_first_letter_once():
    links = Liveness(0, 2, on_change=lambda: None)
    hub = links.hub = FakeHub()
    links.close(Goodbye.FAILED)
    links.close(Goodbye.DONE)                          # already closed: nothing more
    assert hub.closed == ["f"] and links.hub is None


def _signed_links(nonce_of_node_1: str):
    """Node 0's hub and node 1's link over a real store, both with the job token (node 1's
    launch nonce given): node 1's link, then its bare close (a dead agent)."""
    import socket
    import time
    from datetime import timedelta

    from torch.distributed import TCPStore

    from meshrun import protocol
    from meshrun.signing import Signer, Signing

    token = "a-job-token-of-some-length"
    master = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=5))
    node0 = Signing(Signer(token, "run", "nonce"))
    node1 = Signing(Signer(token, "run", nonce_of_node_1))
    for rank in range(2):
        node0.wrap(master).set(protocol.node_key(rank),
                               protocol.NodeClaim(f"h{rank}", 10 + rank, f"tok{rank}").encode())
    hub_side = Liveness(0, 2, on_change=lambda: None, signing=node0)
    hub_side.open_hub("127.0.0.1", node0.wrap(master))
    link_side = Liveness(1, 2, on_change=lambda: None, signing=node1)
    try:
        link_side.open_link(node0.wrap(master))   # what it reads; its proof: its own key
        assert link_side.link, "node 1's link did not open"
        time.sleep(0.5)
        held = hub_side.hub.unverified()                 # links waiting to be checked
        link_side.link._sock.shutdown(socket.SHUT_RDWR)  # the agent dies: no goodbye byte
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not hub_side.dead():
            time.sleep(0.05)
        return hub_side.dead(), held
    finally:
        hub_side.close(Goodbye.DONE)


def test_with_a_job_token_a_link_proves_its_node_with_the_hmac_of_its_claim():
    """The link carries an HMAC of its claim's token: node 0's hub takes it (its death is
    then news at once); a link made with another launch's key is never taken."""
    dead, held = _signed_links("nonce")
    assert set(dead) == {1} and held == []
    dead, unverified = _signed_links("another launch")
    assert dead == {} and unverified == [1]


def test_a_links_key_holding_no_endpoint_is_as_if_not_published():
    """Something else wrote node 0's links key: a node does not open its link (the
    heartbeats judge) and its beat does not fail (that would read as node 0 lost)."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from meshrun import protocol

    master = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=5))
    master.set(protocol.LINKS, "garbage")
    links = Liveness(1, 2, on_change=lambda: None)
    links.open_link(master)
    assert links.link is None
