"""The watchdog's judgements as pure functions: each takes ``now`` and the values the beat
read, and returns what they mean; the thread (:mod:`meshrun.runtime.watchdog`) does the
reading, the publishing and the acting. Tested without a store, a thread or a sleep.

- :func:`lost_nodes`: node 0, every beat: which nodes are lost (silent too long, or their
  liveness link closed bare), or, for a spare, gone (it said goodbye);
- :func:`progress_moved`: node 0, every beat: which ranks progressed since the last beat,
  and for how long no rank has (the hang judgement's clock).

The others live with their data: :func:`meshrun.runtime.membership.after_loss` /
``after_return`` (what a lost or returning node means for the job),
:func:`meshrun.runtime.events.hang_suspects` and ``restart_verdict`` (a hang's verdict), and
:class:`meshrun.runtime.stragglers.Stragglers` (slow nodes).

Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import protocol
from .membership import Membership


@dataclass(frozen=True)
class Silence:
    """A node :func:`lost_nodes` found: silent ``age`` seconds; ``closed``: its liveness link
    closed without a goodbye (the process died); ``left``: a spare that said goodbye."""

    node: int
    age: float
    closed: bool = False
    left: bool = False


def never_beat(value: str) -> bool:
    """A heartbeat still as the join wrote it (beat 0): its watchdog has not connected."""
    try:
        return not value or protocol.Heartbeat.decode(value).beat == 0
    except ValueError:
        return False


def lost_nodes(now: float, nodes: Iterable[int], *, seen: Mapping[int, tuple[str, float]],
               started: float, limit: float, first_connect: float,
               goodbyes: Mapping[int, Any], dead: Collection[int],
               members: Membership) -> list[Silence]:
    """Pure: the nodes lost at ``now``, in node order.

    ``seen``: node -> (its last heartbeat value, when it changed; ``started`` for a node not
    read yet); ``limit``: the silence that makes a node lost (the node timeout, or less once
    this node's own workers failed); a node still at the join's beat 0 gets ``first_connect``
    more (its watchdog's first connection may take seconds on a loaded host); ``dead``:
    nodes whose link closed without a goodbye; a node that said goodbye is not lost, unless
    it is a spare (it left: the job cannot count on it). Nodes already lost or kept out are
    not judged again."""
    out = []
    for node in nodes:
        if node in members.lost or node in members.kept_out:
            continue
        value, since = seen.get(node, ("", started))
        age = now - since
        grace = first_connect if never_beat(value) else 0.0
        left = node in members.spares and node in goodbyes
        if left or (node not in goodbyes and (age >= limit + grace or node in dead)):
            out.append(Silence(node, age, closed=node in dead, left=left))
    return out


def progress_moved(now: float, values: Mapping[int, str],
                   seen: Mapping[int, tuple[tuple, float]],
                   position: Callable[[str], tuple]) -> tuple[dict[int, tuple[tuple, float]], float]:
    """Pure: each rank's progress position and when it last moved, and the seconds since any
    rank moved (0 when no rank has reported yet).

    ``values``: rank -> its progress value this beat (``""``: none); ``seen``: the previous
    beat's answer; ``position``: a value's position (a step, the collectives issued, a
    second of work: what changes while a rank progresses). A new report whose position did
    not move (timings refreshed) is no progress."""
    out = dict(seen)
    for rank, value in values.items():
        if not value:
            continue
        where = position(value)
        if rank not in out or out[rank][0] != where:
            out[rank] = (where, now)
    if not out:
        return out, 0.0
    return out, now - max(at for _, at in out.values())
