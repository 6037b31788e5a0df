"""What the watchdog reads from the liveness links (runtime/liveness.py), on stand-ins for
the hub and the link of runtime/links.py (those are tested in test_links.py)."""

from __future__ import annotations

from types import SimpleNamespace

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
