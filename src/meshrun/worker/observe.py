"""What every worker's collectives say, for a script that calls nothing of meshrun's.

The worker shim (:mod:`meshrun.worker.bootstrap`) starts one daemon thread, ``meshrun-observe``,
before the script. Once a second, when the script's process group exists, it reads three
figures and hands them to the progress writer (:mod:`meshrun.worker.progress`), which sends
them to the job's store with the rank's next report:

- **collectives**: how many collectives this rank has issued, over every process group of the
  process (torch's per-group sequence numbers, the same counter its flight recorder and
  NCCL's watchdog use; DDP's and FSDP's own collectives, issued from C++, count too). A rank
  issues collective k + 1 only once its collective k has returned (or been queued behind
  it), so a count that moves is a rank whose collectives complete: progress, for the hang
  check, without ``meshrun.progress()``. No count moves anywhere: the job is stuck, and the
  rank whose count is behind the others' is the one they wait for.
- **work share**: the part of the last ``SPAN_S`` seconds the rank spent working rather than
  waiting for the others, the figure the slow-node check compares between nodes (in synchronous
  training every rank's step takes as long as the slowest rank's; the slowest is the one
  that waits least).

  - On a CPU (gloo): the kernel's own accounting of the threads that do the step's work,
    ``/proc/self/task/<tid>/schedstat``: time on a CPU plus time runnable but waiting for one
    (a CPU quota's throttling counts there), over wall time, summed over the script's main
    thread (the compute) and gloo's threads (``pt_gloo_runloop``: a collective's copies and
    reductions; ``gloo_tcp_loop``: its bytes in and out). A rank blocked in a collective
    (waiting for the others' bytes) sleeps in all of them, and counts as not working. With
    gloo's threads the figure can pass 1 (they work beside the main thread: a bucket's
    all-reduce during the backward); it is seconds of work a second. Without them a slow
    node's collectives (FSDP2's all-gathers and reduce-scatters, half its step) counted
    as waiting on both nodes, which diluted it: FSDP2 on two nodes at a 1.5x CPU quota cut
    read 1.12-1.16x (main thread alone) against 1.36x (``bench/observe.py``,
    docs/benchmarks.md).
    torch's intra-op threads are left out (OpenMP's spin after each parallel region
    would count as work on every node alike); a torch whose gloo threads carry other names
    is measured by the main thread alone (torch 2.13 names them so; a test checks).
  - On NCCL, only with ``MESHRUN_OBSERVE=timing``: the time the rank's collectives took on
    the device, from NCCL's completion hooks (``active_duration``, CUDA events around each
    collective: it includes the wait for the slowest peer; torch needs
    ``TORCH_NCCL_ENABLE_TIMING=1``, which the plan then sets), over wall time: work share =
    1 - that share. Not by default: on an H100, 3-ms steps of 4 collectives each ran 2.2 %
    slower with NCCL's timing events and 4.9 % with the hook too (a Python call per
    collective: the training thread hands over the GIL each time;
    ``bench/gpu_observe.py``). By default a process with an NCCL group reports no share
    (its CPU says nothing: a rank waiting for the device spins on it).

- **active seconds** (CPU only): the seconds in which the main thread worked at least half
  the time (that second's share >= 0.5). A rank computing on its own outside any
  collective (rank 0 preparing a dataset while the others wait in a barrier) is not a hang:
  its count moves. Never on NCCL: a rank waiting for a stuck collective spins on its CPU in
  the device's synchronisation, so its CPU says nothing there. A rank that computes without
  end (a loop that never reaches its next collective) is therefore not a hang on gloo;
  ``meshrun.progress()`` tells that one.

The cost on a CPU: one wake-up a second, a file read and one call per process group (about
30 microseconds); nothing on the training thread. ``MESHRUN_OBSERVE=0`` turns it off (then only ``meshrun.progress()`` and
``meshrun.arrive()`` give progress and timings).

torch is never imported here: the thread looks for ``torch.distributed`` in ``sys.modules``
(the script imported it) and does nothing until the script's process group exists.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

PERIOD_S = 1.0
SPAN_S = 5.0         # the work share is taken over the last this many seconds of samples
ACTIVE_SHARE = 0.5   # a second with this work share (CPU) or more is an active one


def schedstat(path: str = "/proc/self/schedstat") -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable and waiting for one) of the thread ``path`` names
    (``/proc/self/schedstat``: this process's main thread); None where the kernel has none."""
    try:
        with open(path) as handle:
            fields = handle.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def groups(dist: Any) -> list[Any]:
    """Every process group of this process (the default one and the script's subgroups,
    DeviceMesh's included)."""
    try:
        return list(dist.distributed_c10d._world.pg_map.keys())
    except Exception:  # noqa: BLE001 - a private API: the default group alone then
        try:
            return [dist.distributed_c10d._get_default_group()]
        except Exception:  # noqa: BLE001
            return []


