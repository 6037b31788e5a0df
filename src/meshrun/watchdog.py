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
  advancing for ``hang_timeout`` seconds is a **hang**: node 0 names the stuck
  ranks (those behind the others; when all report the same step, the ones
  whose process is stopped or did not answer the stack dump), publishes
  ``meshrun/hang``, and every node dumps its workers' Python stacks
  (SIGUSR1 -> ``stacks/rank<R>.txt``) and stops them.

On an event the watchdog records it (:attr:`Watchdog.event`) and stops the
workers: for node loss and hangs without restarts left it sends SIGTERM to its
own process, which torch's agent turns into an orderly shutdown of the workers;
with restarts left (a hang) it kills only the workers, so the elastic agent
restarts them through the rendezvous.

The one-line messages are :func:`node_lost_line` and :func:`hang_line`;
``meshrun diagnose`` recognises them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

PREFIX = "meshrun/"


def node_lost_line(node: int, host: str, age_s: float, *, store_host: bool = False) -> str:
    what = (f"node {node} ({host}), which hosts the job's store, is lost"
            if store_host else f"node {node} ({host}) is lost")
    return f"meshrun: {what}: last heartbeat {age_s:.1f} s ago"


def hang_line(stuck: Sequence[tuple[int, int, str]], seconds: float) -> str:
    """``stuck``: (rank, node, host) of each stuck rank."""
    who = ", ".join(f"rank {r} on node {n} ({h})" for r, n, h in stuck) or "no rank identified"
    return f"meshrun: job hung: no progress for {seconds:.0f} s; stuck: {who}"


@dataclass
class Event:
    kind: str  # "node-lost" | "store-lost" | "hang"
    line: str
    node: int | None = None
    stuck: list = field(default_factory=list)


def in_collective(stack_dump: str) -> bool:
    """Pure: does a faulthandler dump show the rank waiting inside torch.distributed?"""
    return bool(re.search(r"distributed_c10d\.py|torch/distributed/.*\b(wait|barrier)\b",
                          stack_dump))


