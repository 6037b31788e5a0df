"""The watchdog's side of the liveness links (:mod:`meshrun.runtime.links`).

Node 0 opens the hub and publishes where it listens (``meshrun/links``, with every node's
token from its claim); every other node opens its link once that is published (one check a
beat until then). Each beat node 0 reads again the claims of the ranks whose links wait
unverified (a node that came back links with its new claim's token) and says each kind of
refused link once. What the links tell the judges: a goodbye byte that came over a link is
that node's goodbye (:meth:`Liveness.goodbyes`); a link closed without one is a dead agent
(node 0: :meth:`Liveness.dead`, for :func:`meshrun.runtime.judges.lost_nodes`; the others:
:meth:`Liveness.node_0_died`). A link that cannot open is no error: the heartbeats alone
judge then. A change on a link wakes the watchdog's beat (``on_change``).

I/O: sockets (through links.py) and the store calls named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import protocol
from ..signing import Signing, ignored
from .events import Goodbye

_LETTERS = {g.value[:1]: g for g in Goodbye}   # a link's goodbye byte -> the goodbye


def _claim(raw: bytes) -> bool:
    """A claim to take a link's token from (not empty, not one a signed store ignored)."""
    return bool(raw) and not ignored(raw)


class Liveness:
    """Node ``node``'s links: the hub on node 0, a link on every other node."""

    def __init__(self, node: int, nnodes: int, on_change: Callable[[], None],
                 signing: Signing | None = None) -> None:
        self.node, self.nnodes, self._on_change = node, nnodes, on_change
        self.signing = signing  # with a job token a link carries its proof, not the claim's token
        self.hub: Any = None               # node 0: meshrun.runtime.links.Hub
        self.link: Any = None              # the others: a Link; False: it could not open
        self._refused: dict[str, int] = {}  # node 0: refused links said, and how often seen

    def open_hub(self, host: str, store: Any) -> None:
        """Node 0: listen for every node's link and publish where (nothing when it cannot:
        the heartbeats alone judge then)."""
        from .links import Hub

        try:
            tokens = {}
            keys = [protocol.node_key(r) for r in range(self.nnodes)]
            if store is not None and store.check(keys):  # each node's claim from the join:
                tokens = {r: self._token(r, raw)   # its link carries it
                          for r, raw in enumerate(store.multi_get(keys)) if _claim(raw)}
            hub = Hub(host, on_change=self._on_change, tokens=tokens)
            hub.start()
            self.hub = hub  # before publishing: a set that times out may still land
            if store is not None:
                store.set(protocol.LINKS, protocol.Endpoint(host, hub.port).encode())
        except Exception:  # noqa: BLE001, S110 - links only speed detection up
            pass

    def open_link(self, store: Any) -> None:
        """The others: open this node's link once node 0 has published its listener (one
        check a beat until then; once only after that, opened or not)."""
        from .links import Link

        if self.link is not None or not store.check([protocol.LINKS]):
            return
        try:
            where = protocol.Endpoint.decode(store.get(protocol.LINKS))
        except ValueError:  # not node 0's (something else wrote it): as if not published yet
            return          # (the heartbeats judge; never a failed beat)
        claim = protocol.node_key(self.node)
        mine = self._token(self.node, store.get(claim)) if store.check([claim]) else ""
        try:
            link = Link(where.host, where.port, self.node, token=mine,
                        on_change=self._on_change)
            link.start()
            self.link = link
        except OSError:
            self.link = False  # not reachable: the heartbeats alone judge node 0

    def check(self, store: Any, warn: Callable[[str], None]) -> None:
        """Node 0: read again the claims of the ranks whose links wait unverified, and
        ``warn`` once of each kind of link refused."""
        hub = self.hub
        if hub is None:
            return
        asked = [r for r in hub.unverified() if 0 <= r < self.nnodes
                 and store.check([protocol.node_key(r)])]
        if asked:
            keys = [protocol.node_key(r) for r in asked]
            for rank, raw in zip(asked, store.multi_get(keys)):
                if _claim(raw):
                    hub.expect(rank, self._token(rank, raw))
        for kind, line in hub.ignored():  # each kind said once, then only counted
            self._refused[kind] = self._refused.get(kind, 0) + 1
            if self._refused[kind] == 1:
                warn(line)

    def _token(self, rank: int, raw: bytes) -> str | bytes:
        """What node ``rank``'s link carries, from its claim: the claim's token, or with a
        job token the proof of it that only a holder of the job token can make."""
        token = protocol.NodeClaim.decode(raw).token
        return token if self.signing is None else self.signing.link_token(rank, token)

    def goodbyes(self, known: Mapping[int, Any]) -> dict[int, Goodbye]:
        """Goodbyes that came over the links and are not in ``known`` yet (the heartbeat or
        the watch carrying them may not have been read before the store went)."""
        found: dict[int, Goodbye] = {}
        if self.hub is not None:
            for rank, letter in self.hub.said().items():
                if rank not in known and letter in _LETTERS:
                    found[rank] = _LETTERS[letter]
        link = self.link
        if link and link.goodbye in _LETTERS and 0 not in known:
            found[0] = _LETTERS[link.goodbye]
        return found

    def dead(self) -> dict[int, float]:
        """Node 0: the nodes whose link closed without a goodbye byte."""
        return self.hub.dead() if self.hub is not None else {}

    def node_0_died(self, goodbyes: Mapping[int, Any]) -> bool:
        """The others: node 0's end of the link closed without its goodbye: its agent died."""
        link = self.link
        return bool(link) and link.died_at is not None and 0 not in goodbyes

    def forget(self, rank: int) -> None:
        """Node 0: ``rank`` came back: its old link's death is no news."""
        if self.hub is not None:
            self.hub.forget(rank)

    def close(self, status: Goodbye) -> None:
        """Close the hub or the link with the goodbye's byte (a bare close means death)."""
        letter = Goodbye(status).value[:1]
        hub, link, self.hub, self.link = self.hub, self.link, None, None
        for end in (hub, link):
            if end:  # a link that could not open is False
                try:
                    end.close(letter)
                except Exception:  # noqa: BLE001, S110 - ending anyway
                    pass
