"""``meshrun.progress(step)``: tell meshrun's watchdog that this rank is making progress.

Call it once per training step (the recipes do). It never waits: it notes the step and
returns; a writer thread of its own sends the newest step to the job's store
(``meshrun/progress/<RANK>``, :class:`meshrun.protocol.Progress`; the store is
``MESHRUN_STORE``, set by meshrun for every worker) at most once per second. A store that
is slow, gone or cut off delays only that thread, never training: every call it makes is
bounded (a 2 s store timeout), it reconnects at most every 5 s, and at exit it sends the
newest step once more, given 2 s to finish, then its connection is shut so that it ends (a thread left inside a C++
call at interpreter exit would abort the process).

``meshrun.arrive()``: call it where this rank's own work for a step is done and it is about
to wait for the others (before ``loss.backward()`` under DDP, whose backward carries the
gradient all-reduce; before your own all-reduce otherwise). With it, each report also
carries how long the rank worked before arriving (its mean over the steps since the last
report), the figure the straggler check compares between ranks: the ranks that wait for a
slow one all show the same step time, so only the time before the wait tells them apart.
Without it, only the mean step time is sent. Both are one clock read and a list append;
once the script has initialised CUDA, where the host only queues the work, the compute time
is the device's instead: a CUDA event recorded at each step's end and at each arrival, the
time between them read once the device has completed both (never waited for).

Outside meshrun (no ``MESHRUN_STORE``) it does nothing. When no rank ever calls it,
meshrun's hang detection is off (it cannot tell a hang from a long step); node-loss
detection works regardless.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from datetime import timedelta
from typing import Any

from ..protocol import Progress, progress_key
from ..signing import JOB_KEY, SignedStore, Signer

_PERIOD_S = 1.0      # at most one write a second
_REFRESH_S = 5.0     # a report at least this often while figures come, position moving or not
_TIMEOUT_S = 2.0     # every store call of the writer
_RECONNECT_S = 5.0   # after a failure, the next connection attempt
_MAX_SAMPLES = 4096  # step timings kept between two reports (the writer may be stuck)


class _Writer:
    def __init__(self, host: str, port: int, rank: str, signer: Any = None) -> None:
        self.host, self.port, self.key = host, port, progress_key(rank)
        self.signer = signer  # the job token's key (MESHRUN_JOB_KEY): every report signed
        self.addresses: tuple[str, ...] = (host,)  # resolved on the writer's thread
        self.step = -1       # the script's newest step (meshrun.progress), -1: none
        self.coll = -1       # collectives issued (meshrun.worker.observe), -1: not observed
        self.active = -1     # active seconds on a CPU (meshrun.worker.observe), -1: none
        self.shares: list[float] = []  # work shares observed since sent
        # the training thread's marks (monotonic): the end of the last step, the last arrival
        self.ended_at: float | None = None
        self.arrived_at: float | None = None
        self.steps: list[tuple[float, float]] = []  # (step duration, busy or -1) since sent
        # on a GPU the host only queues the work: the compute time is the device's, between
        # CUDA events recorded at the step's end and at the arrival (read once complete)
        self.cuda: Any = None
        self.end_event: Any = None
        self.arrive_event: Any = None
        self.pending: deque = deque()   # (end of step s-1, arrival of step s) events
        self.gpu_busy: list[float] = []  # device compute times since sent
        self.wake = threading.Event()
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, name="meshrun-progress", daemon=True)
        self.thread.start()

    def note(self, step: int) -> None:
        now = time.monotonic()
        ended, arrived = self.ended_at, self.arrived_at
        if ended is not None and len(self.steps) < _MAX_SAMPLES:
            busy = arrived - ended if arrived is not None and arrived >= ended else -1.0
            self.steps.append((now - ended, busy))  # list.append: atomic, never waits
        self.ended_at = now
        if self._device() is not None:
            self._gpu_note()
        self.step = step  # one assignment: the training thread never waits
        self.wake.set()

    def observe(self, coll: int, share: float, active: int = -1) -> None:
        """The observer's sample (its own thread): collectives issued, the work share of the
        last interval (-1: none yet), active seconds (-1: not counted)."""
        self.coll, self.active = coll, active
        if share >= 0 and len(self.shares) < _MAX_SAMPLES:
            self.shares.append(share)

    def arrive(self) -> None:
        self.arrived_at = time.monotonic()
        cuda = self._device()
        if cuda is not None:
            self.arrive_event = cuda.Event(enable_timing=True)
            self.arrive_event.record()

    def _device(self) -> Any:
        """torch.cuda once the script has initialised CUDA (never imports torch itself)."""
        if self.cuda is None:
            torch = sys.modules.get("torch")
            cuda = getattr(torch, "cuda", None)
            try:
                if cuda is not None and cuda.is_initialized():
                    self.cuda = cuda
            except Exception:  # noqa: BLE001, S110 - then the host's clock serves
                pass
        return self.cuda

    def _gpu_note(self) -> None:
        """At a step's end: pair the last end and arrival events, record this end, and read
        every pair the device has completed (never waits for one)."""
        if self.end_event is not None and self.arrive_event is not None:
            self.pending.append((self.end_event, self.arrive_event))
            if len(self.pending) > 64:   # a device that never completes: keep the newest
                self.pending.popleft()
        self.arrive_event = None
        self.end_event = self.cuda.Event(enable_timing=True)
        self.end_event.record()
        while self.pending and self.pending[0][1].query():
            end, arrival = self.pending.popleft()
            if len(self.gpu_busy) < _MAX_SAMPLES:
                self.gpu_busy.append(end.elapsed_time(arrival) / 1000.0)

    def _report(self) -> Progress:
        """The position now and the means of what came since the last report."""
        steps, self.steps = self.steps, []  # a sample noted meanwhile may be lost: harmless
        gpu, self.gpu_busy = self.gpu_busy, []
        shares, self.shares = self.shares, []
        work = sum(shares) / len(shares) if shares else -1.0
        if not steps:
            return Progress(self.step, time.time(), coll=self.coll, work=work,
                            active=self.active)
        busy = gpu if self.cuda is not None else [b for _, b in steps if b >= 0]
        return Progress(self.step, time.time(), sum(d for d, _ in steps) / len(steps),
                        sum(busy) / len(busy) if busy else -1.0, len(steps), self.coll, work,
                        self.active)

    def _due(self, sent: tuple[int, int, int] | None, sent_at: float, halting: bool) -> bool:
        """A report now: the position moved since the last one, or timings wait and the
        last is ``_REFRESH_S`` old (a long step still gets its figures to node 0)."""
        position = (self.step, self.coll, self.active)
        if position == (-1, -1, -1):
            return False
        if position != sent:
            return True
        return not halting and bool(self.shares or self.steps) and \
            time.monotonic() - sent_at >= _REFRESH_S

    def _run(self) -> None:
        from ..sockets import resolve

        self.addresses = resolve(self.host)  # for close(), not here (the host if none)
        store: Any = None
        retry_at = sent_at = 0.0
        sent: tuple[int, int, int] | None = None
        while True:
            self.wake.wait(_PERIOD_S)
            self.wake.clear()
            halting = self.halt.is_set()  # at exit: one last send of the newest position
            if self._due(sent, sent_at, halting) and (halting or time.monotonic() >= retry_at):
                try:
                    if store is None:
                        from torch.distributed import TCPStore

                        store = TCPStore(self.host, self.port, is_master=False,
                                         timeout=timedelta(seconds=_TIMEOUT_S),
                                         wait_for_workers=False)
                        if self.signer is not None:  # above node 0's first value of
                            store = SignedStore(store, self.signer)   # the key, whatever
                            store.catch_up([self.key])                # this host's clock
                    report = self._report()
                    store.set(self.key, report.encode())
                    sent, sent_at = report.moved, time.monotonic()
                except Exception:  # noqa: BLE001 - progress reports must never break training
                    store, retry_at = None, time.monotonic() + _RECONNECT_S
            if halting:
                return
            self.halt.wait(_PERIOD_S)  # at most one write a second

    def close(self) -> None:
        """At exit: stop the thread; if a call of it is stuck, shut its connection."""
        self.halt.set()
        self.wake.set()
        self.thread.join(_TIMEOUT_S)
        if self.thread.is_alive():
            from ..sockets import shut_connections

            shut_connections(self.port, self.addresses)
            self.thread.join(_TIMEOUT_S)


_state: dict[str, Any] = {"writer": None, "off": False}
_lock = threading.Lock()


def progress(step: int) -> None:
    writer = _writer()
    if writer is not None:
        writer.note(int(step))


def arrive() -> None:
    """This rank has done its own work for the step and is about to wait for the others
    (see the module's docstring). Does nothing outside meshrun."""
    writer = _writer()
    if writer is not None:
        writer.arrive()


def observed(coll: int, share: float, active: int = -1) -> None:
    """The worker shim's observer (:mod:`meshrun.worker.observe`) hands its samples here."""
    writer = _writer()
    if writer is not None:
        writer.observe(coll, share, active)


def _writer() -> _Writer | None:
    if _state["off"]:
        return None
    writer = _state["writer"]
    if writer is None:
        with _lock:
            writer = _state["writer"]
            if writer is None and not _state["off"]:
                writer = _start()
    return writer


def _start() -> _Writer | None:
    where = os.environ.get("MESHRUN_STORE", "")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit() or "RANK" not in os.environ:
        _state["off"] = True
        return None
    import atexit

    key = os.environ.get(JOB_KEY, "")
    try:
        signer = Signer.from_key(key, run_id="") if key else None
    except ValueError:  # not hex: reports would be ignored; none are sent
        _state["off"] = True
        return None
    writer = _Writer(host, int(port), os.environ["RANK"], signer)
    _state["writer"] = writer
    atexit.register(writer.close)
    return writer
