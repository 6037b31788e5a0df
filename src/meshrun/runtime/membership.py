"""Who trains, who waits, who is gone: the job's membership, one pure model.

The plan says how many nodes the platform starts and how many of them are hot spares
(``--spares K``: the K highest node ranks). From then on the membership, not the plan, says
which platform node holds which **seat** (group rank: seat s runs global ranks
``s*nproc .. s*nproc+nproc-1``), which nodes wait as spares and which were lost. Node 0's
watchdog is its only writer (:mod:`meshrun.runtime.watchdog`: it decides on a lost or
returning node with :func:`after_loss` / :func:`after_return`, through the judges of
:mod:`meshrun.runtime.judges`, and publishes the result, :mod:`meshrun.runtime.seats`, in
its watch every beat); the rendezvous (:mod:`meshrun.runtime.rendezvous`: a node's group rank
and the world of a round), the watchdog's judges (whose goodbye counts, which node a rank is
on), the straggler check and the worker environment read it.

An **epoch** is one set of seats: it starts at 0 and grows by one each time a spare takes a
lost node's seat, the job shrinks by a lost node's seat (:attr:`Change.SHRINK`, with
``--nnodes MIN:MAX``'s minimum: docs/elastic.md), or
a returned node is admitted into a new seat (:func:`after_admit`, at a checkpoint
boundary: :func:`admit_at`). ``round`` is the first rendezvous round of the epoch: every
seated node restarts its workers into it (from the newest complete checkpoint: the world,
the ranks and the batch are those of the epoch before, so the numerics are too). Every
other node adopts node 0's membership from its watch (:func:`adoption`: restart into the
new epoch, or stop when it finds itself replaced).

Node 0 hosts the job's store: its seat is never given away (its loss stays fatal).

A node lost :data:`KEEP_OUT` times in one job (a flapping machine: bad memory, a failing
link) is **kept out** when it comes back: it is not taken back as a spare, it waits for the
job's end and says why.

Pure: no torch, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from enum import Enum

from .. import protocol

KEEP_OUT = 3  # losses after which a node that comes back is kept out
UNKNOWN_CHECKPOINT = -2  # the newest checkpoint's step when the folder was not read (yet)


class Change(str, Enum):
    """What a membership change is: a lost node (:func:`after_loss`), a returning one
    (:func:`after_return`) or an admitted one (:func:`after_admit`)."""

    KNOWN = "known"          # already counted as lost
    SPARE_LOST = "spare-lost"  # a spare: reported, nothing restarts
    TAKEOVER = "takeover"    # a spare takes the lost node's seat; every seat restarts
    SHRINK = "shrink"        # no spare, more seats than the minimum: one seat fewer
    FATAL = "fatal"          # no spare left (at the minimum), or node 0: the job stops
    RETURNED = "node-returned"  # a lost node came back: it waits as a spare
    KEPT_OUT = "node-kept-out"  # it came back once too often: it waits for the job's end
    GROW = "grow"            # a shrunk job seats a spare in a new last seat; every seat restarts

    @property
    def restarts(self) -> bool:
        """Every seated node restarts its workers into the new epoch."""
        return self in (Change.TAKEOVER, Change.SHRINK, Change.GROW)


@dataclass(frozen=True)
class Membership:
    epoch: int = 0
    seats: tuple[int, ...] = (0,)   # seat (group rank) -> platform node rank
    spares: tuple[int, ...] = ()    # waiting, the lowest node rank takes the next seat
    lost: tuple[int, ...] = ()      # lost and not back
    round: int = 0                  # the epoch's first rendezvous round
    reason: str = ""                # why the epoch began ("" for epoch 0)
    strikes: tuple[tuple[int, int], ...] = ()  # (node, times lost), nodes lost at least once
    kept_out: tuple[int, ...] = ()  # came back after KEEP_OUT losses: never seated again

    @classmethod
    def initial(cls, nnodes: int, spares: int = 0) -> Membership:
        """Nodes 0..nnodes-spares-1 are seated in node order; the others are spares."""
        if not 0 <= spares < nnodes:
            raise ValueError(f"spares {spares} out of range for {nnodes} nodes")
        active = nnodes - spares
        return cls(seats=tuple(range(active)), spares=tuple(range(active, nnodes)))

    # -- reading ----------------------------------------------------------------------------
    @property
    def nodes(self) -> tuple[int, ...]:
        """Every node the job knows, seated, spare, lost or kept out."""
        return tuple(sorted({*self.seats, *self.spares, *self.lost, *self.kept_out}))

    def strikes_of(self, node: int) -> int:
        """How many times ``node`` was lost in this job."""
        return dict(self.strikes).get(node, 0)

    def _struck(self, node: int) -> tuple[tuple[int, int], ...]:
        counts = dict(self.strikes)
        counts[node] = counts.get(node, 0) + 1
        return tuple(sorted(counts.items()))

    def seat_of(self, node: int) -> int | None:
        """The node's group rank, or None when it holds no seat."""
        try:
            return self.seats.index(node)
        except ValueError:
            return None

    def seated(self, node: int) -> bool:
        return node in self.seats

    def node_of_rank(self, rank: int, nproc: int) -> int:
        """The platform node running global rank ``rank`` in this epoch (-1: no seat runs
        it: a rank of a larger world before the job shrank)."""
        seat = rank // max(1, nproc)
        return self.seats[seat] if 0 <= seat < len(self.seats) else -1

    def ranks_of(self, node: int, nproc: int) -> tuple[int, ...]:
        seat = self.seat_of(node)
        if seat is None:
            return ()
        return tuple(range(seat * nproc, (seat + 1) * nproc))

    def role(self, node: int) -> str:
        if node in self.seats:
            return "seated"
        if node in self.spares:
            return "spare"
        if node in self.kept_out:
            return "kept out"
        return "lost" if node in self.lost else "unknown"

    # -- wire -------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"epoch": self.epoch, "seats": list(self.seats), "spares": list(self.spares),
                "lost": list(self.lost), "round": self.round, "reason": self.reason,
                "strikes": [list(x) for x in self.strikes], "kept_out": list(self.kept_out)}

    @classmethod
    def from_json(cls, data: dict) -> Membership:
        """Raises ValueError for anything that is not one (a stranger's value in the store:
        tests/unit/test_protocol_fuzz.py)."""
        if not isinstance(data, dict):
            raise ValueError(f"not a membership: {str(data)[:80]!r}")
        ints = lambda key: tuple(int(n) for n in data.get(key, ()))  # noqa: E731
        try:
            seats = ints("seats")
            strikes = tuple((int(n), int(k)) for n, k in data.get("strikes", ()))
            found = cls(int(data.get("epoch", 0)), seats, ints("spares"), ints("lost"),
                        int(data.get("round", 0)), str(data.get("reason", "")), strikes,
                        ints("kept_out"))
        except protocol.BAD_VALUE as exc:
            raise ValueError(f"not a membership: {str(data)[:80]!r}") from exc
        if not seats:
            raise ValueError("a membership without seats")
        return found

    def encode(self) -> str:
        return json.dumps(self.to_json())

    @classmethod
    def decode(cls, raw: bytes | str) -> Membership:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        return cls.from_json(json.loads(text))


