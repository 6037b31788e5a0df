"""Heartbeats, node loss and hang detection, over the job's store: O(N) work on node 0.

Every node's agent runs one :class:`Watchdog` thread beside torch's elastic agent, with
its own client connection to the job's store (every call bounded: a dead or frozen store
host cannot block it). Every ``interval`` seconds:

- every node other than 0 writes its heartbeat (``meshrun/hb/<node>``) and reads node 0's
  **watch** (``meshrun/watch``, :class:`~meshrun.protocol.Watch`): two calls a beat;
- node 0 reads every heartbeat in one call and publishes one watch: its own beat, the nodes
  it found lost, the goodbyes it read, and the hang in hand. So node 0's store serves
  2 (N - 1) + 2 calls a beat, not N x N.

A node whose heartbeat has not changed for ``node_timeout`` seconds (measured on node 0's
own monotonic clock, so clock skew does not matter) and that has not said goodbye is
**lost**: node 0 names it in the watch and every node stops with the same line. Node 0
itself is lost when its watch stops changing for ``node_timeout`` (its agent froze) or its
store stops answering (its host died or was cut off): every other node sees that on its own.
A node's goodbye (``done``, ``failed``, ``stopped``: :class:`~meshrun.runtime.events.Goodbye`)
rides in its last heartbeat; a ``failed`` one is the ``peer-failed`` event for the others.

Hangs: node 0 reads the workers' progress (``meshrun/progress/<rank>``: the collectives
each rank issued and its active seconds, from the worker shim's observer,
:mod:`meshrun.worker.observe`, and its step where the script calls :func:`meshrun.progress`)
in one call a beat. Once any rank has reported, no rank advancing (none of those moving)
for ``hang_timeout`` seconds, while no node's workers are over yet, is a **hang**: node 0
sets ``probe`` in the watch;
every node dumps its workers' Python stacks (SIGUSR1 -> ``stacks/rank<R>.txt``) and reads
their process state on a separate thread (the beats go on meanwhile) and answers with the
suspicious ranks and the restarts its agent has left (``stuck/<g>/<node>``); node 0 names
the stuck ranks (:func:`~meshrun.runtime.events.hang_suspects`: those behind the others
by step, then by collectives; when all are level, the ones whose process is stopped, else
that did not answer the stack dump, else that are outside any collective) and puts its
verdict in the watch,
with ``restart`` true when every node still has a restart left. Every node acts on that
verdict: without restarts it records the event (:attr:`Watchdog.event`) and its
``on_event`` stops the job (SIGTERM to its own process, which torch's agent turns into an
orderly shutdown of the workers); with restarts it kills only the workers it probed, so
each node's agent restarts them through the rendezvous, appends the event to
:attr:`Watchdog.restarts` and judges the next attempt afresh: the hang keys carry a
generation ``<g>`` (hangs handled so far, the same on every node), and progress left by the
hung attempt does not count until a rank of the new attempt reports.

Slow nodes: the same progress values, read once a beat, go to node 0's straggler check
(:mod:`meshrun.runtime.stragglers`, ``slow``); its notices ride in the watch (``notices``,
numbered) and every node hands each new one to ``on_notice`` once; ``on_summary`` gets
each node's step times every ten beats and, with ``final`` true, at the end.

Liveness links (:mod:`meshrun.runtime.links`): node 0 also listens for one idle TCP
connection from every other node's watchdog; one that closes without a goodbye byte is a
node whose agent died, named at the next beat (which the link wakes at once) instead of
after ``node_timeout``; the other nodes learn of node 0's death the same way.

The one-line messages are :func:`~meshrun.runtime.events.node_lost_line` and
:func:`~meshrun.runtime.events.hang_line`; ``meshrun diagnose`` recognises them.

This module is longer than the others because it is one state machine: node 0's
judgement, the members' beat, the hang probe and the goodbye share the same state (the
pure decisions are in :mod:`meshrun.runtime.events`, the bounded client in
:mod:`meshrun.runtime.store`, the links in :mod:`meshrun.runtime.links`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .. import protocol
from . import procs
from .events import (
    PROBE_REASONS,
    Event,
    EventKind,
    Goodbye,
    catches,
    grow_line,
    hang_line,
    hang_suspects,
    in_collective,
    kept_out_line,
    node_lost_line,
    peer_failed_line,
    peer_stopped_line,
    process_state,
    replaced_line,
    restart_verdict,
    returned_line,
    shrink_line,
    spare_lost_line,
    takeover_line,
)
from .judges import lost_nodes, progress_moved
from .membership import Change, Membership, after_admit, after_loss, after_return
from .store import BoundedStore, CallTimeout, StoreConnect, say
from .supervision import Supervision

UNKNOWN_CHECKPOINT = -2   # newest_checkpoint(): the recipe's folder not read (yet)


def _goodbye_in(raw: bytes) -> bool:
    """A heartbeat value carries a goodbye (a value that is no heartbeat carries none)."""
    try:
        return bool(protocol.Heartbeat.decode(raw).goodbye)
    except ValueError:
        return False


def _before(value: str, wall: float) -> bool:
    """A progress report made before ``wall`` (its own wall-clock time): an old worker's."""
    try:
        return protocol.Progress.decode(value).at < wall
    except (ValueError, TypeError, IndexError):
        return False


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


_PROBE_WAIT_S = 6.5  # how long node 0 waits for every node's probe (a stack dump takes 1.5 s)
_DUMP_WAIT_S = 1.5   # at most this long for the probed workers' stack dumps
_DUMP_POLL_S = 0.05
_FIRST_CONNECT_S = 10.0  # a watchdog's first connection may take this long (a loaded host)


