"""The watchdog's judgements as pure functions: each takes ``now`` and the values the beat
read, and returns what they mean; the thread (:mod:`meshrun.runtime.watchdog`) does the
reading, the publishing and the acting. Tested without a store, a thread or a sleep.

Liveness:

- :func:`heard`: node 0, every beat: which heartbeats changed (a sign of life), which hold
  no heartbeat, which carry a goodbye;
- :func:`lost_nodes`: node 0, every beat: which nodes are lost (silent too long, or their
  liveness link closed bare), or, for a spare, gone (it said goodbye);
- :func:`node_0_silence`: every other node: whether node 0's watch has been still too long;
  :func:`after_store_failure`: what a beat whose store calls failed means;
- :func:`failed_peer`, :func:`stopped_peer`: whose goodbye ends this node's part;
  :func:`others_said_goodbye`: whether any seated node is still to be waited for.

Hangs:

- :func:`fresh_progress`: the progress values that count (not those the hung attempt left);
  :func:`unwatched_note`: at the end, whether the hang timeout had anything to watch;
- :func:`hang_watched`: whether hangs are judged this beat (not once the job is ending);
- :func:`progress_moved`, :func:`hang_found`: which ranks progressed since the last beat,
  for how long no rank has, and whether that is a hang (:class:`Hang`);
- :func:`verdict_due`, :func:`hang_verdict`: when node 0 decides, and what (who is stuck,
  restart or stop), from the probes' answers.

Membership (node 0 decides; :class:`Reseat` is the decision, with the line every node says):
:func:`on_loss` (a take-over, a shrink, a spare lost, or fatal), :func:`on_return`,
:func:`on_admit`. They wrap the model's own transitions,
:func:`meshrun.runtime.membership.after_loss`, ``after_return`` and ``after_admit``.

The others live with their data: :func:`meshrun.runtime.events.hang_suspects` and
``restart_verdict`` (under :func:`hang_verdict`), and
:class:`meshrun.runtime.stragglers.Stragglers` (slow nodes).

Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .. import protocol
from .events import (
    EventKind,
    Goodbye,
    grow_line,
    hang_line,
    hang_suspects,
    kept_out_line,
    restart_verdict,
    returned_line,
    shrink_line,
    spare_lost_line,
    takeover_line,
)
from .membership import Change, Membership, after_admit, after_loss, after_return

PROBE_WAIT_S = 6.5  # how long node 0 waits for every node's probe (a stack dump takes 1.5 s)


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


# -- liveness -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Heard:
    """What :func:`heard` found: node -> (its last heartbeat value, when it changed), node
    -> a value in its heartbeat key that is no heartbeat, and the goodbyes that came."""

    seen: dict[int, tuple[str, float]]
    bad: dict[int, str]
    goodbyes: dict[int, Goodbye | str] = field(default_factory=dict)


def heard(now: float, values: Mapping[int, str], seen: Mapping[int, tuple[str, float]],
          bad: Mapping[int, str]) -> Heard:
    """Pure: node 0's reading of this beat's heartbeat values (node -> value, ``""`` where
    the key is empty). A changed heartbeat is a sign of life at ``now``; a value that is no
    heartbeat (something else writes the key) is none, and is kept in ``bad`` to be named
    if the node is found lost; a heartbeat carrying a goodbye is that node's goodbye."""
    seen, bad, goodbyes = dict(seen), dict(bad), {}
    for node, value in values.items():
        if not value or (node in seen and seen[node][0] == value):
            continue
        try:
            beat = protocol.Heartbeat.decode(value)
        except ValueError:
            bad[node] = value
            continue
        bad.pop(node, None)
        seen[node] = (value, now)
        if beat.goodbye:
            goodbyes[node] = Goodbye.read(beat.goodbye.encode())
    return Heard(seen, bad, goodbyes)


def node_0_silence(now: float, since: float, *, limit: float, grace: float = 0.0,
                   goodbye: bool = False) -> float | None:
    """Pure: another node's judgement of node 0: the seconds its watch has been still
    (``since``: when its beat last changed) once that reaches ``limit`` (plus ``grace``
    while node 0 has not connected yet), else None; never after node 0's goodbye."""
    age = now - since
    return age if not goodbye and age >= limit + grace else None


def after_store_failure(now: float, ok_at: float, *, limit: float, node_0_failed: bool,
                        local_failure: bool) -> EventKind | None:
    """Pure: another node's beat whose store calls failed (``ok_at``: the last beat they
    answered). Node 0 said it failed (and this node's workers did not fail first): its
    store closed with it, PEER_FAILED; silent ``limit`` seconds: its host is lost,
    STORE_LOST; else None (a fresh connection on the next beat)."""
    if node_0_failed and not local_failure:
        return EventKind.PEER_FAILED
    if now - ok_at >= limit:
        return EventKind.STORE_LOST
    return None


