"""A hang probe of this node's workers: what every node does when node 0's watch asks
(``probe``), on a thread of its own, so that the beats go on meanwhile.

It dumps the workers' Python stacks (SIGUSR1 -> faulthandler, appended to
``stacks/rank<R>.txt`` in the run's log folder: a worker still starting, without its
handler, is not signalled), waits for the dumps (:data:`DUMP_WAIT_S` at most), reads each
worker's process state, and answers under ``stuck/<gen>/<node>`` with the ranks that look
stuck, the strongest reason first (:data:`~meshrun.runtime.events.PROBE_REASONS`: stopped,
no stack dump, not inside a collective), and the restarts its agent has left
(:class:`~meshrun.protocol.Probe`). Node 0 judges the answers
(:func:`meshrun.runtime.judges.hang_verdict`). The probe also remembers which workers it
probed: on a restart verdict those of the hung attempt are the ones killed.

I/O: signals, ``/proc``, the stack files, one store call.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import protocol
from .events import PROBE_REASONS, catches, in_collective, process_state

DUMP_WAIT_S = 1.5   # at most this long for the probed workers' stack dumps
_DUMP_POLL_S = 0.05


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


@dataclass(frozen=True)
class Workers:
    """This node's workers as the probe reaches them: ``pids()`` (rank -> pid, now),
    ``restarts_left()`` (what this node's agent has left), ``send_signal(pid, sig)``, and
    the run's log folder (``stacks/`` go there)."""

    pids: Callable[[], Mapping[int, int]]
    restarts_left: Callable[[], int]
    send_signal: Callable[[int, int], Any]
    log_dir: str


class HangProbe:
    """This node's probes, one per hang generation. ``halt``: set when the watchdog stops
    (a probe still waiting for dumps gives up: nobody waits for its answer)."""

    def __init__(self, halt: threading.Event) -> None:
        self._halt = halt
        self.gen = -1                      # the generation probed last
        self.pids: dict[int, int] = {}     # rank -> pid probed for that generation
        self.thread: threading.Thread | None = None

    def start(self, store: Any, gen: int, node: int, workers: Workers) -> None:
        """Probe this node's workers (those alive now) for generation ``gen`` on a thread of
        its own (a stack dump takes up to 1.5 s), then answer under ``stuck/<gen>/<node>``."""
        pids = dict(workers.pids())
        self.gen, self.pids = gen, pids

        def probe() -> None:
            found = self.probe(pids, workers)
            try:
                store.set(protocol.stuck_key(gen, node), found.encode())
            except Exception:  # noqa: BLE001, S110 - the store broke: the beats will say so
                pass

        self.thread = threading.Thread(target=probe, name="meshrun-probe", daemon=True)
        self.thread.start()

    def hung(self, gen: int, alive: Callable[[], Mapping[int, int]]) -> dict[int, int]:
        """This node's workers of generation ``gen``'s hung attempt: the ones probed, else
        those alive now (``alive``)."""
        return dict(self.pids) if self.gen == gen else dict(alive())

    def probe(self, pids: Mapping[int, int], workers: Workers) -> protocol.Probe:
        """Dump the stacks of ``pids`` (rank -> pid): the ranks that look stuck (stopped
        (state T), not answering the dump, or not inside a collective) and the restarts this
        node's agent has left."""
        left = workers.restarts_left() if pids else 0
        folder = os.path.join(workers.log_dir, "stacks")
        sizes = {r: _size(os.path.join(folder, f"rank{r}.txt")) for r in pids}
        for pid in pids.values():
            if catches(pid, signal.SIGUSR1):  # a worker still starting would die of it
                workers.send_signal(pid, signal.SIGUSR1)
        self.await_dumps(pids, sizes, folder)
        out = []
        for rank, pid in sorted(pids.items()):
            path = os.path.join(folder, f"rank{rank}.txt")
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

    def await_dumps(self, pids: Mapping[int, int], sizes: Mapping[int, int], folder: str,
                    limit: float = DUMP_WAIT_S) -> None:
        """Until every probed worker has written its stack dump (its file grew and then
        stayed still for a poll), is stopped or gone, or ``limit`` seconds passed: a worker
        that answers takes milliseconds; one that cannot (stopped, stuck in C code holding
        the GIL) is what the probe is looking for."""
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