def _position(value: str, moved: bool = False) -> tuple:
    """A progress value's position: (step, collectives issued), compared across ranks (a
    rank behind the others is the one they wait for); with ``moved``, its active seconds
    too (what changes while it progresses: protocol.Progress.moved). An undecodable value
    is nowhere."""
    try:
        p = protocol.Progress.decode(value)
    except ValueError:
        return (-1, -1, -1) if moved else (-1, -1)
    return p.moved if moved else p.position


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
                 ) -> None:
        super().__init__(name="meshrun-watchdog", daemon=True)
        self.host, self.port = host, port
        self.node_rank, self.nnodes, self.world_size = node_rank, nnodes, world_size
        self.min_seats = min_seats   # --nnodes MIN:MAX's MIN: shrink to it (None: never)
        # a recipe's newest complete checkpoint step (-1: none yet; UNKNOWN_CHECKPOINT: not
        # read yet; None: not a recipe's job): a shrunk job takes a node back once a
        # checkpoint newer than ``_admit_after``
        self.newest_checkpoint, self._admit_after = newest_checkpoint, None
        self.status, self.on_status = status, on_status  # node 0: meshrun.runtime.status
        self.hosts = dict(hosts)
        self.node_timeout, self.hang_timeout, self.interval = node_timeout, hang_timeout, interval
        self._limit = node_timeout  # silence that makes a node lost (see suspect())
        self.on_event = on_event
        self.local_pids = local_pids  # rank -> pid of this node's workers
        self.restarts_left = restarts_left  # restarts this node's agent has left
        self.log_dir = log_dir              # the run's log folder (stacks/ go there)
        self.rounds = rounds                # meshrun.runtime.rendezvous.Rounds, if any
        self.send_signal = send_signal      # signals a worker listed by local_pids
        self.slow = slow                    # node 0: meshrun.runtime.stragglers.Stragglers
        self.on_notice = on_notice          # every node: a straggler notice to print, once
        self.on_summary = on_summary        # node 0: the per-node step times, now and then
        self.clock = clock                  # the ages it judges by (tests: a clock of theirs)
        self.on_warning = on_warning        # node 0: refused liveness links, once each
        self._refused: dict[str, int] = {}  # node 0: such lines said, and how often seen
        self._notices: list[dict] = []      # node 0: the newest notices (the watch's)
        self._notice_seq = 0                # the newest notice made (node 0) or printed
        self.event: Event | None = None  # the event that stops the job
        self.restarts: list[Event] = []  # hangs handled by restarting the workers
        self.goodbyes: dict[int, Goodbye | str] = {}  # node -> its goodbye (Goodbye.read)
        self._halt = threading.Event()
        self._wake = threading.Event()   # a beat now: a liveness link changed, or stop()
        self._hub: Any = None            # node 0: meshrun.runtime.links.Hub
        self._link: Any = None           # the others: meshrun.runtime.links.Link
        self._closed: set[int] = set()   # node 0: lost nodes whose link closed bare
        self._connecting: StoreConnect | None = None  # a connection attempt still under way
        self._lock = threading.Lock()    # guards _store: the agent's thread reads it too
        self._store: BoundedStore | None = None
        self._patience = max(2.0, interval * 3)  # how long one store call may take
        self._beat = 0
        self._local_failure = False      # this node's workers failed (see suspect())
        # node 0: every node's last heartbeat value and when it changed
        self._seen: dict[int, tuple[str, float]] = {}
        self._lost: list[tuple[int, float]] = []
        self._bad: dict[int, str] = {}   # node 0: a heartbeat key holding no heartbeat
        # the others: node 0's last watch and when its beat changed
        self._watch: protocol.Watch | None = None
        self._watch_at = 0.0
        self._begun_at = self._store_ok_at = 0.0  # begin(); the last beat the store answered
        # hangs
        self._gen = 0                    # hangs handled so far (the same on every node)
        self._probed: dict[int, int] = {}  # rank -> pid probed for the current generation
        self._probed_gen = -1
        self._probe_thread: threading.Thread | None = None
        self._acted_gen = -1             # the generation whose verdict this node acted on
        self._stale: dict[int, str] = {}  # progress values left by the hung attempt
        self._restart_wall = 0.0          # wall time of the last restart: older reports are
                                          # the old workers' (one may land after _stale)
        self._progress_seen: dict[int, tuple[str, float]] = {}
        self._hang: dict[str, Any] | None = None  # node 0: the hang in hand
        self._present: set[str] = set()  # key groups known to exist (multi_get is safe)
        # membership (meshrun.runtime.membership): node 0 decides it, the others adopt it
        self.members = (rounds.members if rounds is not None else None) \
            or Membership.initial(nnodes, spares)
        if rounds is not None:
            with rounds.lock:
                rounds.members = self.members
        self._elastic = spares > 0 or self.members.epoch > 0  # publish the membership
        self.nproc = max(1, world_size // max(1, len(self.members.seats)))
        self._max_seats = world_size // self.nproc   # the seats a shrunk job grows back to
        self.changes: list[Event] = []   # membership changes this node restarted for
        self._claims: dict[int, bytes] = {}  # node 0: a lost node's claim (to see it return)
        self._ended_in = -1              # the membership epoch this node counted itself ended in

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
            self._close_links(status)
        if self.slow is not None and not self.is_alive():
            try:  # the thread is over: the figures are still; after the goodbye, as files
                self.on_summary(self.slow.summary(), True)
            except Exception:  # noqa: BLE001, S110 - a summary must not fail the exit
                pass

    def _goodbye(self, status: Goodbye) -> None:
        if self.is_alive() and threading.current_thread() is not self:
            self.join(self.interval + self._patience + 1.0)
        self.mark_ended()
        store = self._usable_store()
        if store is None:
            return
        try:
            self._write_goodbye(store, status)
            if self.node_rank == 0:
                self.goodbyes[0] = Goodbye(status)
                self._publish(store, self.clock())
                if (status == Goodbye.FAILED or self.event is not None) and self.nnodes > 1:
                    # Node 0 hosts the store: keep it up for two beats, so the others read
                    # that node 0 failed, or its verdict (a lost node, a hang), and stop for
                    # that reason instead of finding its store gone.
                    until = time.monotonic() + 2 * self.interval + 0.5  # a real wait
                    while time.monotonic() < until and not self._everyone_said_goodbye(store):
                        time.sleep(0.1)
        except Exception:  # noqa: BLE001 - the store may be gone; or this connection was
            self._goodbye_again(status)   # shut (a stop signal in torch's exit barrier)
        with self._lock:
            self._store = None
        store.close(self._patience)

    def _write_goodbye(self, store: BoundedStore, status: Goodbye) -> None:
        """This node's last heartbeat, carrying its goodbye."""
        store.set(protocol.heartbeat_key(self.node_rank),
                  protocol.Heartbeat(self._beat + 1, Goodbye(status).value).encode())

    def _goodbye_again(self, status: Goodbye) -> None:
        """The goodbye once more, over a fresh connection of its own (bounded like every
        call), closed after it."""
        fresh = None
        try:
            fresh = self._connect()
            if fresh is not None:
                self._write_goodbye(fresh, status)
        except Exception:  # noqa: BLE001, S110 - the store is gone: nothing to tell then
            pass
        finally:
            if fresh is not None:
                fresh.close(self._patience)

    def _close_links(self, status: Goodbye) -> None:
        letter = Goodbye(status).value[:1]
        hub, link, self._hub, self._link = self._hub, self._link, None, None
        for end in (hub, link):
            if end:  # a link that could not open is False
                try:
                    end.close(letter)
                except Exception:  # noqa: BLE001, S110 - ending anyway
                    pass

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

    progress_seen_once = False   # node 0: some rank reported progress; the hang watch armed

    def unwatched(self) -> str | None:
        """Node 0, at the end of a run longer than ``hang_timeout``: a note when no rank ever
        reported progress, so that ``--hang-timeout`` had nothing to watch (a script whose
        process groups meshrun cannot observe and that never calls ``meshrun.progress()``)."""
        if self.node_rank != 0 or self.hang_timeout <= 0 or self.progress_seen_once:
            return None
        if not self._begun_at or self.clock() - self._begun_at < self.hang_timeout:
            return None   # never connected (0.0), or a run shorter than the timeout
        return (f"meshrun: note: --hang-timeout {self.hang_timeout:g} had nothing to watch: no "
                "rank reported progress (no collective seen, no meshrun.progress(step) call), "
                "so a hang would have waited for the process group's own timeout; call "
                "meshrun.progress(step) once a step (docs/guide.md, \"What meshrun sees of your "
                "script\")")

    def begin(self) -> None:
        """Connect (node 0 also opens its liveness-link hub): what the thread does first.
        Tests call it, then :meth:`beat`, on a clock of their own, without the thread."""
        self._set_store(self._connect(first=True))
        self._begun_at = self._store_ok_at = self._watch_at = self.clock()
        if self.node_rank == 0:
            self._open_hub()

    def beat(self) -> bool:
        """One beat at ``clock()``: heartbeat and judge (node 0: every heartbeat, then the
        watch; the others: their heartbeat, then node 0's watch). True once an event fired:
        the watchdog is done."""
        now = self.clock()
        store = self._store
        self._link_goodbyes()
        if self.node_rank != 0 and self._node_0_died():
            self._fire(Event(EventKind.STORE_LOST, node_lost_line(
                0, self.hosts.get(0, "?"), now - self._watch_at, store_host=True,
                closed=True), node=0))
            return True
        try:
            if store is None:
                store = self._set_store(self._connect())  # the first try failed, or broke
            if store is None:
                raise ConnectionError("no store connection")
            self._beat += 1
            if self.node_rank == 0:
                self._check_links(store)
                event = self._judge(store, now, self._begun_at)
            else:
                event = self._member(store, now)
            self._store_ok_at = now
        except Exception as exc:  # noqa: BLE001 - the store host is gone or frozen
            now = self.clock()  # the failed calls may have taken seconds
            if self.node_rank != 0 and self.goodbyes.get(0) == Goodbye.FAILED \
                    and not self._local_failure:
                self._fire(Event(EventKind.PEER_FAILED, peer_failed_line(
                    0, self.hosts.get(0, "?"), self.node_rank, store_closed=True), node=0))
                return True
            if self.node_rank != 0 and now - self._store_ok_at >= self._limit:
                self._fire(Event(EventKind.STORE_LOST, node_lost_line(
                    0, self.hosts.get(0, "?"), now - self._store_ok_at, store_host=True),
                    node=0))
                return True
            if not (isinstance(exc, CallTimeout) and store is not None and store.stuck):
                self._drop_store()  # a broken connection: a fresh one on the next beat
            # else a call is only slow (a loaded host): keep the connection; later calls
            # fail at once until it returns (a new handshake would cost more)
            return False
        if event is not None:
            self._fire(event)
            return True
        return False

    # -- node 0: read every heartbeat, publish one watch ------------------------------------
    def _judge(self, store: BoundedStore, now: float, started: float) -> Event | None:
        keys = [protocol.heartbeat_key(r) for r in range(1, self.nnodes)]
        for rank, raw in zip(range(1, self.nnodes), self._read_all(store, keys)):
            value = protocol.text(raw)
            if value and (rank not in self._seen or self._seen[rank][0] != value):
                try:
                    beat = protocol.Heartbeat.decode(value)
                except ValueError:  # not a heartbeat: no sign of life, and named if lost
                    self._bad[rank] = value
                    continue
                self._bad.pop(rank, None)
                self._seen[rank] = (value, now)
                if beat.goodbye:
                    self.goodbyes[rank] = Goodbye.read(beat.goodbye.encode())
        if not self._lost:
            if self.members.lost:
                self._returns(store, now)
            if self.min_seats is not None and self.node_rank == 0:
                self._admit(store)
            dead = self._hub.dead() if self._hub is not None else {}
            for found in lost_nodes(now, range(1, self.nnodes), seen=self._seen,
                                    started=started, limit=self._limit,
                                    first_connect=_FIRST_CONNECT_S, goodbyes=self.goodbyes,
                                    dead=dead, members=self.members):
                self._lose(store, found.node, found.age, closed=found.closed)
                if self._lost:
                    break
        if not self._lost and (self.hang_timeout > 0 or self.slow is not None):
            values = self._progress_values(store) if self.slow is not None or \
                self._hang is None else {}
            # once some node's workers are over (this one's, or another said goodbye) the
            # job is ending: what is left (rank 0 saving or uploading with no collective)
            # is no hang
            if self.hang_timeout > 0 and self._ended_in != self.members.epoch and \
                    not any(self.members.seated(n) for n in self.goodbyes):
                self._judge_hang(store, now, values)
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
        self._judge_rounds(store)
        self._publish(store, now)
        if self._lost:
            rank, age = self._lost[0]
            return Event(EventKind.NODE_LOST, node_lost_line(
                rank, self.hosts.get(rank, "?"), age, closed=rank in self._closed,
                bad=self._bad.get(rank, "")), node=rank)
        return self._peer_failed() or self._act_on_hang(store)

    # -- membership (node 0 decides: meshrun.runtime.membership) --------------------------
    def _lose(self, store: BoundedStore, rank: int, age: float, *, closed: bool) -> None:
        """Node 0: ``rank`` is lost (or a spare left). Fatal without a spare (``_lost``);
        a spare lost is reported; a seated node's seat goes to a spare and every seated
        node restarts its workers into the new epoch."""
        current = self.rounds.current if self.rounds is not None else -1
        members, change = after_loss(self.members, rank, next_round=current + 1,
                                     min_seats=self.min_seats)
        if change == Change.FATAL:
            self._lost.append((rank, age))
            if closed:
                self._closed.add(rank)
            return
        if change == Change.KNOWN:
            return
        host = self.hosts.get(rank, "?")
        self._claims[rank] = self._claim(store, rank)
        if change == Change.SPARE_LOST:
            self._set_members(store, members)
            self.on_notice({"kind": "spare-lost", "node": rank, "line": spare_lost_line(
                rank, host, age, len(members.spares))})
            return
        if change == Change.SHRINK:
            line = shrink_line(rank, host, age, len(members.seats), self.nproc,
                               self.min_seats or 1, members.epoch, closed=closed)
            self._set_members(store, replace(members, reason=line))
            self._restart_for(Event(EventKind.TAKEOVER, line, node=rank), store)
            return
        seat = self.members.seat_of(rank)
        assert seat is not None  # after_loss decided a take-over of a seated node
        spare = members.seats[seat]
        line = takeover_line(rank, host, age, spare, members.ranks_of(spare, self.nproc),
                             members.epoch, closed=closed, spares_left=len(members.spares))
        self._set_members(store, replace(members, reason=line))
        self._restart_for(Event(EventKind.TAKEOVER, line, node=rank), store)

    def _admit(self, store: BoundedStore) -> None:
        """Node 0 of a job that shrank: a node that came back (a spare now) takes a new last
        seat at the next checkpoint boundary: once a complete checkpoint newer than the
        newest when it came back exists (a recipe's job; the steps trained since that save
        in the beat before the restart are trained again), at once for any other script
        (which resumes from its own newest checkpoint)."""
        m = self.members
        if not m.spares or len(m.seats) >= self._max_seats:
            self._admit_after = None
            return
        step = self.newest_checkpoint()
        if step is not None:
            if step == UNKNOWN_CHECKPOINT:
                return                     # not read yet (or the folder failed): wait
            if self._admit_after is None:
                self._admit_after = step   # the boundary to pass
                return
            if step <= self._admit_after:
                return
        self._admit_after = None
        current = self.rounds.current if self.rounds is not None else -1
        members = after_admit(m, self._max_seats, next_round=current + 1)
        node = members.seats[-1]
        line = grow_line(node, self.hosts.get(node, "?"), len(members.seats), self.nproc,
                         members.epoch, step)
        self._set_members(store, replace(members, reason=line))
        self._restart_for(Event(EventKind.TAKEOVER, line, node=node), store)

    def _returns(self, store: BoundedStore, now: float) -> None:
        """Node 0: a lost node whose claim changed was started again: it waits as a spare."""
        for rank in self.members.lost:
            claim = self._claim(store, rank)
            if not claim or claim == self._claims.get(rank):
                continue
            self._claims.pop(rank, None)
            back = after_return(self.members, rank)
            self._set_members(store, back)
            self._seen.pop(rank, None)
            self.goodbyes.pop(rank, None)
            if self._hub is not None:
                self._hub.forget(rank)
            try:
                self.hosts[rank] = protocol.NodeClaim.decode(claim).host
            except ValueError:
                pass
            if rank in back.kept_out:
                self.on_notice({"kind": "node-kept-out", "node": rank, "line": kept_out_line(
                    rank, self.hosts.get(rank, "?"), back.strikes_of(rank))})
                continue
            self.on_notice({"kind": "node-returned", "node": rank, "line": returned_line(
                rank, self.hosts.get(rank, "?"), len(self.members.spares))})
            self._seen[rank] = ("", now)

    def _claim(self, store: BoundedStore, rank: int) -> bytes:
        key = protocol.node_key(rank)
        return bytes(store.get(key)) if store.check([key]) else b""

    def _set_members(self, store: BoundedStore | None, members: Membership) -> None:
        """Node 0: the new membership, for the rendezvous (``rounds``), the rejoin and the
        watch; the others: what node 0 published."""
        self.members = members
        self._elastic = True
        if self.rounds is not None:
            with self.rounds.lock:
                self.rounds.members = members
        if store is not None and self.node_rank == 0:
            store.set(protocol.MEMBERS, members.encode())

    def _restart_for(self, event: Event, store: BoundedStore | None) -> None:
        """A new epoch seats this node (or keeps it seated): its workers restart into the
        epoch's round (``on_event`` kills them; the launcher starts them again). What the
        judges held of the old epoch is dropped: the suspicion after a local failure, the
        hang in hand, the progress the old workers left."""
        self.clear_suspicion()
        self._hang = None
        self._progress_seen.clear()
        self._restart_wall = time.time()
        if store is not None and self.node_rank == 0:
            try:
                keys = [protocol.progress_key(r) for r in range(self.world_size)]
                self._stale = {r: protocol.text(v)
                               for r, v in enumerate(self._read_all(store, keys))}
            except Exception:  # noqa: BLE001, S110 - the next beat reads them again
                pass
        if self.slow is not None and hasattr(self.slow, "reseat"):
            self.slow.reseat(self.members.seats)
        self.changes.append(event)
        self.on_event(event)

    def _adopt(self, watch: protocol.Watch) -> Event | None:
        """The others: node 0's membership from its watch. A new epoch that seats this node
        restarts its workers; one that lists it as lost means it was replaced (it was
        silent too long, e.g. frozen): it stops."""
        if watch.members is None:
            return None
        try:
            members = Membership.from_json(watch.members)
        except (ValueError, TypeError, KeyError):
            return None
        old = self.members
        if members == old:
            return None
        self._set_members(None, members)
        me = self.node_rank
        if me in members.lost and me not in old.lost:
            return Event(EventKind.REPLACED, replaced_line(me, members.reason), node=me)
        if members.epoch > old.epoch and members.seated(me):
            self._restart_for(Event(EventKind.TAKEOVER, members.reason,
                                    node=members.lost[-1] if members.lost else None), None)
        return None

    def _judge_rounds(self, store: BoundedStore) -> None:
        """Has some node arrived at the round after the one the workers run in (its workers
        failed and its agent restarts them)? One counter read a beat."""
        rounds = self.rounds
        if rounds is None:
            return
        with rounds.lock:
            rounds.goodbyes = {r: str(g) for r, g in self.goodbyes.items()}
            current = rounds.current
        if current >= 0 and int(store.add(protocol.round_arrived_key(current + 1), 0)) > 0:
            with rounds.lock:
                rounds.wanted = max(rounds.wanted, current + 1)

    def _publish(self, store: BoundedStore, now: float) -> None:
        hang = self._hang or {}
        wanted = self.rounds.wanted if self.rounds is not None else 0
        store.set(protocol.WATCH, protocol.Watch(
            self._beat, tuple(self._lost), {r: str(g.value if isinstance(g, Goodbye) else g)
                                            for r, g in self.goodbyes.items()},
            self._gen, bool(hang), hang.get("verdict"), wanted,
            tuple(sorted(self._closed)), tuple(self._notices),
            self.members.to_json() if self._elastic else None).encode())

    # -- every other node: beat, read node 0's watch ----------------------------------------
    def _member(self, store: BoundedStore, now: float) -> Event | None:
        store.set(protocol.heartbeat_key(self.node_rank),
                  protocol.Heartbeat(self._beat).encode())
        if self._link is None:
            self._open_link(store)
        raw = store.get(protocol.WATCH)
        try:
            watch = protocol.Watch.decode(raw)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError):
            # not node 0's watch (something else wrote the key): no sign of node 0's life,
            # and named if node 0 is found lost while it lasts
            first = _FIRST_CONNECT_S if self._watch is None else 0.0
            if 0 not in self.goodbyes and now - self._watch_at >= self._limit + first:
                return Event(EventKind.NODE_LOST, node_lost_line(
                    0, self.hosts.get(0, "?"), now - self._watch_at, store_host=True,
                    bad=bytes(raw).decode(errors="replace"),
                    key=f"watch ({protocol.WATCH})", kind="value"), node=0)
            return None
        if self._watch is None or watch.beat != self._watch.beat:
            self._watch_at = now
        self._watch = watch
        self.goodbyes = {r: Goodbye.read(g.encode()) for r, g in watch.goodbyes.items()}
        replaced = self._adopt(watch)
        if replaced is not None:
            return replaced
        if self.rounds is not None:
            if watch.verdict is not None and watch.verdict.restart and \
                    watch.gen >= self._gen and self._acted_gen != watch.gen:
                self.rounds.hold()  # before a newer round can count as nodes waiting
            with self.rounds.lock:
                self.rounds.wanted = max(self.rounds.wanted, watch.round)
                self.rounds.goodbyes = dict(watch.goodbyes)
        for record in watch.notices:
            if int(record.get("seq", 0)) > self._notice_seq:
                self._notice_seq = int(record["seq"])
                self.on_notice(record)
        if watch.lost:
            rank, age = watch.lost[0]
            return Event(EventKind.NODE_LOST, node_lost_line(
                rank, self.hosts.get(rank, "?"), age, closed=rank in watch.closed), node=rank)
        first = _FIRST_CONNECT_S if watch.beat == 0 else 0.0  # node 0 not connected yet
        if 0 not in self.goodbyes and now - self._watch_at >= self._limit + first:
            return Event(EventKind.NODE_LOST, node_lost_line(
                0, self.hosts.get(0, "?"), now - self._watch_at, store_host=True), node=0)
        event = self._peer_failed()
        if event is not None or self.hang_timeout <= 0:
            return event
        if watch.gen > self._gen:  # node 0 acted on a hang this node missed: catch up
            self._gen = watch.gen
            self._progress_seen.clear()
        if watch.gen == self._gen and watch.probe and self._probed_gen != self._gen:
            self._start_probe(store)
        if watch.gen == self._gen and watch.verdict is not None and self._acted_gen != self._gen:
            self._acted_gen = self._gen
            store.add(protocol.hang_seen_key(self._gen), 1)
            return self._act(watch.verdict)
        return None

    # -- liveness links (meshrun.runtime.links) ---------------------------------------------
    def _open_hub(self) -> None:
        """Node 0: listen for every node's link and publish where (nothing when it cannot:
        the heartbeats alone judge then)."""
        from .links import Hub

        store = self._store
        try:
            tokens = {}
            keys = [protocol.node_key(r) for r in range(self.nnodes)]
            if store is not None and store.check(keys):  # each node's claim from the join:
                tokens = {r: protocol.NodeClaim.decode(raw).token   # its link carries it
                          for r, raw in enumerate(store.multi_get(keys)) if raw}
            hub = Hub(self.host, on_change=self._wake.set, tokens=tokens)
            hub.start()
            self._hub = hub  # before publishing: a set that times out may still land
            if store is not None:
                store.set(protocol.LINKS, protocol.Endpoint(self.host, hub.port).encode())
        except Exception:  # noqa: BLE001, S110 - links only speed detection up
            pass

    def _open_link(self, store: BoundedStore) -> None:
        """The others: open this node's link once node 0 has published its listener (one
        check a beat until then)."""
        from .links import Link

        if not store.check([protocol.LINKS]):
            return
        where = protocol.Endpoint.decode(store.get(protocol.LINKS))
        claim = protocol.node_key(self.node_rank)
        mine = protocol.NodeClaim.decode(store.get(claim)).token if store.check([claim]) else ""
        try:
            link = Link(where.host, where.port, self.node_rank, token=mine,
                        on_change=self._wake.set)
            link.start()
            self._link = link
        except OSError:
            self._link = False  # not reachable: the heartbeats alone judge node 0

    def _check_links(self, store: BoundedStore) -> None:
        """Node 0: read again the claims of the ranks whose links wait unverified (a node
        that came back links with its new claim's token), and say once what was refused."""
        hub = self._hub
        if hub is None:
            return
        asked = [r for r in hub.unverified() if 0 <= r < self.nnodes
                 and store.check([protocol.node_key(r)])]
        if asked:
            keys = [protocol.node_key(r) for r in asked]
            for rank, raw in zip(asked, store.multi_get(keys)):
                if raw:
                    hub.expect(rank, protocol.NodeClaim.decode(raw).token)
        for kind, line in hub.ignored():  # each kind said once, then only counted
            self._refused[kind] = self._refused.get(kind, 0) + 1
            if self._refused[kind] == 1:
                self.on_warning(line)

    def _link_goodbyes(self) -> None:
        """Goodbyes that came over the links count as goodbyes (the heartbeat or the watch
        carrying them may not have been read before the store went)."""
        letters = {g.value[:1]: g for g in Goodbye}
        if self._hub is not None:
            for rank, letter in self._hub.said().items():
                if rank not in self.goodbyes and letter in letters:
                    self.goodbyes[rank] = letters[letter]
        link = self._link
        if link and link.goodbye in letters and 0 not in self.goodbyes:
            self.goodbyes[0] = letters[link.goodbye]

    def _node_0_died(self) -> bool:
        """Node 0's end of this node's link closed without its goodbye: its agent died."""
        link = self._link
        return bool(link) and link.died_at is not None and 0 not in self.goodbyes

    def _peer_failed(self) -> Event | None:
        failed = sorted(r for r, status in self.goodbyes.items()
                        if status == Goodbye.FAILED and r != self.node_rank
                        and self.members.seated(r))
        if failed and not self._local_failure:
            return Event(EventKind.PEER_FAILED, peer_failed_line(
                failed[0], self.hosts.get(failed[0], "?"), self.node_rank), node=failed[0])
        stopped = sorted(r for r, status in self.goodbyes.items()
                         if status == Goodbye.STOPPED and r != self.node_rank
                         and self.members.seated(r))
        others = [r for r in self.members.seats if r != self.node_rank]
        if stopped and (self.node_rank != 0 or all(r in self.goodbyes for r in others)) \
                and procs.in_exit_barrier(threading.main_thread().ident):
            # this node's workers all finished; a node stopped before its own did can never
            # reach torch's exit barrier, which would hold this node for 300 s. Node 0 hosts
            # the store: it leaves only once no other node still works (one still saving
            # its last checkpoint would lose the store)
            return Event(EventKind.PEER_STOPPED, peer_stopped_line(
                stopped[0], self.hosts.get(stopped[0], "?"), self.node_rank), node=stopped[0])
        return None

    # -- hangs (node 0 judges; no step of it holds up a beat) -------------------------------
    def _world(self) -> range:
        """The global ranks of this epoch (fewer than at the start once the job shrank)."""
        return range(min(self.world_size, len(self.members.seats) * self.nproc))

    def _progress_values(self, store: BoundedStore) -> dict[int, str]:
        """Every rank's progress value (this epoch's ranks), in one call."""
        keys = [protocol.progress_key(r) for r in self._world()]
        return {r: protocol.text(v) for r, v in enumerate(self._read_all(store, keys))}

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
            self._notice_seq += 1
            record = {**notice.to_json(), "seq": self._notice_seq}
            self._notices = (self._notices + [record])[-8:]
            self.on_notice(record)
        if self._beat % 10 == 0:
            self.on_summary(self.slow.summary())

    def _judge_hang(self, store: BoundedStore, now: float, values: dict[int, str]) -> None:
        if self._hang is None:
            # After a restart, what the hung attempt left counts as silence.
            values = {r: "" if v and (self._stale.get(r) == v or _before(v, self._restart_wall))
                      else v for r, v in values.items()}
            if not any(values.values()):
                return  # nobody reports progress (yet): hang detection is off
            self.progress_seen_once = True
            # progress is a moved position (a step, a collective issued, a second of work
            # on a CPU), not a new report: a report also refreshes timings
            self._progress_seen, stalled = progress_moved(
                now, values, self._progress_seen, lambda v: _position(v, moved=True))
            if stalled >= self.hang_timeout:
                self._hang = {"since": now, "stalled": stalled, "values": values,
                              "verdict": None}
                self._start_probe(store)
            return
        if self._hang["verdict"] is not None:
            return
        keys = [protocol.stuck_key(self._gen, n) for n in range(self.nnodes)]
        everyone = store.check(keys)
        if not everyone and now - self._hang["since"] < _PROBE_WAIT_S:
            return
        probes = {n: protocol.Probe.decode(raw) for n, raw in enumerate(store.multi_get(keys))} \
            if everyone else {n: protocol.Probe.decode(store.get(k))
                              for n, k in enumerate(keys) if store.check([k])}
        values = self._hang["values"]
        reasons = {r: why for found in probes.values() for r, why in found.stuck}
        positions = {r: _position(v) for r, v in values.items() if v}
        silent = [r for r, v in values.items() if not v]
        stuck = hang_suspects(positions, reasons, silent)
        node_of = lambda r: self.members.node_of_rank(r, self.nproc)  # noqa: E731
        who = tuple((r, node_of(r), self.hosts.get(node_of(r), "?")) for r in stuck)
        restart = restart_verdict({n: p.restarts_left for n, p in probes.items()},
                                  self.members.seats)
        stalled = self._hang["stalled"] + (now - self._hang["since"])
        by_coll = all(at[0] < 0 for at in positions.values())  # no rank reports steps
        if restart and self.rounds is not None:
            self.rounds.hold()  # node 0 restarts its workers last: see Rounds.hold
        self._hang.update(verdict=protocol.HangVerdict(hang_line(list(who), stalled, by_coll),
                                                       who, restart), decided=now)

    def _act_on_hang(self, store: BoundedStore) -> Event | None:
        """Node 0, once its verdict is out: act when every node has read it (or after a few
        beats), so that node 0 (the store's host) does not stop before the others know."""
        hang = self._hang
        if not hang or hang["verdict"] is None:
            return None
        waited = self.clock() - hang["decided"]
        if self.nnodes > 1 and waited < 3 * self.interval + 2.0 and \
                store.add(protocol.hang_seen_key(self._gen), 0) < self.nnodes - 1:
            return None
        self._hang = None
        self._acted_gen = self._gen
        event = self._act(hang["verdict"])
        if event is None:  # restarted: what the hung attempt left is stale
            self._restart_wall = time.time()
            keys = [protocol.progress_key(r) for r in self._world()]
            self._stale = {r: protocol.text(v) for r, v in enumerate(self._read_all(store, keys))}
            self._publish(store, self.clock())
        return event

    def _act(self, verdict: protocol.HangVerdict) -> Event | None:
        """Act on node 0's verdict: an event to stop on, or None after restarting the hung
        attempt's workers (a new generation starts)."""
        pids = self._hung_pids()
        event = Event(EventKind.HANG, verdict.line, stuck=[list(s) for s in verdict.stuck],
                      restart=verdict.restart, pids=tuple(sorted(pids.values())))
        if not event.restart:
            return event
        self.restarts.append(event)
        self.on_event(event)
        self._gen += 1
        self._progress_seen.clear()
        return None

    def _start_probe(self, store: BoundedStore) -> None:
        """Probe this node's workers on a thread of its own (a stack dump takes 1.5 s; the
        beats go on), then answer under ``stuck/<gen>/<node>``."""
        gen = self._gen
        self._probed_gen = gen
        pids = dict(self.local_pids())
        self._probed = pids

        def probe() -> None:
            found = self._probe_local(pids)
            try:
                store.set(protocol.stuck_key(gen, self.node_rank), found.encode())
            except Exception:  # noqa: BLE001, S110 - the store broke: the beats will say so
                pass

        self._probe_thread = threading.Thread(target=probe, name="meshrun-probe", daemon=True)
        self._probe_thread.start()

    def _hung_pids(self) -> dict[int, int]:
        """This node's workers of the hung attempt: the ones probed, else those alive now."""
        return dict(self._probed) if self._probed_gen == self._gen else dict(self.local_pids())

    def _probe_local(self, pids: Mapping[int, int]) -> protocol.Probe:
        """Dump this node's workers' stacks: the ranks that look stuck (stopped (state T),
        not answering the dump, or not inside a collective) and the restarts this node's
        agent has left."""
        left = self.restarts_left() if pids else 0
        folder = self.log_dir
        sizes = {r: _size(os.path.join(folder, "stacks", f"rank{r}.txt")) for r in pids}
        for pid in pids.values():
            if catches(pid, signal.SIGUSR1):  # a worker still starting would die of it
                self.send_signal(pid, signal.SIGUSR1)
        self._await_dumps(pids, sizes)
        out = []
        for rank, pid in sorted(pids.items()):
            path = os.path.join(folder, "stacks", f"rank{rank}.txt")
            state = process_state(pid)
            if state in ("T", "t"):
                out.append((rank, PROBE_REASONS[0]))
                continue
            if _size(path) <= sizes[rank]:
                out.append((rank, PROBE_REASONS[1]))
                continue
            with open(path, errors="replace") as handle:
                handle.seek(sizes[rank])
                dump = handle.read()
            if not in_collective(dump):
                out.append((rank, PROBE_REASONS[2]))
        return protocol.Probe(tuple(out), left)

    def _await_dumps(self, pids: Mapping[int, int], sizes: Mapping[int, int],
                     limit: float = _DUMP_WAIT_S) -> None:
        """Until every probed worker has written its stack dump (its file grew and then
        stayed still for a poll), is stopped or gone, or ``limit`` seconds passed: a worker
        that answers takes milliseconds; one that cannot (stopped, stuck in C code holding
        the GIL) is what the probe is looking for."""
        folder = os.path.join(self.log_dir, "stacks")
        deadline = time.monotonic() + limit  # a real wait for files, not a judgement
        last: dict[int, int] = {}
        while time.monotonic() < deadline:
            now = {r: _size(os.path.join(folder, f"rank{r}.txt")) for r in pids}
            waiting = [r for r, pid in pids.items()
                       if process_state(pid) not in ("T", "t", "Z", "")
                       and not (now[r] > sizes[r] and last.get(r) == now[r])]
            if not waiting:
                return
            last = now
            if self._halt.wait(_DUMP_POLL_S):
                return  # stopping: nobody waits for the answer

    # -- the job's first cause ---------------------------------------------------------------
    def offer_cause(self, cause: protocol.Cause) -> None:
        """Offer this node's first cause as the job's: the first node to offer one keeps it
        (``compare_set`` on an absent key; one bounded call)."""
        store = self._store
        if store is None:
            return
        try:
            store.compare_set(protocol.cause_key(self.members.epoch), "", cause.encode())
        except Exception:  # noqa: BLE001, S110 - the store may be gone: each node says its own
            pass

    def job_cause(self, wait: float = 0.0, poll: float = 0.1) -> protocol.Cause | None:
        """The job's first cause as some node offered it, waiting up to ``wait`` seconds for
        one; None when none came (or the value is not one: said once, by its key)."""
        key = protocol.cause_key(self.members.epoch)
        deadline = time.monotonic() + wait
        while True:
            store = self._store
            try:
                if store is not None and store.check([key]):
                    return protocol.Cause.decode(store.get(key))
            except ValueError as exc:
                say(f"ignored {key}: {exc}")
                return None
            except Exception:  # noqa: BLE001, S110 - the store may be gone: no cause then
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll)

    # -- the end of the workers -------------------------------------------------------------
    def mark_ended(self) -> None:
        """Count this node in ``meshrun/ended`` (per membership epoch): its workers are over
        (once per node and epoch; a spare runs none)."""
        store = self._store
        epoch = self.members.epoch
        if self._ended_in == epoch or store is None or not self.members.seated(self.node_rank):
            return
        try:
            store.add(protocol.ended_key(epoch), 1)
            self._ended_in = epoch
        except Exception:  # noqa: BLE001, S110 - the store may be gone: nothing to count then
            pass

    def all_ended(self) -> bool:
        """Every seated node's workers are over (this node's included): none of them was
        lost, so a failure here is the workers' own and nobody needs to wait for a silent
        node."""
        store = self._store
        members = self.members
        try:
            return store is not None and \
                int(store.add(protocol.ended_key(members.epoch), 0)) >= len(members.seats)
        except Exception:  # noqa: BLE001
            return False

    def others_done(self) -> bool:
        """Every other seated node has said goodbye (finished or failed, but not lost), as
        this node's watchdog last read it (node 0: the heartbeats; the others: node 0's
        watch). Spares train nothing: they are not waited for."""
        said = dict(self.goodbyes)
        return all(r in said for r in self.members.seats if r != self.node_rank)

    def _everyone_said_goodbye(self, store: BoundedStore) -> bool:
        """Node 0, its watchdog stopped: read the heartbeats itself (not the lost nodes':
        no goodbye will come from them)."""
        lost = {rank for rank, _ in self._lost}
        keys = [protocol.heartbeat_key(r) for r in range(1, self.nnodes) if r not in lost]
        if not keys:
            return True
        return all(_goodbye_in(raw) for raw in self._read_all(store, keys) if raw)

    # -- helpers ----------------------------------------------------------------------------
    def _read_all(self, store: BoundedStore, keys: list[str]) -> list[bytes]:
        """The values of ``keys`` in one call once all exist (every heartbeat does from the
        join on), else one check and a get per key that exists (b"" for the others)."""
        group = keys[0] if keys else ""
        if not keys:
            return []
        if group in self._present or store.check(keys):
            self._present.add(group)
            return store.multi_get(keys)
        return [store.get(k) if store.check([k]) else b"" for k in keys]

    def _connect(self, first: bool = False) -> BoundedStore | None:
        """A client of the job's store, every call bounded; None when it cannot be had now.

        The connection is made on a thread of its own, waited for at most one call's bound
        (the first, made right after the join, up to 10 s: on a host running many agents
        the handshake alone can take seconds). TCPStore's handshake has no deadline of its
        own: against a frozen host, whose kernel still accepts into the listen queue, it
        waits forever; such an attempt is left to itself (one at a time; the process
        exits past it, see ``meshrun.cli``) and the beat goes on as a failed one."""
        import socket

        try:
            # A plain connect first: refused at once when the store's host is gone, where a
            # TCPStore client would retry for its whole timeout and print C++ frames.
            socket.create_connection((self.host, self.port),
                                     timeout=min(1.0, self._patience)).close()
        except OSError:
            return None
        wait = max(self._patience, _FIRST_CONNECT_S) if first else self._patience
        attempt = self._connecting
        if attempt is None:
            attempt = self._connecting = StoreConnect(self.host, self.port, wait)
        attempt.join(wait)
        if attempt.is_alive():
            return None  # still in the handshake: a failed beat; looked at again next time
        self._connecting = None
        if attempt.store is None:
            return None
        return BoundedStore(attempt.store, self._patience)

    def _set_store(self, store: BoundedStore | None) -> BoundedStore | None:
        with self._lock:
            self._store = store
        return store

    def _usable_store(self) -> BoundedStore | None:
        """The watchdog's connection, or a fresh one when it is gone or stuck in a call."""
        with self._lock:
            store = self._store
        if store is not None and not store.stuck:
            return store
        self._drop_store()
        return self._set_store(self._connect())

    def _drop_store(self) -> None:
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            try:
                store.close(0.5)
            except Exception:  # noqa: BLE001, S110
                pass

    def _fire(self, event: Event) -> None:
        """A job-stopping event: record it, then let ``on_event`` stop the workers."""
        self.event = event
        self.on_event(event)
