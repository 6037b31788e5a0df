"""Heartbeats, node loss and hang detection, over the job's store: O(N) work on node 0.

Every node's agent runs one :class:`Watchdog` thread beside torch's elastic agent, with its
own client of the job's store (:mod:`meshrun.runtime.connection`: every call bounded). Each
``interval`` seconds, one beat: every node other than 0 writes its heartbeat
(``meshrun/hb/<node>``) and reads node 0's **watch** (``meshrun/watch``,
:class:`~meshrun.protocol.Watch`); node 0 reads every heartbeat in one call and publishes
one watch (its beat, the nodes it found lost, the goodbyes, the hang in hand, the notices,
the membership): 2 (N - 1) + 2 calls a beat on node 0's store, not N x N.

The thread is thin: it reads, hands what it read to the pure judges of
:mod:`meshrun.runtime.judges` (each takes ``now`` on the watchdog's ``clock``), hands their
decisions to the collaborators that act on them, and fires the events. A node silent for
``node_timeout`` without a goodbye is **lost**: every node stops with node 0's line, unless
a spare takes its seat or the job shrinks (:mod:`meshrun.runtime.seats`; every seated node
restarts its workers into the new epoch, :attr:`Watchdog.changes`); node 0 is lost for the
others when its watch or its store is silent as long; a liveness link closed bare names a
dead agent at once (:mod:`meshrun.runtime.liveness`); a ``failed`` goodbye
(:mod:`meshrun.runtime.ending`) is the ``peer-failed`` event. No rank progressing for
``hang_timeout`` is a **hang** (:mod:`meshrun.runtime.hangs`): the job stops
(:attr:`Watchdog.event`) or the hung workers restart (:attr:`Watchdog.restarts`). Node 0's
straggler check (``slow``) and status line get every beat's progress; every node prints
each notice once (:mod:`meshrun.runtime.notices`), and with a job token what it ignored
(meshrun/signing.py). The lines (runtime/events.py) are those ``meshrun diagnose`` reads.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import protocol
from . import judges, procs
from .connection import FIRST_CONNECT_S, Connection
from .ending import Ending
from .events import (
    Event,
    EventKind,
    Goodbye,
    node_lost_line,
    peer_failed_line,
    peer_stopped_line,
    replaced_line,
)
from .hang_probe import Workers
from .hangs import Hangs
from .judges import Reseat
from .liveness import Liveness
from .membership import UNKNOWN_CHECKPOINT as UNKNOWN_CHECKPOINT  # supervise.py reads it here
from .membership import Adoption, Change, Membership
from .notices import Notices
from .seats import Seats
from .store import BoundedStore, CallTimeout
from .supervision import Supervision


class Watchdog(threading.Thread):
    def __init__(self, *, host: str, port: int, node_rank: int, nnodes: int, world_size: int,
                 hosts: Mapping[int, str], node_timeout: float, hang_timeout: float,
                 interval: float = Supervision().beat, on_event: Callable[[Event], None],
                 local_pids: Callable[[], Mapping[int, int]] = dict,
                 restarts_left: Callable[[], int] = lambda: 0, log_dir: str = ".",
                 rounds: Any = None,
                 send_signal: Callable[[int, int], Any] = lambda pid, sig: os.kill(pid, sig),
                 slow: Any = None,
                 on_notice: Callable[[dict], None] = lambda record: None,
                 on_summary: Callable[..., None] = lambda summary, final=False: None,
                 clock: Callable[[], float] = time.monotonic,
                 spares: int = 0,
                 min_seats: int | None = None,
                 newest_checkpoint: Callable[[], int | None] = lambda: None,
                 status: Any = None,
                 on_status: Callable[[str], None] = lambda line: None,
                 on_warning: Callable[[str], None] = lambda line: print(
                     line, file=sys.stderr, flush=True),
                 signing: Any = None,
                 ) -> None:
        super().__init__(name="meshrun-watchdog", daemon=True)
        self.host, self.port = host, port
        self.node_rank, self.nnodes, self.world_size = node_rank, nnodes, world_size
        # a recipe's newest complete checkpoint step (-1: none yet; UNKNOWN_CHECKPOINT: not
        # read yet; None: not a recipe's job): a shrunk job takes a node back after a newer
        self.newest_checkpoint = newest_checkpoint
        self.hosts = dict(hosts)
        self.node_timeout, self.hang_timeout, self.interval = node_timeout, hang_timeout, interval
        self._limit = node_timeout  # silence that makes a node lost (see suspect())
        self.on_event = on_event
        # this node's workers, for a hang probe (hang_probe.Workers: what each is)
        self.local_pids, self.restarts_left = local_pids, restarts_left
        self.send_signal, self.log_dir = send_signal, log_dir
        self.slow, self.status = slow, status  # node 0: runtime.stragglers, runtime.status
        # a notice to print, once (every node); the per-node step times; the status line
        self.on_notice, self.on_summary, self.on_status = on_notice, on_summary, on_status
        self.clock = clock                  # the ages it judges by (tests: a clock of theirs)
        self.on_warning = on_warning        # node 0: refused liveness links, once each
        self._notices = Notices()
        self.event: Event | None = None  # the event that stops the job
        self.restarts: list[Event] = []  # hangs handled by restarting the workers
        self.changes: list[Event] = []   # membership changes this node restarted for
        self.goodbyes: dict[int, Goodbye | str] = {}  # node -> its goodbye (Goodbye.read)
        self._halt = threading.Event()
        self._wake = threading.Event()   # a beat now: a liveness link changed, or stop()
        self._links = Liveness(node_rank, nnodes, self._wake.set, signing)
        self._closed: set[int] = set()   # node 0: lost nodes whose link closed bare
        self._patience = max(2.0, interval * 3)  # how long one store call may take
        self._conn = Connection(host, port, self._patience, signing)
        self._beat = 0
        self._local_failure = False      # this node's workers failed (see suspect())
        self._seen: dict[int, tuple[str, float]] = {}  # node 0: node -> (heartbeat, since)
        self._bad: dict[int, str] = {}   # node 0: a heartbeat key holding no heartbeat
        self._lost: list[tuple[int, float]] = []  # node 0: (node, silence) lost for good
        self._watch: protocol.Watch | None = None  # the others: node 0's last watch, and
        self._watch_at = 0.0                       # when its beat last changed
        self._begun_at = self._store_ok_at = 0.0  # begin(); the last beat the store answered
        self._hangs = Hangs(node_rank, nnodes, self._halt)
        self._ending = Ending(self._conn, node_rank, nnodes)
        self._seats = Seats(node_rank, nnodes, world_size, spares=spares, rounds=rounds,
                            min_seats=min_seats)

    @property
    def members(self) -> Membership:  # node 0's last decision, as this node holds it
        return self._seats.members

    @property
    def rounds(self) -> Any:  # the rendezvous' rounds (runtime.rendezvous.Rounds), if any
        return self._seats.rounds

    @rounds.setter
    def rounds(self, rounds: Any) -> None:
        self._seats.rounds = rounds

    @property
    def progress_seen_once(self) -> bool:  # node 0: some rank reported progress
        return self._hangs.seen_once

    @property
    def _hub(self) -> Any:   # node 0's liveness-link hub (links.Hub), once open
        return self._links.hub

    @property
    def _link(self) -> Any:  # the others' liveness link (links.Link; False: could not open)
        return self._links.link

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self, status: Goodbye = Goodbye.DONE) -> None:
        """Say goodbye in this node's last heartbeat (so node 0 does not count it as lost),
        stop the thread and close the store connection. ``status``: a :class:`Goodbye`; on
        STOPPED the others act on their own evidence.

        The thread is joined (bounded by one beat and one call): a daemon thread still inside
        a C++ store call when the interpreter exits aborts the process ("terminate called
        without an active exception"). When the watchdog's connection is broken or stuck,
        the goodbye goes over a fresh one."""
        self._halt.set()
        self._wake.set()
        try:
            self._goodbye(status)
        finally:  # after the goodbye heartbeat (a bare close means death), even on a signal
            self._links.close(status)
        if self.slow is not None and not self.is_alive():
            try:  # the thread is over: the figures are still; after the goodbye, as files
                self.on_summary(self.slow.summary(), True)
            except Exception:  # noqa: BLE001, S110 - a summary must not fail the exit
                pass

    def _goodbye(self, status: Goodbye) -> None:
        if self.is_alive() and threading.current_thread() is not self:
            self.join(self.interval + self._patience + 1.0)
        self.mark_ended()
        if self.node_rank != 0:
            self._ending.say_goodbye(status, self._beat, self._patience)
            return

        def publish(store: BoundedStore) -> None:  # node 0's last watch: its own goodbye too
            self.goodbyes[0] = Goodbye(status)
            self._publish(store)

        # Node 0 hosts the store: after failing, or a verdict (a lost node, a hang), it keeps
        # it up two beats, so the others stop for that reason, not for its store gone.
        linger = (status == Goodbye.FAILED or self.event is not None) and self.nnodes > 1
        self._ending.say_goodbye(status, self._beat, self._patience, publish=publish,
                                 linger=2 * self.interval + 0.5 if linger else 0.0,
                                 lost={rank for rank, _ in self._lost})

    def suspect(self, seconds: float) -> None:
        """A local worker just failed (a collective broke): count a node as lost after only
        ``seconds`` of silence instead of ``node_timeout``. A live node's agent beats every
        ``interval`` whatever its workers do, so a short silence now means a dead node, and
        the survivors can name it in seconds rather than wait out the full timeout."""
        self._limit = min(self.node_timeout, seconds)
        self._local_failure = True  # a failed node of its own: another's failure is no news

    def clear_suspicion(self) -> None:
        """This node's workers start again (a new membership epoch): back to the node
        timeout, and another node's failure is news again (see :meth:`suspect`)."""
        self._limit, self._local_failure = self.node_timeout, False

    def run(self) -> None:
        self.begin()
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._halt.is_set() or self.beat():
                return

    def unwatched(self) -> str | None:
        """Node 0, at the end: a note when ``--hang-timeout`` had nothing to watch (no rank
        ever reported progress in a run longer than it: :func:`judges.unwatched_note`)."""
        return None if self.node_rank != 0 else judges.unwatched_note(
            self.clock(), self._begun_at, hang_timeout=self.hang_timeout,
            progress_seen=self.progress_seen_once)

    def begin(self) -> None:
        """Connect (node 0 also opens its liveness-link hub): what the thread does first.
        Tests call it, then :meth:`beat`, on a clock of their own, without the thread."""
        self._conn.use(self._conn.connect(first=True))
        self._begun_at = self._store_ok_at = self._watch_at = self.clock()
        if self.node_rank == 0:
            self._links.open_hub(self.host, self._conn.store)

    def beat(self) -> bool:
        """One beat at ``clock()``: heartbeat and judge (node 0: every heartbeat, then the
        watch; the others: their heartbeat, then node 0's watch). True once an event fired:
        the watchdog is done."""
        now = self.clock()
        store = self._conn.store
        self.goodbyes.update(self._links.goodbyes(self.goodbyes))
        if self.node_rank != 0 and self._links.node_0_died(self.goodbyes):
            self._fire(self._node_0_lost(now - self._watch_at, EventKind.STORE_LOST,
                                         closed=True))
            return True
        try:
            if store is None:
                store = self._conn.use(self._conn.connect())  # the first try failed, or broke
            if store is None:
                raise ConnectionError("no store connection")
            self._beat += 1
            if self.node_rank == 0:
                self._links.check(store, self.on_warning)
                event = self._judge(store, now)
            else:
                event = self._member(store, now)
            self._store_ok_at = now
            for line in self._conn.signing.verifier.news() if self._conn.signing else ():
                self.on_warning(line)
        except Exception as exc:  # noqa: BLE001 - the store host is gone or frozen
            event = self._store_failed(self.clock())  # the calls may have taken seconds
            if event is None and not (isinstance(exc, CallTimeout) and store is not None
                                      and store.stuck):
                self._conn.drop()  # a broken connection: a fresh one on the next beat
            # else a call is only slow (a loaded host): keep the connection; later calls
            # fail at once until it returns (a new handshake would cost more)
        if event is not None:
            self._fire(event)
        return event is not None

    def _store_failed(self, now: float) -> Event | None:
        """The others, a beat whose store calls failed: node 0 failed (its store closed with
        it), or its host is lost; None (node 0: always): a fresh try on the next beat."""
        kind = None if self.node_rank == 0 else judges.after_store_failure(
            now, self._store_ok_at, limit=self._limit, local_failure=self._local_failure,
            node_0_failed=self.goodbyes.get(0) == Goodbye.FAILED)
        if kind == EventKind.PEER_FAILED:
            return Event(kind, peer_failed_line(0, self.hosts.get(0, "?"), self.node_rank,
                                                store_closed=True), node=0)
        return self._node_0_lost(now - self._store_ok_at, kind) if kind is not None else None

    def _node_0_lost(self, age: float, event: EventKind = EventKind.NODE_LOST,
                     **how: Any) -> Event:
        """The others: node 0 is lost (``how``: :func:`node_lost_line`'s)."""
        return Event(event, node_lost_line(0, self.hosts.get(0, "?"), age, store_host=True,
                                           **how), node=0)

    # -- node 0: read every heartbeat, judge, publish one watch -----------------------------
    def _judge(self, store: BoundedStore, now: float) -> Event | None:
        others = range(1, self.nnodes)
        raws = self._conn.read_all(store, [protocol.heartbeat_key(r) for r in others])
        found = judges.heard(now, {r: protocol.text(raw) for r, raw in zip(others, raws)},
                             self._seen, self._bad)
        self._seen, self._bad = found.seen, found.bad
        self.goodbyes.update(found.goodbyes)
        if not self._lost:
            self._judge_members(store, now)
        if not self._lost and (self.hang_timeout > 0 or self.slow is not None):
            values = self._progress_values(store) if self.slow is not None or \
                self._hangs.hang is None else {}
            if judges.hang_watched(self.hang_timeout, self.members, self.goodbyes,
                                   ended=self._ending.ended_in == self.members.epoch):
                verdict = self._hangs.judge(store, now, values, timeout=self.hang_timeout,
                                            members=self.members, nproc=self._seats.nproc,
                                            hosts=self.hosts, workers=self._workers())
                if verdict is not None and verdict.restart and self.rounds is not None:
                    self.rounds.hold()  # node 0 restarts its workers last: see Rounds.hold
            if self.slow is not None:
                try:
                    self._judge_slow(values, now)
                except Exception:  # noqa: BLE001, S110 - a warning must never cost a beat
                    pass
        if self.status is not None and not self._lost and self.status.due(now):
            try:
                self._status_line(store, now)
            except Exception:  # noqa: BLE001, S110 - a status line must never cost a beat
                pass
        self._seats.arrived(store, self.goodbyes)
        self._publish(store)
        if self._lost:
            rank, age = self._lost[0]
            return Event(EventKind.NODE_LOST, node_lost_line(
                rank, self.hosts.get(rank, "?"), age, closed=rank in self._closed,
                bad=self._bad.get(rank, "")), node=rank)
        return self._peer_goodbye() or self._act_on_hang(store)

    def _judge_members(self, store: BoundedStore, now: float) -> None:
        """Node 0: lost nodes that came back, a shrunk job's admission, then the nodes lost
        this beat (the first fatal one ends the judgement: the job stops)."""
        if self.members.lost:
            for reseat in self._seats.returns(store, self.hosts):
                self._seen.pop(reseat.node, None)
                self.goodbyes.pop(reseat.node, None)
                self._links.forget(reseat.node)
                self._reseated(reseat, store)
                if reseat.change == Change.RETURNED:
                    self._seen[reseat.node] = ("", now)  # at beat 0: its first connection
        if self._seats.min_seats is not None:
            reseat = self._seats.admit(store, self.newest_checkpoint, self.hosts)
            if reseat is not None:
                self._reseated(reseat, store)
        for found in judges.lost_nodes(now, range(1, self.nnodes), seen=self._seen,
                                       started=self._begun_at, limit=self._limit,
                                       first_connect=FIRST_CONNECT_S, goodbyes=self.goodbyes,
                                       dead=self._links.dead(), members=self.members):
            reseat = self._seats.lose(store, found, self.hosts.get(found.node, "?"))
            if reseat.change == Change.FATAL:
                self._lost.append((found.node, found.age))
                if found.closed:
                    self._closed.add(found.node)
                return
            self._reseated(reseat, store)

    def _reseated(self, reseat: Reseat, store: BoundedStore) -> None:
        """Node 0, a membership change published: every seated node restarts its workers
        into the new epoch, or its line is a notice (a spare lost, a node back or kept out)."""
        if reseat.change.restarts:
            self._restart_for(Event(EventKind.TAKEOVER, reseat.line, node=reseat.node), store)
        elif reseat.line:
            self.on_notice({"kind": reseat.change.value, "node": reseat.node,
                            "line": reseat.line})

    def _restart_for(self, event: Event, store: BoundedStore | None) -> None:
        """A new epoch seats this node (or keeps it seated): its workers restart into the
        epoch's round (``on_event`` kills them; the launcher starts them again). What the
        judges held of the old epoch is dropped: the suspicion after a local failure, the
        hang in hand, the progress the old workers left."""
        self.clear_suspicion()
        self._hangs.restarted()
        if store is not None and self.node_rank == 0:
            try:
                self._hangs.stale = self._progress_values(store)
            except Exception:  # noqa: BLE001, S110 - the next beat reads them again
                pass
        if self.slow is not None and hasattr(self.slow, "reseat"):
            self.slow.reseat(self.members.seats)
        self.changes.append(event)
        self.on_event(event)

    def _publish(self, store: BoundedStore) -> None:
        hang = self._hangs.hang
        store.set(protocol.WATCH, protocol.Watch(
            self._beat, tuple(self._lost), {r: str(g.value if isinstance(g, Goodbye) else g)
                                            for r, g in self.goodbyes.items()},
            self._hangs.gen, hang is not None, hang.verdict if hang is not None else None,
            self._seats.wanted,
            tuple(sorted(self._closed)), self._notices.newest,
            self.members.to_json() if self._seats.elastic else None).encode())

    # -- every other node: beat, read node 0's watch ----------------------------------------
    def _member(self, store: BoundedStore, now: float) -> Event | None:
        store.set(protocol.heartbeat_key(self.node_rank),
                  protocol.Heartbeat(self._beat).encode())
        self._links.open_link(store)
        raw = store.get(protocol.WATCH)
        try:
            watch = protocol.Watch.decode(raw)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError):
            # not node 0's watch (something else wrote the key): no sign of node 0's life,
            # and named if node 0 is found lost while it lasts
            age = judges.node_0_silence(now, self._watch_at, limit=self._limit,
                                        grace=FIRST_CONNECT_S if self._watch is None else 0.0,
                                        goodbye=0 in self.goodbyes)
            return None if age is None else self._node_0_lost(
                age, bad=bytes(raw).decode(errors="replace"), key=f"watch ({protocol.WATCH})",
                kind="value")
        if self._watch is None or watch.beat != self._watch.beat:
            self._watch_at = now
        self._watch = watch
        self.goodbyes = {r: Goodbye.read(g.encode()) for r, g in watch.goodbyes.items()}
        adopted, members = self._seats.adopt(watch.members), self.members
        if adopted == Adoption.REPLACED:  # found lost (frozen, e.g.) and its seat given away
            return Event(EventKind.REPLACED, replaced_line(self.node_rank, members.reason),
                         node=self.node_rank)
        if adopted == Adoption.RESTART:
            self._restart_for(Event(EventKind.TAKEOVER, members.reason,
                                    node=members.lost[-1] if members.lost else None), None)
        self._seats.follow(watch, hold=self._hangs.restart_pending(watch))
        for record in self._notices.unseen(watch.notices):
            self.on_notice(record)
        if watch.lost:
            rank, age = watch.lost[0]
            return Event(EventKind.NODE_LOST, node_lost_line(
                rank, self.hosts.get(rank, "?"), age, closed=rank in watch.closed), node=rank)
        age = judges.node_0_silence(now, self._watch_at, limit=self._limit,
                                    grace=FIRST_CONNECT_S if watch.beat == 0 else 0.0,
                                    goodbye=0 in self.goodbyes)
        if age is not None:  # node 0's agent froze (its store still answers)
            return self._node_0_lost(age)
        event = self._peer_goodbye()
        if event is not None or self.hang_timeout <= 0:
            return event
        verdict = self._hangs.follow(store, watch, self._workers())
        return self._act(verdict) if verdict is not None else None

    def _peer_goodbye(self) -> Event | None:
        """Another seated node's goodbye that ends this node's part: it failed (and this
        node's own workers did not), or it was stopped while this node's workers had all
        finished (torch's exit barrier would wait for it 300 s)."""
        me = self.node_rank
        node = judges.failed_peer(self.goodbyes, me, self.members,
                                  local_failure=self._local_failure)
        if node is not None:
            return Event(EventKind.PEER_FAILED, peer_failed_line(
                node, self.hosts.get(node, "?"), me), node=node)
        node = judges.stopped_peer(self.goodbyes, me, self.members)
        if node is not None and procs.in_exit_barrier(threading.main_thread().ident):
            return Event(EventKind.PEER_STOPPED, peer_stopped_line(
                node, self.hosts.get(node, "?"), me), node=node)
        return None

    # -- hangs (node 0 judges; no step of it holds up a beat) -------------------------------
    def _world(self) -> range:
        """The global ranks of this epoch (fewer than at the start once the job shrank)."""
        return range(min(self.world_size, len(self.members.seats) * self._seats.nproc))

    def _progress_values(self, store: BoundedStore) -> dict[int, str]:
        """Every rank's progress value (this epoch's ranks), in one call."""
        keys = [protocol.progress_key(r) for r in self._world()]
        return {r: protocol.text(v) for r, v in enumerate(self._conn.read_all(store, keys))}

    def _act_on_hang(self, store: BoundedStore) -> Event | None:
        """Node 0, once its verdict is out: act when every node has read it (or after a few
        beats), so that node 0 (the store's host) does not stop before the others know."""
        verdict = self._hangs.verdict_read(store, self.clock(), 3 * self.interval + 2.0)
        event = self._act(verdict) if verdict is not None else None
        if verdict is not None and event is None:  # restarted: what the hung attempt left
            self._hangs.restarted()                 # is stale
            self._hangs.stale = self._progress_values(store)
            self._publish(store)
        return event

    def _act(self, verdict: protocol.HangVerdict) -> Event | None:
        """Act on node 0's verdict: the event to stop on, or None once the workers restart."""
        return self._hangs.act(verdict, self.local_pids, on_restart=self._hang_restart)

    def _hang_restart(self, event: Event) -> None:  # on_event kills the hung workers
        self.restarts.append(event)
        self.on_event(event)

    def _workers(self) -> Workers:
        """This node's workers, for a hang probe."""
        return Workers(self.local_pids, self.restarts_left, self.send_signal, self.log_dir)

    # -- node 0: slow nodes and the status line ---------------------------------------------
    def _status_line(self, store: BoundedStore, now: float) -> None:
        """Node 0: the job's status line (:mod:`meshrun.runtime.status`) when one is due."""
        self.status.checkpoint(now, self.newest_checkpoint())
        summary = self.slow.summary() if self.slow is not None else None
        if summary is not None:   # a lost node's totals stay in the summary: not a candidate
            summary = {**summary, "nodes": [r for r in summary.get("nodes", [])
                                            if self.members.seated(r.get("node", -1))]}
        line = self.status.beat(now, self._progress_values(store), summary)
        if line is not None:
            self.on_status(line)

    def _judge_slow(self, values: dict[int, str], now: float) -> None:
        """Node 0: the straggler check (:mod:`meshrun.runtime.stragglers`) on this beat's
        progress; its notices go in the watch for every node, and to this node's console."""
        for notice in self.slow.observe(now, values):
            self.on_notice(self._notices.number(notice.to_json()))
        if self._beat % 10 == 0:
            self.on_summary(self.slow.summary())

    # -- the end of the workers, the job's first cause (meshrun.runtime.ending) -------------
    def offer_cause(self, cause: protocol.Cause) -> None:
        """Offer this node's first cause as the job's (the first offered is kept)."""
        self._ending.offer_cause(cause, self.members.epoch)

    def job_cause(self, wait: float = 0.0, poll: float = 0.1) -> protocol.Cause | None:
        """The job's first cause, waiting up to ``wait`` seconds for one; None if none."""
        return self._ending.job_cause(self.members.epoch, wait, poll)

    def mark_ended(self) -> None:
        """Count this node in ``meshrun/ended``: its workers are over (once per epoch)."""
        self._ending.mark_ended(self.members)

    def all_ended(self) -> bool:
        """Every seated node's workers are over: none was lost, nobody to wait for."""
        return self._ending.all_ended(self.members)

    def others_done(self) -> bool:
        """Every other seated node has said goodbye, as this node last read it."""
        return judges.others_said_goodbye(dict(self.goodbyes), self.members, self.node_rank)

    def _fire(self, event: Event) -> None:
        """A job-stopping event: record it, then let ``on_event`` stop the workers."""
        self.event = event
        self.on_event(event)