def after_loss(m: Membership, node: int, *, next_round: int, why: str = "",
               min_seats: int | None = None) -> tuple[Membership, Change]:
    """Pure: the membership once ``node`` is found lost, and what that means.

    A lost spare is only reported. A seated node other than 0 with a spare left: the lowest
    spare takes its seat in a new epoch, whose first round is ``next_round``. With no spare
    left and more seats than ``min_seats`` (``--nnodes MIN:MAX``'s MIN; None: the job never
    shrinks): the job shrinks by that seat in a new epoch, the seats after it move down by
    one (contiguous group ranks; node 0 keeps seat 0). Node 0 (the store's host), or a
    seated node with no spare left at the minimum: fatal (the membership unchanged)."""
    if node in m.lost or node in m.kept_out:
        return m, Change.KNOWN
    if node in m.spares:
        return replace(m, spares=tuple(n for n in m.spares if n != node),
                       lost=(*m.lost, node), strikes=m._struck(node)), Change.SPARE_LOST
    seat = m.seat_of(node)
    if seat is None:
        return m, Change.KNOWN
    if node == 0:
        return m, Change.FATAL
    if not m.spares:
        if min_seats is None or len(m.seats) <= min_seats:
            return m, Change.FATAL
        seats = m.seats[:seat] + m.seats[seat + 1:]
        reason = why or (f"node {node} was lost and no spare was left; the job goes on with "
                         f"{len(seats)} nodes (at least {min_seats})")
        return replace(m, epoch=m.epoch + 1, seats=seats, lost=(*m.lost, node),
                       round=next_round, reason=reason, strikes=m._struck(node)), Change.SHRINK
    spare, rest = m.spares[0], m.spares[1:]
    seats = m.seats[:seat] + (spare,) + m.seats[seat + 1:]
    reason = why or f"node {node} was lost; spare node {spare} took its seat"
    return replace(m, epoch=m.epoch + 1, seats=seats, spares=rest, lost=(*m.lost, node),
                   round=next_round, reason=reason, strikes=m._struck(node)), Change.TAKEOVER