def process_state(pid: int) -> str:
    """The state letter from /proc/<pid>/stat (R, S, D, T, Z, ...), or "" if gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def stuck_ranks(progress: Mapping[int, int], stopped: Sequence[int] = (),
                silent: Sequence[int] = ()) -> list[int]:
    """Pure: the ranks to blame for a hang.

    ``progress``: rank -> last reported step. Ranks behind the furthest are stuck;
    if all are level, the ones whose process is stopped (``stopped``) or did not
    answer the stack dump (``silent``)."""
    if not progress:
        return sorted(set(stopped) | set(silent))
    best = max(progress.values())
    behind = sorted(r for r, step in progress.items() if step < best)
    return behind or sorted(set(stopped) | set(silent))


class Watchdog(threading.Thread):
    def __init__(self, *, host: str, port: int, node_rank: int, nnodes: int, world_size: int,
                 hosts: Mapping[int, str], node_timeout: float, hang_timeout: float,
                 interval: float = 1.0, on_event: Callable[[Event], None],
                 local_pids: Callable[[], Mapping[int, int]] = dict) -> None:
        super().__init__(name="meshrun-watchdog", daemon=True)
        self.host, self.port = host, port
        self.node_rank, self.nnodes, self.world_size = node_rank, nnodes, world_size
        self.hosts = dict(hosts)
        self.node_timeout, self.hang_timeout, self.interval = node_timeout, hang_timeout, interval
        self.on_event = on_event
        self.local_pids = local_pids  # rank -> pid of this node's workers
        self.event: Event | None = None
        self._stop = threading.Event()
        self._store: Any = None
        self._probed = False

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self, status: str = "done") -> None:
        """Say goodbye (so others do not count this node as lost) and stop the thread."""
        self._stop.set()
        try:
            if self._store is not None:
                self._store.set(f"{PREFIX}done/{self.node_rank}", status)
        except Exception:  # noqa: BLE001 - the store may be gone; nothing to tell then
            pass

    def run(self) -> None:  # noqa: C901 - one loop, commented
        from torch.distributed import TCPStore

        try:
            self._store = TCPStore(self.host, self.port, is_master=False,
                                   timeout=timedelta(seconds=max(2.0, self.interval * 3)),
                                   wait_for_workers=False)
        except Exception:  # noqa: BLE001
            self._store = None
        beats = 0
        seen: dict[int, tuple[bytes, float]] = {}
        progress_seen: dict[int, tuple[bytes, float]] = {}
        store_ok_at = time.monotonic()
        started = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            try:
                if self._store is None:
                    raise ConnectionError("no store connection")
                beats += 1
                self._store.set(f"{PREFIX}hb/{self.node_rank}", str(beats))
                keys = [f"{PREFIX}hb/{r}" for r in range(self.nnodes)]
                values = self._store.multi_get(keys) if self._all_set(keys) else [
                    self._get_or_empty(k) for k in keys]
                done = {r for r in range(self.nnodes)
                        if self._store.check([f"{PREFIX}done/{r}"])}
                store_ok_at = now
            except Exception:  # noqa: BLE001 - the store host is gone or frozen
                if self.node_rank != 0 and now - store_ok_at >= self.node_timeout:
                    self._fire(Event("store-lost", node_lost_line(
                        0, self.hosts.get(0, "?"), now - store_ok_at, store_host=True), node=0))
                    return
                continue
            for rank, value in enumerate(values):
                if rank not in seen or seen[rank][0] != value:
                    seen[rank] = (value, now)
            for rank in range(self.nnodes):
                age = now - seen.get(rank, (b"", started))[1]
                if rank != self.node_rank and rank not in done and age >= self.node_timeout:
                    self._fire(Event("node-lost", node_lost_line(
                        rank, self.hosts.get(rank, "?"), age, store_host=rank == 0),
                        node=rank))
                    return
            if self.hang_timeout > 0 and self._check_hang(now, progress_seen):
                return

    # -- hangs ------------------------------------------------------------------------------
    def _check_hang(self, now: float, progress_seen: dict[int, tuple[bytes, float]]) -> bool:
        """Node 0 watches progress; on a hang every node probes its own workers (stack dump,
        process state) and node 0 names the stuck ranks."""
        store = self._store
        if store.check([f"{PREFIX}hang"]):
            data = json.loads(store.get(f"{PREFIX}hang"))
            store.add(f"{PREFIX}hang_seen", 1)
            self._fire(Event("hang", data["line"], stuck=data["stuck"]))
            return True
        if store.check([f"{PREFIX}hang_probe"]) and not self._probed:
            self._probed = True
            store.set(f"{PREFIX}stuck/{self.node_rank}", json.dumps(self._probe_local()))
        if self.node_rank != 0:
            return False
        keys = [f"{PREFIX}progress/{r}" for r in range(self.world_size)]
        values = {r: self._get_or_empty(k) for r, k in enumerate(keys)}
        if not any(values.values()):
            return False  # nobody reports progress: hang detection is off
        for rank, value in values.items():
            if value and (rank not in progress_seen or progress_seen[rank][0] != value):
                progress_seen[rank] = (value, now)
        last = max(at for _, at in progress_seen.values())
        if now - last < self.hang_timeout:
            return False
        # Probe every node (including this one), then combine.
        store.set(f"{PREFIX}hang_probe", "1")
        self._probed = True
        store.set(f"{PREFIX}stuck/0", json.dumps(self._probe_local()))
        probes: dict[int, list] = {}
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and len(probes) < self.nnodes:
            for node in range(self.nnodes):
                key = f"{PREFIX}stuck/{node}"
                if node not in probes and store.check([key]):
                    probes[node] = json.loads(store.get(key))
            time.sleep(0.1)
        flagged = sorted({int(r) for found in probes.values() for r, _ in found})
        steps = {r: int(v.split()[0]) for r, v in values.items() if v}
        silent = [r for r, v in values.items() if not v]
        stuck = flagged or stuck_ranks(steps, silent=silent)
        nproc = self.world_size // self.nnodes
        who = [(r, r // nproc, self.hosts.get(r // nproc, "?")) for r in stuck]
        line = hang_line(who, now - last)
        store.set(f"{PREFIX}hang", json.dumps({"line": line, "stuck": who}))
        # This node hosts the store: let every node read the verdict before stopping.
        deadline = time.monotonic() + 3 * self.interval + 2.0
        while store.add(f"{PREFIX}hang_seen", 0) < self.nnodes - 1 and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        self._fire(Event("hang", line, stuck=who))
        return True

    def _probe_local(self) -> list[tuple[int, str]]:
        """Dump this node's workers' stacks; return [(rank, why)] for the ones that look stuck:
        stopped (state T), not answering the dump, or not inside a collective."""
        pids = dict(self.local_pids())
        folder = os.environ.get("MESHRUN_LOG_DIR", ".")
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
        return out

    def others_done(self) -> bool:
        """Every other node has said goodbye (finished or failed, but not lost)."""
        try:
            return self._store is not None and self._store.check(
                [f"{PREFIX}done/{r}" for r in range(self.nnodes) if r != self.node_rank])
        except Exception:  # noqa: BLE001
            return False

    # -- helpers ----------------------------------------------------------------------------
    def _fire(self, event: Event) -> None:
        self.event = event
        self.on_event(event)

    def _all_set(self, keys: list[str]) -> bool:
        return self._store.check(keys)

    def _get_or_empty(self, key: str) -> bytes:
        return self._store.get(key) if self._store.check([key]) else b""
