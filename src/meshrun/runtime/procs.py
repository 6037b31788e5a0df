"""This agent's worker processes as ``/proc`` shows them, and signals sent only to them.

- :func:`children` lists this process's children from ``/proc/self/task/*/children``
  (every thread's: torch may start workers from any), and, where the kernel was built
  without CONFIG_PROC_CHILDREN (no such files), from every ``/proc/<pid>/stat`` whose
  parent is this process.
- :func:`worker_pids` maps rank -> pid for the children that carry a ``RANK`` variable,
  and remembers each one's start time.
- :func:`send` signals a pid only while it is still that worker: a pid read at probe time
  and signalled seconds later may by then belong to another process (the worker exited and
  the kernel reused its number). The check and the signal go through a pidfd, so nothing
  can take the number between them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

_lock = threading.Lock()
_started: dict[int, str] = {}  # pid -> start time (clock ticks after boot) when it was listed


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) from /proc/<pid>/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[19]  # stat fields 4 (ppid) and 22 (starttime)
    except (OSError, IndexError, ValueError):
        return None


def children(*, children_files: bool = True) -> list[int]:
    """This process's children (see the module). ``children_files=False`` takes the
    fallback path even where the kernel has the files."""
    me = os.getpid()
    if children_files:
        found: set[int] = set()
        readable = False
        try:
            tasks = os.listdir(f"/proc/{me}/task")
        except OSError:
            tasks = []
        for task in tasks:
            try:
                with open(f"/proc/{me}/task/{task}/children") as handle:
                    found.update(int(p) for p in handle.read().split())
                readable = True
            except (OSError, ValueError):
                continue
        if readable:
            return sorted(found)
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None and stat[0] == me:
                out.append(int(name))
    return sorted(out)


def _environ(pid: int) -> dict[bytes, bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return dict(item.split(b"=", 1) for item in handle.read().split(b"\0")
                        if b"=" in item)
    except (OSError, ValueError):
        return {}


def worker_pids(*, children_files: bool = True) -> dict[int, int]:
    """rank -> pid of this process's worker children; remembers when each started."""
    out: dict[int, int] = {}
    for pid in children(children_files=children_files):
        env = _environ(pid)
        stat = _stat(pid)
        try:
            if b"RANK" in env and stat is not None:
                out[int(env[b"RANK"])] = pid
                with _lock:
                    _started[pid] = stat[1]
        except ValueError:
            continue
    return out


def worker_env() -> dict[bytes, bytes]:
    """The environment of one of this process's workers (empty when there is none)."""
    for pid in children():
        env = _environ(pid)
        if b"RANK" in env:
            return env
    return {}


def send(pid: int, sig: int) -> bool:
    """Send ``sig`` to ``pid`` if it is still the worker :func:`worker_pids` listed: this
    process's child, started when it was listed. False when it is not (gone, or the number
    now belongs to another process)."""
    with _lock:
        started = _started.get(pid)
    if started is None:
        return False
    try:
        handle = os.pidfd_open(pid)
    except (OSError, AttributeError):
        handle = None
    try:
        stat = _stat(pid)
        if stat is None or stat != (os.getpid(), started):
            return False
        if handle is not None:
            signal.pidfd_send_signal(handle, sig)  # the process the check saw, and no other
        else:
            os.kill(pid, sig)
        return True
    except OSError:
        return False
    finally:
        if handle is not None:
            os.close(handle)


def in_exit_barrier(thread_id: int | None) -> bool:
    """Whether the thread's Python stack is inside torch's agent's ``_exit_barrier`` (its
    workers all finished; it waits for the other nodes' agents)."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    while frame is not None:
        if frame.f_code.co_name == "_exit_barrier":
            return True
        frame = frame.f_back
    return False