def after_return(m: Membership, node: int, keep_out: int = KEEP_OUT) -> Membership:
    """Pure: a lost node came back (its platform started it again with the same rank): it
    waits as a spare, unless it was lost ``keep_out`` times: then it is kept out. Anything
    else is unchanged."""
    if node not in m.lost:
        return m
    lost = tuple(n for n in m.lost if n != node)
    if m.strikes_of(node) >= keep_out:
        return replace(m, lost=lost, kept_out=(*m.kept_out, node))
    return replace(m, lost=lost, spares=tuple(sorted((*m.spares, node))))


def after_admit(m: Membership, max_seats: int, *, next_round: int) -> Membership:
    """Pure: at a checkpoint boundary, a job that shrank takes its lowest spare back into a
    new last seat (seats already held keep their group ranks), while it has fewer than
    ``max_seats`` seats; unchanged otherwise (no spare, or the job is whole)."""
    if not m.spares or len(m.seats) >= max_seats:
        return m
    node, rest = m.spares[0], m.spares[1:]
    seats = (*m.seats, node)
    return replace(m, epoch=m.epoch + 1, seats=seats, spares=rest, round=next_round,
                   reason=f"node {node} is back; the job grows to {len(seats)} nodes at a "
                          "checkpoint boundary")


def admit_at(step: int | None, boundary: int | None) -> tuple[bool, int | None]:
    """Pure: whether a shrunk job seats a node that came back now, and the checkpoint
    boundary to keep.

    ``step``: the newest complete checkpoint's step (None: not a recipe's job, which resumes
    from its own newest checkpoint: at once; :data:`UNKNOWN_CHECKPOINT`: not read yet:
    wait); ``boundary``: the step that was newest when the node came back (None: not noted
    yet: this step becomes it). Admitted once a newer checkpoint is complete (the steps
    trained since it, in the beat before the restart, are trained again)."""
    if step is None:
        return True, None
    if step == UNKNOWN_CHECKPOINT:
        return False, boundary
    if boundary is None:
        return False, step
    if step <= boundary:
        return False, boundary
    return True, None


class Adoption(str, Enum):
    """What node 0's membership means for another node (:func:`adoption`)."""

    SAME = "same"            # nothing new
    KEEP = "keep"            # new, but this node's workers go on (a spare more or fewer)
    RESTART = "restart"      # a new epoch seats this node: its workers restart into it
    REPLACED = "replaced"    # this node is newly listed as lost: its seat was given away


def adoption(old: Membership, new: Membership, node: int) -> Adoption:
    """Pure: what ``node``, holding ``old``, does on reading ``new`` in node 0's watch."""
    if new == old:
        return Adoption.SAME
    if node in new.lost and node not in old.lost:
        return Adoption.REPLACED
    if new.epoch > old.epoch and new.seated(node):
        return Adoption.RESTART
    return Adoption.KEEP
