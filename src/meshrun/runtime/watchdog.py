"""Heartbeats, node loss and hang detection, over the job's store.

Every node's agent runs one :class:`Watchdog` thread beside torch's elastic agent.
It has its own client connection to the job's store (short timeouts, so a dead
or frozen store host cannot block it) and, every ``interval`` seconds:

- bumps ``meshrun/hb/<node>`` (its heartbeat) and reads everyone's. A node whose
  heartbeat has not changed for ``node_timeout`` seconds, measured on this
  node's own monotonic clock (so clock skew does not matter), and that has not
  said goodbye (``meshrun/done/<node>``), is **lost**;
- when the store itself stops answering for ``node_timeout`` seconds, node 0 —
  which hosts it — is lost, and the survivors say so;
- reads the workers' progress (``meshrun/progress/<rank>``, written
  by :func:`meshrun.progress`). Once any rank has reported progress, no rank
  advancing for ``hang_timeout`` seconds is a **hang**: node 0 asks every node
  to probe its workers (``hang_probe/<g>``); each dumps their Python stacks
  (SIGUSR1 -> ``stacks/rank<R>.txt``), looks at their process state and
  answers with the suspicious ranks and the restarts its agent has left
  (``stuck/<g>/<node>``); node 0 names the stuck ranks (those behind the
  others; when all report the same step, the ones whose process is stopped or
  did not answer the stack dump) and publishes the verdict ``hang/<g>``, with
  ``restart`` true when every node still has a restart left.

Every node acts on the same verdict. Without restarts it records the event
(:attr:`Watchdog.event`) and its ``on_event`` stops the job: SIGTERM to its
own process, which torch's agent turns into an orderly shutdown of the
workers. With restarts it kills only the workers it probed (the hung
attempt's), so each node's elastic agent sees a failure and restarts them
through the rendezvous; the watchdog keeps running, appends the event to
:attr:`Watchdog.restarts`, and judges the next attempt afresh: the hang keys
are keyed by a generation ``<g>`` (the number of hangs handled so far, the
same on every node), and progress values left by the hung attempt do not
count until a rank of the new attempt reports.

The one-line messages are :func:`node_lost_line` and :func:`hang_line`;
``meshrun diagnose`` recognises them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from .. import protocol
from .events import (
    Event,
    EventKind,
    Goodbye,
    hang_line,
    in_collective,
    node_lost_line,
    peer_failed_line,
    process_state,
    restart_verdict,
    stuck_ranks,
)
from .store import BoundedStore


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Watchdog(threading.Thread):
    def __init__(self, *, host: str, port: int, node_rank: int, nnodes: int, world_size: int,
                 hosts: Mapping[int, str], node_timeout: float, hang_timeout: float,
                 interval: float = 1.0, on_event: Callable[[Event], None],
                 local_pids: Callable[[], Mapping[int, int]] = dict,
                 restarts_left: Callable[[], int] = lambda: 0, log_dir: str = ".") -> None:
        super().__init__(name="meshrun-watchdog", daemon=True)
        self.host, self.port = host, port
        self.node_rank, self.nnodes, self.world_size = node_rank, nnodes, world_size
        self.hosts = dict(hosts)
        self.node_timeout, self.hang_timeout, self.interval = node_timeout, hang_timeout, interval
        self._limit = node_timeout  # silence that makes a node lost (see suspect())
        self.on_event = on_event
        self.local_pids = local_pids  # rank -> pid of this node's workers
        self.restarts_left = restarts_left  # restarts this node's agent has left
        self.log_dir = log_dir              # the run's log folder (stacks/ go there)
        self.event: Event | None = None  # the event that stops the job
        self.restarts: list[Event] = []  # hangs handled by restarting the workers
        self._halt = threading.Event()
        self._store: Any = None
        self._patience = max(2.0, interval * 3)  # how long one store call may take
        self._gen = 0                    # hangs handled so far (the same on every node)
        self._probed: dict[int, int] = {}  # rank -> pid probed for the current generation
        self._probed_gen = -1
        self._stale: dict[int, bytes] = {}  # progress values left by the hung attempt
        self.goodbyes: dict[int, Goodbye | str] = {}  # node -> its goodbye (Goodbye.read)
        self._local_failure = False      # this node's workers failed (see suspect())
        self._ended = False              # this node counted itself in ENDED

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self, status: Goodbye = Goodbye.DONE) -> None:
        """Say goodbye (so others do not count this node as lost), stop the thread and close
        the store connection, saying ``status`` (:class:`Goodbye`): on STOPPED the others act on
        their own evidence.

        Waits for the thread and its store calls (bounded by the store's patience): a
        daemon thread still inside a C++ store call when the interpreter exits aborts the
        process ("terminate called without an active exception")."""
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(self.interval + self._patience + 1.0)
        store = self._store
        if store is None:
            return
        self.mark_ended()
        try:
            store.set(protocol.done_key(self.node_rank), Goodbye(status).value)
            store.add(protocol.GOODBYES, 1)  # after the status: a reader that sees the count sees it
            if self.node_rank == 0 and status == Goodbye.FAILED and self.nnodes > 1:
                # Node 0 hosts the store: keep it up for two beats, so the others read that
                # node 0 failed (and stop) instead of finding its store gone (node lost).
                until = time.monotonic() + 2 * self.interval + 0.5
                while time.monotonic() < until and not self.others_done():
                    time.sleep(0.1)
        except Exception:  # noqa: BLE001, S110 - the store may be gone; nothing to tell then
            pass
        store.close(self._patience)

    def suspect(self, seconds: float) -> None:
        """A local worker just failed (a collective broke): count a node as lost after only
        ``seconds`` of silence instead of ``node_timeout``. A live node's agent beats every
        ``interval`` whatever its workers do, so a short silence now means a dead node, and
        the survivors can name it in seconds rather than wait out the full timeout."""
        self._limit = min(self.node_timeout, seconds)
        self._local_failure = True  # a failed node of its own: another's failure is no news

    def run(self) -> None:
        self._store = self._connect()
        beats = 0
        seen: dict[int, tuple[bytes, float]] = {}
        progress_seen: dict[int, tuple[bytes, float]] = {}
        store_ok_at = time.monotonic()
        started = time.monotonic()
        while not self._halt.wait(self.interval):
            now = time.monotonic()
            try:
                if self._store is None:
                    self._store = self._connect()  # the first try failed, or the last broke
                if self._store is None:
                    raise ConnectionError("no store connection")
                beats += 1
                self._store.set(protocol.heartbeat_key(self.node_rank), str(beats))
                keys = [protocol.heartbeat_key(r) for r in range(self.nnodes)]
                values = self._store.multi_get(keys) if self._all_set(keys) else [
                    self._get_or_empty(k) for k in keys]
                # One call a beat while nobody said goodbye (not one per node: N nodes
                # would make N x N calls a second on node 0's store).
                said = int(self._store.add(protocol.GOODBYES, 0))
                if said != len(self.goodbyes):
                    for r in range(self.nnodes):
                        if r not in self.goodbyes and self._store.check([protocol.done_key(r)]):
                            self.goodbyes[r] = Goodbye.read(
                                self._store.get(protocol.done_key(r)))
                done = set(self.goodbyes)
                store_ok_at = now
            except Exception:  # noqa: BLE001 - the store host is gone or frozen
                now = time.monotonic()  # the failed calls may have taken seconds
                if self.node_rank != 0 and self.goodbyes.get(0) == Goodbye.FAILED \
                        and not self._local_failure:
                    self._fire(Event(EventKind.PEER_FAILED, peer_failed_line(
                        0, self.hosts.get(0, "?"), self.node_rank, store_closed=True), node=0))
                    return
                if self.node_rank != 0 and now - store_ok_at >= self._limit:
                    self._fire(Event(EventKind.STORE_LOST, node_lost_line(
                        0, self.hosts.get(0, "?"), now - store_ok_at, store_host=True), node=0))
                    return
                self._drop_store()  # a broken connection: a fresh one on the next beat
                continue
            failed = sorted(r for r, status in self.goodbyes.items()
                            if status == Goodbye.FAILED and r != self.node_rank)
            if failed and not self._local_failure:
                self._fire(Event(EventKind.PEER_FAILED, peer_failed_line(
                    failed[0], self.hosts.get(failed[0], "?"), self.node_rank), node=failed[0]))
                return
            for rank, value in enumerate(values):
                if rank not in seen or seen[rank][0] != value:
                    seen[rank] = (value, now)
            for rank in range(self.nnodes):
                age = now - seen.get(rank, (b"", started))[1]
                if rank != self.node_rank and rank not in done and age >= self._limit:
                    self._fire(Event(EventKind.NODE_LOST, node_lost_line(
                        rank, self.hosts.get(rank, "?"), age, store_host=rank == 0),
                        node=rank))
                    return
            try:
                if self.hang_timeout > 0 and self._check_hang(now, progress_seen):
                    return
            except Exception:  # noqa: BLE001, S112 - the store broke mid-check: the next beat says so
                continue

    # -- hangs ------------------------------------------------------------------------------
    def _check_hang(self, now: float, progress_seen: dict[int, tuple[bytes, float]]) -> bool:
        """Node 0 watches progress; on a hang every node probes its own workers (stack dump,
        process state) and node 0 names the stuck ranks. True when the job stops."""
        store = self._store
        gen = self._gen  # each handled hang gets fresh keys
        if store.check([protocol.hang_key(gen)]):
            verdict = protocol.HangVerdict.decode(store.get(protocol.hang_key(gen)))
            pids = self._hung_pids()
            store.add(protocol.hang_seen_key(gen), 1)
            return self._verdict(verdict, pids, progress_seen)
        if store.check([protocol.hang_probe_key(gen)]) and self._probed_gen != gen:
            store.set(protocol.stuck_key(gen, self.node_rank), self._probe_local().encode())
        if self.node_rank != 0:
            return False
        keys = [protocol.progress_key(r) for r in range(self.world_size)]
        values = {r: self._get_or_empty(k) for r, k in enumerate(keys)}
        # After a restart, what the hung attempt left counts as silence.
        values = {r: b"" if v and self._stale.get(r) == v else v for r, v in values.items()}
        if not any(values.values()):
            return False  # nobody reports progress (yet): hang detection is off
        for rank, value in values.items():
            if value and (rank not in progress_seen or progress_seen[rank][0] != value):
                progress_seen[rank] = (value, now)
        last = max(at for _, at in progress_seen.values())
        if now - last < self.hang_timeout:
            return False
        # Probe every node (including this one), then combine.
        store.set(protocol.hang_probe_key(gen), "1")
        store.set(protocol.stuck_key(gen, 0), self._probe_local().encode())
        probes: dict[int, protocol.Probe] = {}
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and len(probes) < self.nnodes:
            for node in range(self.nnodes):
                key = protocol.stuck_key(gen, node)
                if node not in probes and store.check([key]):
                    probes[node] = protocol.Probe.decode(store.get(key))
            time.sleep(0.1)
        flagged = sorted({r for found in probes.values() for r, _ in found.stuck})
        steps = {r: protocol.Progress.decode(v).step for r, v in values.items() if v}
        silent = [r for r, v in values.items() if not v]
        stuck = flagged or stuck_ranks(steps, silent=silent)
        nproc = self.world_size // self.nnodes
        who = [(r, r // nproc, self.hosts.get(r // nproc, "?")) for r in stuck]
        restart = restart_verdict({n: p.restarts_left for n, p in probes.items()},
                                  self.nnodes)
        verdict = protocol.HangVerdict(hang_line(who, now - last), tuple(who), restart)
        store.set(protocol.hang_key(gen), verdict.encode())
        # Let every node read the verdict before this one (the store's host) may stop.
        deadline = time.monotonic() + 3 * self.interval + 2.0
        while store.add(protocol.hang_seen_key(gen), 0) < self.nnodes - 1 and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        return self._verdict(verdict, self._hung_pids(), progress_seen)

    def _verdict(self, verdict: protocol.HangVerdict, pids: Mapping[int, int],
                 progress_seen: dict[int, tuple[bytes, float]]) -> bool:
        """Act on node 0's verdict: stop (True), or restart and start a new generation."""
        event = Event(EventKind.HANG, verdict.line, stuck=[list(s) for s in verdict.stuck],
                      restart=verdict.restart, pids=tuple(sorted(pids.values())))
        if not event.restart:
            self._fire(event)
            return True
        self.restarts.append(event)
        self.on_event(event)
        self._gen += 1
        progress_seen.clear()
        if self.node_rank == 0:
            keys = [protocol.progress_key(r) for r in range(self.world_size)]
            self._stale = {r: self._get_or_empty(k) for r, k in enumerate(keys)}
        return False

    def _hung_pids(self) -> dict[int, int]:
        """This node's workers of the hung attempt: the ones probed, else those alive now."""
        return dict(self._probed) if self._probed_gen == self._gen else dict(self.local_pids())

    def _probe_local(self) -> protocol.Probe:
        """Dump this node's workers' stacks. Returns the :class:`~meshrun.protocol.Probe`: the
        ranks that look stuck (stopped (state T), not answering the dump, or not
        inside a collective) and the restarts this node's agent has left."""
        pids = dict(self.local_pids())
        self._probed, self._probed_gen = pids, self._gen
        left = self.restarts_left() if pids else 0
        folder = self.log_dir
        sizes = {r: _size(os.path.join(folder, "stacks", f"rank{r}.txt")) for r in pids}
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(1.5)  # let faulthandler write
        out = []
        for rank, pid in sorted(pids.items()):
            path = os.path.join(folder, "stacks", f"rank{rank}.txt")
            state = process_state(pid)
            if state in ("T", "t"):
                out.append((rank, "stopped"))
                continue
            if _size(path) <= sizes[rank]:
                out.append((rank, "no stack dump"))
                continue
            with open(path, errors="replace") as handle:
                handle.seek(sizes[rank])
                dump = handle.read()
            if not in_collective(dump):
                out.append((rank, "not in a collective"))
        return protocol.Probe(tuple(out), left)

    def mark_ended(self) -> None:
        """Count this node in ``meshrun/ended``: its workers are over (once per node)."""
        if self._ended:
            return
        try:
            if self._store is not None:
                self._store.add(protocol.ENDED, 1)
                self._ended = True
        except Exception:  # noqa: BLE001, S110 - the store may be gone: nothing to count then
            pass

    def all_ended(self) -> bool:
        """Every node's workers are over (this node's included): none of them was lost, so a
        failure here is the workers' own and nobody needs to wait for a silent node."""
        try:
            return self._store is not None and int(self._store.add(protocol.ENDED, 0)) >= self.nnodes
        except Exception:  # noqa: BLE001
            return False

    def others_done(self) -> bool:
        """Every other node has said goodbye (finished or failed, but not lost)."""
        try:
            return self._store is not None and self._store.check(
                [protocol.done_key(r) for r in range(self.nnodes) if r != self.node_rank])
        except Exception:  # noqa: BLE001
            return False

    # -- helpers ----------------------------------------------------------------------------
    def _connect(self) -> BoundedStore | None:
        """A client of the job's store, every call bounded; None when it cannot be had now."""
        import socket

        from torch.distributed import TCPStore

        try:
            # A plain connect first: refused at once when the store's host is gone, where a
            # TCPStore client would retry for its whole timeout and print C++ frames.
            socket.create_connection((self.host, self.port),
                                     timeout=min(1.0, self._patience)).close()
            return BoundedStore(TCPStore(self.host, self.port, is_master=False,
                                         timeout=timedelta(seconds=self._patience),
                                         wait_for_workers=False), self._patience)
        except Exception:  # noqa: BLE001
            return None

    def _drop_store(self) -> None:
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

    def _all_set(self, keys: list[str]) -> bool:
        return self._store.check(keys)

    def _get_or_empty(self, key: str) -> bytes:
        return self._store.get(key) if self._store.check([key]) else b""