def collectives(pgs: list[Any]) -> int:
    """Collectives issued over ``pgs``, by torch's per-group sequence numbers."""
    total = 0
    for pg in pgs:
        try:
            total += int(pg._get_sequence_number_for_group())
        except Exception:  # noqa: BLE001, S112 - a group without one (not yet connected)
            continue
    return total


GLOO_THREADS = ("pt_gloo", "gloo_")   # gloo's threads' names (torch names them) begin so


class WorkThreads:
    """``(seconds on a CPU, seconds runnable and waiting for one)`` of this process's main
    thread and gloo's threads together, read from ``task`` (``/proc/self/task``); None where
    the kernel has none. Each call lists the threads again (gloo's come with each process
    group) and reads each one's figures (~10 small files a second). The sums only grow: each
    thread adds what it did since the last call (a thread new since then, or a thread id
    reused by a new thread, all of its time), so a thread that ends takes nothing back.
    A thread's name is read again until it has kept it for ``_NAME_READS`` calls: a thread
    carries its creator's name until it names itself."""

    _NAME_READS = 3

    def __init__(self, task: str = "/proc/self/task", main: int | None = None) -> None:
        self.task, self.main = task, str(os.getpid() if main is None else main)
        self.names: dict[str, tuple[str, int]] = {}        # tid -> (name, times read alike)
        self.last: dict[str, tuple[float, float]] = {}     # tid -> its figures last time
        self.run = self.wait = 0.0

    def _name(self, tid: str) -> str:
        name, seen = self.names.get(tid, ("", 0))
        if seen < self._NAME_READS:
            try:
                with open(f"{self.task}/{tid}/comm") as handle:
                    now = handle.read().strip()
            except OSError:
                return ""
            seen = seen + 1 if now == name else 1
            name = now
            self.names[tid] = (name, seen)
        return name

    def __call__(self) -> tuple[float, float] | None:
        try:
            tids = os.listdir(self.task)
        except OSError:
            return None
        now: dict[str, tuple[float, float]] = {}
        for tid in tids:
            if tid == self.main or self._name(tid).startswith(GLOO_THREADS):
                got = schedstat(f"{self.task}/{tid}/schedstat")
                if got is not None:
                    now[tid] = got
        if self.main not in now:
            return None
        for tid, (run, wait) in now.items():
            before = self.last.get(tid, (0.0, 0.0))
            if run < before[0] or wait < before[1]:   # the id of a thread that ended, reused
                before = (0.0, 0.0)
                self.names.pop(tid, None)             # its name is read again next time
            self.run += run - before[0]
            self.wait += wait - before[1]
        self.last = now
        self.names = {tid: self.names[tid] for tid in tids if tid in self.names}
        return self.run, self.wait


