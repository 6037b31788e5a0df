"""The job's membership as one watchdog holds it (:mod:`meshrun.runtime.membership`), and
what the watchdog tells the rendezvous rounds (:mod:`meshrun.runtime.rendezvous`).

Node 0 decides each membership change with :mod:`meshrun.runtime.judges` (``on_loss``,
``on_return``, ``on_admit``) and publishes it here; every other node adopts what node 0's
watch carries.

:class:`Seats` keeps this node's copy, hands it to the rendezvous (``rounds.members``) and,
on node 0, writes it under ``meshrun/members`` (for a node coming back). Node 0 also keeps
each lost node's claim from the join (``meshrun/node/<n>``): a changed claim is the node
started again (:meth:`Seats.returns`); and the checkpoint boundary a shrunk job waits for
before it seats a node that came back (:meth:`Seats.admit`). What a change does next (every
seated node restarts its workers, or a notice) is the watchdog's: each method returns the
:class:`~meshrun.runtime.judges.Reseat` it applied.

The rounds also learn, every beat, the goodbyes and the newest round some node arrived at
(node 0 reads one counter; the others read it in node 0's watch): a node in an older round
restarts its workers to join it.

I/O: the store calls named; the rendezvous' ``rounds`` under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from .. import protocol
from ..signing import tallied
from .judges import Reseat, Silence, on_admit, on_loss, on_return
from .membership import Adoption, Change, Membership, admit_at, adoption


class Seats:
    """Node ``node``'s copy of the membership. ``rounds``: the rendezvous
    (:class:`meshrun.runtime.rendezvous.Rounds`), whose membership, when it has one, is the
    start (a node started again into a running job); ``min_seats``: ``--nnodes MIN:MAX``'s
    MIN (None: the job never shrinks)."""

    def __init__(self, node: int, nnodes: int, world_size: int, *, spares: int = 0,
                 rounds: Any = None, min_seats: int | None = None) -> None:
        self.node, self.rounds, self.min_seats = node, rounds, min_seats
        self.members = (rounds.members if rounds is not None else None) \
            or Membership.initial(nnodes, spares)
        if rounds is not None:
            with rounds.lock:
                rounds.members = self.members
        self.elastic = spares > 0 or self.members.epoch > 0  # the watch carries it
        self.nproc = max(1, world_size // max(1, len(self.members.seats)))
        self.max_seats = world_size // self.nproc   # the seats a shrunk job grows back to
        self._claims: dict[int, bytes] = {}  # node 0: a lost node's claim (to see it return)
        self._boundary: int | None = None    # node 0: the checkpoint an admission waits past

    @property
    def next_round(self) -> int:
        """The rendezvous round a new epoch starts in: the one after the workers' round."""
        return (self.rounds.current if self.rounds is not None else -1) + 1

    def publish(self, members: Membership, store: Any = None) -> None:
        """The new membership, for the rendezvous (``rounds``), the watch and, with
        ``store`` (node 0), a node coming back."""
        self.members = members
        self.elastic = True
        if self.rounds is not None:
            with self.rounds.lock:
                self.rounds.members = members
        if store is not None and self.node == 0:
            store.set(protocol.MEMBERS, members.encode())

    def lose(self, store: Any, found: Silence, host: str) -> Reseat:
        """Node 0: ``found`` is lost (or a spare left): decide and publish the change
        (nothing is published for a node already lost, or a fatal loss)."""
        reseat = on_loss(self.members, found.node, found.age, closed=found.closed,
                         next_round=self.next_round, min_seats=self.min_seats,
                         nproc=self.nproc, host=host)
        if reseat.change not in (Change.FATAL, Change.KNOWN):
            self._claims[found.node] = _claim(store, found.node)
            self.publish(reseat.members, store)
        return reseat

    def returns(self, store: Any, hosts: MutableMapping[int, str]) -> list[Reseat]:
        """Node 0: the lost nodes whose claim changed were started again: each waits as a
        spare, or is kept out (its new claim's host goes in ``hosts``)."""
        out = []
        for node in self.members.lost:
            claim = _claim(store, node)
            if not claim or claim == self._claims.get(node):
                continue
            self._claims.pop(node, None)
            try:
                hosts[node] = protocol.NodeClaim.decode(claim).host
            except ValueError:
                pass
            reseat = on_return(self.members, node, hosts.get(node, "?"))
            self.publish(reseat.members, store)
            out.append(reseat)
        return out

    def admit(self, store: Any, newest_checkpoint: Callable[[], int | None],
              hosts: MutableMapping[int, str]) -> Reseat | None:
        """Node 0 of a job that shrank: a node that came back (a spare now) takes a new last
        seat at the next checkpoint boundary (:func:`~meshrun.runtime.membership.admit_at`:
        once a complete checkpoint newer than the newest when it came back exists, for a
        recipe's job; at once for any other script, which resumes from its own newest
        checkpoint). ``newest_checkpoint`` is asked only while there is a node to seat."""
        m = self.members
        if not m.spares or len(m.seats) >= self.max_seats:
            self._boundary = None
            return None
        step = newest_checkpoint()
        now, self._boundary = admit_at(step, self._boundary)
        reseat = on_admit(m, self.max_seats, step=step, next_round=self.next_round,
                          nproc=self.nproc, hosts=hosts) if now else None
        if reseat is not None:
            self.publish(reseat.members, store)
        return reseat

    # -- the rendezvous rounds (meshrun.runtime.rendezvous) ---------------------------------
    @property
    def wanted(self) -> int:
        """The newest round some node arrived at (0 without rounds): the watch carries it."""
        return self.rounds.wanted if self.rounds is not None else 0

    def arrived(self, store: Any, goodbyes: Mapping[int, Any]) -> None:
        """Node 0, a beat: the goodbyes for the rendezvous, and whether some node arrived at
        the round after the one the workers run in (its workers failed and its agent
        restarts them): one counter read."""
        rounds = self.rounds
        if rounds is None:
            return
        with rounds.lock:
            rounds.goodbyes = {r: str(g) for r, g in goodbyes.items()}
            current = rounds.current
        if current >= 0 and tallied(store, protocol.round_arrived_key(current + 1),
                                    self.members.seats, 1) > 0:
            with rounds.lock:
                rounds.wanted = max(rounds.wanted, current + 1)

    def follow(self, watch: protocol.Watch, *, hold: bool) -> None:
        """The others, a beat: node 0's newest round and goodbyes, for the rendezvous.
        ``hold``: a hang restart of this node's workers is pending: held before a newer
        round can count as nodes waiting (see ``Rounds.hold``)."""
        rounds = self.rounds
        if rounds is None:
            return
        if hold:
            rounds.hold()
        with rounds.lock:
            rounds.wanted = max(rounds.wanted, watch.round)
            rounds.goodbyes = dict(watch.goodbyes)

    def adopt(self, published: dict | None) -> Adoption:
        """The others: node 0's membership from its watch (JSON; None: the job has none to
        publish), adopted; what it means for this node."""
        if published is None:
            return Adoption.SAME
        try:
            members = Membership.from_json(published)
        except (ValueError, TypeError, KeyError):
            return Adoption.SAME
        found = adoption(self.members, members, self.node)
        if found != Adoption.SAME:
            self.publish(members)
        return found


def _claim(store: Any, node: int) -> bytes:
    key = protocol.node_key(node)
    return bytes(store.get(key)) if store.check([key]) else b""