def failed_peer(goodbyes: Mapping[int, Any], me: int, members: Membership, *,
                local_failure: bool) -> int | None:
    """Pure: the lowest other seated node that said goodbye ``failed``: its failure ends the
    job (None when there is none, or this node's own workers failed: that is its story)."""
    if local_failure:
        return None
    failed = sorted(n for n, said in goodbyes.items()
                    if said == Goodbye.FAILED and n != me and members.seated(n))
    return failed[0] if failed else None


def stopped_peer(goodbyes: Mapping[int, Any], me: int, members: Membership) -> int | None:
    """Pure: the lowest other seated node that said goodbye ``stopped`` before its workers
    finished; node 0 (the store's host) names it only once every other seated node said
    goodbye (one still saving its last checkpoint would lose the store). Whether this node's
    workers all finished (its agent waits in torch's exit barrier) the caller checks."""
    stopped = sorted(n for n, said in goodbyes.items()
                     if said == Goodbye.STOPPED and n != me and members.seated(n))
    if not stopped:
        return None
    if me == 0 and not all(n in goodbyes for n in members.seats if n != me):
        return None
    return stopped[0]


def others_said_goodbye(goodbyes: Collection[int], members: Membership, me: int) -> bool:
    """Pure: every seated node other than ``me`` said goodbye (finished or failed, but not
    lost), as ``me`` last read them (node 0: the heartbeats; the others: node 0's watch).
    Spares train nothing: they are not waited for."""
    return all(n in goodbyes for n in members.seats if n != me)


# -- hangs ------------------------------------------------------------------------------------

def unwatched_note(now: float, begun: float, *, hang_timeout: float,
                   progress_seen: bool) -> str | None:
    """Pure: node 0, at the end of a run longer than ``hang_timeout`` (``begun``: when its
    watchdog connected, 0.0 if never): a note when no rank ever reported progress, so that
    ``--hang-timeout`` had nothing to watch (a script whose process groups meshrun cannot
    observe and that never calls ``meshrun.progress()``); None otherwise."""
    if hang_timeout <= 0 or progress_seen:
        return None
    if not begun or now - begun < hang_timeout:
        return None   # never connected, or a run shorter than the timeout
    return (f"meshrun: note: --hang-timeout {hang_timeout:g} had nothing to watch: no "
            "rank reported progress (no collective seen, no meshrun.progress(step) call), "
            "so a hang would have waited for the process group's own timeout; call "
            "meshrun.progress(step) once a step (docs/guide.md, \"What meshrun sees of your "
            "script\")")


def position(value: str, moved: bool = False) -> tuple:
    """A progress value's position: (step, collectives issued), compared across ranks (a
    rank behind the others is the one they wait for); with ``moved``, its active seconds
    too (what changes while it progresses: protocol.Progress.moved). An undecodable value
    is nowhere."""
    try:
        p = protocol.Progress.decode(value)
    except ValueError:
        return (-1, -1, -1) if moved else (-1, -1)
    return p.moved if moved else p.position


def _before(value: str, wall: float) -> bool:
    """A progress report made before ``wall`` (its own wall-clock time): an old worker's."""
    try:
        return protocol.Progress.decode(value).at < wall
    except (ValueError, TypeError, IndexError):
        return False


def fresh_progress(values: Mapping[int, str], stale: Mapping[int, str],
                   restarted: float) -> dict[int, str]:
    """Pure: rank -> its progress value, where what the hung (or replaced) attempt left
    counts as silence (``""``): the value read when it was restarted (``stale``), or one
    reported before ``restarted`` (wall time; an old worker's report may land after the
    values were read)."""
    return {r: "" if v and (stale.get(r) == v or _before(v, restarted)) else v
            for r, v in values.items()}


@dataclass
class Hang:
    """The hang node 0 has in hand: found at ``since`` (its clock) after ``stalled`` seconds
    without progress, on these progress ``values``; its ``verdict`` once decided (at
    ``decided``)."""

    since: float
    stalled: float
    values: dict[int, str]
    verdict: protocol.HangVerdict | None = None
    decided: float = 0.0


def hang_found(now: float, values: Mapping[int, str], seen: Mapping[int, tuple[tuple, float]],
               timeout: float) -> tuple[dict[int, tuple[tuple, float]], Hang | None]:
    """Pure: each rank's position and when it moved (:func:`progress_moved`), and the hang
    when no rank has moved for ``timeout`` seconds (None otherwise). Progress is a moved
    position (a step, a collective issued, a second of work on a CPU), not a new report: a
    report also refreshes timings."""
    seen, stalled = progress_moved(now, values, seen, lambda v: position(v, moved=True))
    return seen, (Hang(now, stalled, dict(values)) if stalled >= timeout else None)