class Observer:
    """The figures of one interval (see the module). ``dist`` is ``torch.distributed`` once
    the script imported it; ``clock`` and ``stat`` are the wall clock and the working
    threads' schedstat (:class:`WorkThreads`; tests give their own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 stat: Callable[[], tuple[float, float] | None] | None = None,
                 timing: bool = False) -> None:
        self.clock, self.timing = clock, timing
        self.stat = stat if stat is not None else WorkThreads()
        self.last: tuple[float, float, float] | None = None   # (wall, cpu-side busy, coll time)
        self.span: deque[tuple[float, float, float]] = deque()  # the samples of SPAN_S
        self.coll_time = 0.0          # NCCL: seconds in collectives, from the hooks
        self._hooked: set[int] = set()
        self._nccl = False            # some group of this process is NCCL
        self._timed = False           # ... and its collectives are timed (hooked)
        self.active = 0               # active seconds (CPU only; see the module)
        self._lock = threading.Lock()

    def sample(self, dist: Any) -> tuple[int, float, int] | None:
        """(collectives issued, work share over the last ``SPAN_S`` seconds (-1 for the
        first sample, and on NCCL without timing), active seconds so far (-1 on NCCL)), or
        None while there is no process group.

        The share spans several samples: a step as long as a sample's interval (tensor
        parallelism on a CPU: 0.3 s) would otherwise swing one interval's share from 0.1 to
        0.9 by where the interval fell in the step."""
        try:
            if not (dist.is_available() and dist.is_initialized()):
                return None
        except Exception:  # noqa: BLE001 - torch half torn down (exit)
            return None
        pgs = groups(dist)
        nccl = self._hook(dist, pgs)
        now = self.clock()
        cpu = self.stat()
        busy = sum(cpu) if cpu is not None else -1.0
        with self._lock:
            coll_time = self.coll_time
        last, self.last = self.last, (now, busy, coll_time)
        while self.span and now - self.span[0][0] > SPAN_S + 1e-6:
            self.span.popleft()
        first = self.span[0] if self.span else None
        self.span.append((now, busy, coll_time))
        share = -1.0
        if last is not None and now > last[0] and first is not None:
            wall = now - first[0]
            if nccl:
                if self._timed:
                    share = max(0.0, 1.0 - (coll_time - first[2]) / wall)
            elif busy >= 0 and last[1] >= 0 and first[1] >= 0:
                share = max(0.0, (busy - first[1]) / wall)
                step = (busy - last[1]) / (now - last[0])   # this interval alone
                if step >= ACTIVE_SHARE:
                    self.active += max(1, round(now - last[0]))
        return collectives(pgs), share, -1 if nccl else self.active

    def _hook(self, dist: Any, pgs: list[Any]) -> bool:
        """Note the NCCL groups not seen yet, and with ``timing`` register the completion
        hook on each; whether any group is NCCL."""
        for pg in pgs:
            if id(pg) in self._hooked:
                continue
            self._hooked.add(id(pg))
            try:
                if dist.get_backend(pg) != "nccl":
                    continue
                self._nccl = True
                if self.timing:
                    pg._register_on_completion_hook(self._on_completion)
                    self._timed = True
            except Exception:  # noqa: BLE001, S112 - no timing (torch refused): counts only
                continue
        return self._nccl

    def _on_completion(self, info: Any) -> None:
        """NCCL's watchdog thread, once per completed collective."""
        try:
            seconds = info.active_duration.total_seconds()
        except Exception:  # noqa: BLE001 - no timing for this one
            return
        if seconds > 0:
            with self._lock:
                self.coll_time += seconds


_STOP = threading.Event()
_BUSY = threading.Lock()   # held while a sample runs (it holds the script's process groups)


def stop(timeout: float = 2.0) -> None:
    """End the observer's sampling, waiting (at most ``timeout``) for one under way: the
    worker shim calls it before it destroys the script's process group, so that no sample
    holds a group while it is torn down (a group kept alive past that is collected at the
    interpreter's shutdown, where a gloo thread aborts the process)."""
    _STOP.set()
    if _BUSY.acquire(timeout=timeout):
        _BUSY.release()


def start(report: Callable[[int, float, int], None]) -> threading.Thread | None:
    """The ``meshrun-observe`` thread: a sample a second, handed to ``report``. Off with
    ``MESHRUN_OBSERVE=0``; NCCL's collectives timed with ``MESHRUN_OBSERVE=timing``."""
    mode = os.environ.get("MESHRUN_OBSERVE", "1").strip().lower()
    if mode == "0":
        return None
    observer = Observer(timing=mode == "timing")

    def run() -> None:
        while not _STOP.wait(PERIOD_S):
            dist = sys.modules.get("torch.distributed")
            if dist is None:
                continue
            with _BUSY:
                if _STOP.is_set():
                    return
                try:
                    sample = observer.sample(dist)
                except Exception:  # noqa: BLE001, S112 - an observation must never fail the script
                    continue
            if sample is not None:
                report(*sample)

    thread = threading.Thread(target=run, name="meshrun-observe", daemon=True)
    thread.start()
    return thread
