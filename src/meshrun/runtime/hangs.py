"""One node's part in the hang protocol, over the job's store.

Node 0 judges (:meth:`Hangs.judge`): from each beat's progress values (the ones that count:
:func:`~meshrun.runtime.judges.fresh_progress`), no rank advancing for the hang timeout is
a hang (:func:`~meshrun.runtime.judges.hang_found`); node 0 sets ``probe`` in its watch and
probes its own workers (:mod:`meshrun.runtime.hang_probe`); once every node answered under
``stuck/<g>/<node>`` (or after :data:`~meshrun.runtime.judges.PROBE_WAIT_S`), its verdict
(:func:`~meshrun.runtime.judges.hang_verdict`) goes in the watch, and node 0 acts on it
once every other node counted itself in ``hang_seen/<g>`` (:meth:`Hangs.verdict_read`; or
after a few beats), so that the store's host does not stop before the others know. Every
other node follows the watch (:meth:`Hangs.follow`): it probes when asked and acts on the
verdict once.

Acting (:meth:`Hangs.act`) gives the ``hang`` event with this node's workers of the hung
attempt; with a restart the next generation starts: the hang keys carry the generation
``<g>`` (hangs handled so far, the same on every node), and what the hung attempt left does
not count as progress (:meth:`Hangs.restarted`, also after a membership change).

I/O: the store calls named; the probe's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import protocol
from ..signing import tallied, tally
from .events import Event, EventKind
from .hang_probe import HangProbe, Workers
from .judges import Hang, fresh_progress, hang_found, hang_verdict, verdict_due
from .membership import Membership


class Hangs:
    """Node ``node``'s hang state, in a job of ``nnodes`` nodes; ``halt``: set when the
    watchdog stops (a probe still waiting gives up)."""

    def __init__(self, node: int, nnodes: int, halt: threading.Event) -> None:
        self.node, self.nnodes = node, nnodes
        self.gen = 0                      # hangs handled so far (the same on every node)
        self.acted = -1                   # the generation whose verdict this node acted on
        self.hang: Hang | None = None     # node 0: the hang in hand
        self.seen: dict[int, tuple[tuple, float]] = {}  # rank -> (position, when it moved)
        self.seen_once = False            # node 0: some rank reported progress
        self.stale: dict[int, str] = {}   # progress values left by the restarted attempt
        self.restart_wall = 0.0           # wall time of the last restart: older reports are
                                          # the old workers' (one may land after ``stale``)
        self.probe = HangProbe(halt)

    def restarted(self) -> None:
        """The workers restart (the hung attempt's, or into a new membership epoch): the
        hang in hand and the positions seen are dropped; a report made before now is the old
        workers'. The caller reads the values they left into :attr:`stale`."""
        self.hang = None
        self.seen.clear()
        self.restart_wall = time.time()

    def judge(self, store: Any, now: float, values: Mapping[int, str], *, timeout: float,
              members: Membership, nproc: int, hosts: Mapping[int, str],
              workers: Workers) -> protocol.HangVerdict | None:
        """Node 0, a beat: no progress for ``timeout`` seconds starts a hang (and this
        node's probe); once the probes' answers are in, the verdict (returned when decided
        this beat)."""
        hang = self.hang
        if hang is None:
            values = fresh_progress(values, self.stale, self.restart_wall)
            if not any(values.values()):
                return None  # nobody reports progress (yet): hang detection is off
            self.seen_once = True
            self.seen, self.hang = hang_found(now, values, self.seen, timeout)
            if self.hang is not None:
                self.probe.start(store, self.gen, self.node, workers)
            return None
        if hang.verdict is not None:
            return None
        keys = [protocol.stuck_key(self.gen, n) for n in range(self.nnodes)]
        everyone = store.check(keys)
        if not verdict_due(now, hang, everyone):
            return None
        raws = dict(enumerate(store.multi_get(keys))) if everyone else \
            {n: store.get(k) for n, k in enumerate(keys) if store.check([k])}
        probes = {n: probe for n, probe in ((n, _probe(raw)) for n, raw in raws.items())
                  if probe is not None}
        hang.verdict = hang_verdict(now, hang, probes, members=members, nproc=nproc,
                                    hosts=hosts)
        hang.decided = now
        return hang.verdict

    def verdict_read(self, store: Any, now: float, wait: float) -> protocol.HangVerdict | None:
        """Node 0: its verdict, taken out of hand, once every other node has read it (one
        counter read a beat) or ``wait`` seconds after it was decided; None before."""
        hang = self.hang
        if hang is None or hang.verdict is None:
            return None
        if self.nnodes > 1 and now - hang.decided < wait and tallied(
                store, protocol.hang_seen_key(self.gen), range(1, self.nnodes),
                self.nnodes - 1) < self.nnodes - 1:
            return None
        self.hang = None
        return hang.verdict

    def follow(self, store: Any, watch: protocol.Watch,
               workers: Workers) -> protocol.HangVerdict | None:
        """The others, a beat: catch up with node 0's generation, probe when its watch asks,
        and the verdict to act on (once; counted in ``hang_seen/<g>``)."""
        if watch.gen > self.gen:  # node 0 acted on a hang this node missed: catch up
            self.gen = watch.gen
            self.seen.clear()
        if watch.gen == self.gen and watch.probe and self.probe.gen != self.gen:
            self.probe.start(store, self.gen, self.node, workers)
        if watch.gen == self.gen and watch.verdict is not None and self.acted != self.gen:
            self.acted = self.gen
            tally(store, protocol.hang_seen_key(self.gen), self.node)
            return watch.verdict
        return None

    def restart_pending(self, watch: protocol.Watch) -> bool:
        """The others: node 0's watch carries a restart verdict this node has not acted on
        yet (its rendezvous holds off a newer round until it has: see ``Rounds.hold``)."""
        return watch.verdict is not None and watch.verdict.restart and \
            watch.gen >= self.gen and self.acted != watch.gen

    def act(self, verdict: protocol.HangVerdict, alive: Callable[[], Mapping[int, int]], *,
            on_restart: Callable[[Event], None]) -> Event | None:
        """The ``hang`` event of ``verdict``, with this node's workers of the hung attempt
        (those probed, else those ``alive`` now): the event to stop on; or, with a restart,
        None once ``on_restart(event)`` (which kills them) ran and the next generation
        started."""
        self.acted = self.gen
        pids = self.probe.hung(self.gen, alive)
        event = Event(EventKind.HANG, verdict.line, stuck=[list(s) for s in verdict.stuck],
                      restart=verdict.restart, pids=tuple(sorted(pids.values())))
        if not event.restart:
            return event
        on_restart(event)
        self.gen += 1
        self.seen.clear()
        return None


def _probe(raw: bytes) -> protocol.Probe | None:
    """A node's probe; None for a value that is none (something else wrote it, or a signed
    store ignored it): that node counts as not probed yet."""
    try:
        return protocol.Probe.decode(raw)
    except (ValueError, *protocol.BAD_VALUE):
        return None