def hang_watched(timeout: float, members: Membership, goodbyes: Collection[int], *,
                 ended: bool) -> bool:
    """Pure: node 0 judges hangs this beat: a hang ``timeout`` is set and no seated node's
    workers are over (this node's, ``ended`` in this epoch, or another's that said goodbye):
    once one is, the job is ending, and what is left (rank 0 saving or uploading with no
    collective) is no hang."""
    return timeout > 0 and not ended and not any(members.seated(n) for n in goodbyes)


def verdict_due(now: float, hang: Hang, answered: bool) -> bool:
    """Pure: node 0 decides once every node answered the probe (``answered``), or after
    :data:`PROBE_WAIT_S` with the answers it has."""
    return answered or now - hang.since >= PROBE_WAIT_S


def hang_verdict(now: float, hang: Hang, probes: Mapping[int, protocol.Probe], *,
                 members: Membership, nproc: int,
                 hosts: Mapping[int, str]) -> protocol.HangVerdict:
    """Pure: node 0's verdict on ``hang`` from the nodes' probe answers (node -> its
    :class:`~meshrun.protocol.Probe`): the stuck ranks
    (:func:`~meshrun.runtime.events.hang_suspects`) as (rank, node, host), the line, and a
    restart when every seated node has one left
    (:func:`~meshrun.runtime.events.restart_verdict`)."""
    reasons = {r: why for found in probes.values() for r, why in found.stuck}
    positions = {r: position(v) for r, v in hang.values.items() if v}
    silent = [r for r, v in hang.values.items() if not v]
    stuck = hang_suspects(positions, reasons, silent)
    nodes = {r: members.node_of_rank(r, nproc) for r in stuck}
    who = tuple((r, nodes[r], hosts.get(nodes[r], "?")) for r in stuck)
    restart = restart_verdict({n: p.restarts_left for n, p in probes.items()}, members.seats)
    stalled = hang.stalled + (now - hang.since)
    by_coll = all(at[0] < 0 for at in positions.values())  # no rank reports steps
    return protocol.HangVerdict(hang_line(list(who), stalled, by_coll), who, restart)


# -- membership (node 0 decides) --------------------------------------------------------------

@dataclass(frozen=True)
class Reseat:
    """A membership change node 0 decided: what it is (``change``: when
    ``change.restarts``, every seated node restarts its workers into the new epoch, whose
    ``reason`` is the line), the new membership, the node it is about, and the line every
    node says ("" when there is nothing to say: a node already lost, or a fatal loss, whose
    line is the job's end)."""

    change: Change
    members: Membership
    node: int
    line: str = ""


def on_loss(m: Membership, node: int, age: float, *, closed: bool, next_round: int,
            min_seats: int | None, nproc: int, host: str) -> Reseat:
    """Pure: ``node`` (on ``host``) silent ``age`` seconds, or its link ``closed`` bare: a
    spare takes its seat, the job shrinks by it, a lost spare is reported, or it is fatal
    (:func:`~meshrun.runtime.membership.after_loss`)."""
    members, change = after_loss(m, node, next_round=next_round, min_seats=min_seats)
    if change in (Change.FATAL, Change.KNOWN):
        return Reseat(change, members, node)
    if change == Change.SPARE_LOST:
        return Reseat(change, members, node,
                      spare_lost_line(node, host, age, len(members.spares),
                                      closed=closed))
    if change == Change.SHRINK:
        line = shrink_line(node, host, age, len(members.seats), nproc, min_seats or 1,
                           members.epoch, closed=closed)
    else:
        spare = members.seats[m.seats.index(node)]
        line = takeover_line(node, host, age, spare, members.ranks_of(spare, nproc),
                             members.epoch, closed=closed, spares_left=len(members.spares))
    return Reseat(change, replace(members, reason=line), node, line)


def on_return(m: Membership, node: int, host: str) -> Reseat:
    """Pure: lost ``node`` came back (a new claim under its rank, from ``host``): it waits
    as a spare, or is kept out after too many losses
    (:func:`~meshrun.runtime.membership.after_return`)."""
    back = after_return(m, node)
    if node in back.kept_out:
        return Reseat(Change.KEPT_OUT, back, node,
                      kept_out_line(node, host, back.strikes_of(node)))
    return Reseat(Change.RETURNED, back, node, returned_line(node, host, len(back.spares)))


def on_admit(m: Membership, max_seats: int, *, step: int | None, next_round: int, nproc: int,
             hosts: Mapping[int, str]) -> Reseat | None:
    """Pure: a shrunk job, at a checkpoint boundary (``step``: the newest complete
    checkpoint's, for the line; see :func:`~meshrun.runtime.membership.admit_at`), seats
    its lowest spare in a new last seat; None when it has no spare or is whole."""
    members = after_admit(m, max_seats, next_round=next_round)
    if members == m:
        return None
    node = members.seats[-1]
    line = grow_line(node, hosts.get(node, "?"), len(members.seats), nproc, members.epoch,
                     step)
    return Reseat(Change.GROW, replace(members, reason=line), node, line)
