"""Every worker starts here, then runs the user's script or module exactly as python would.

    python -u -m meshrun._worker -- SCRIPT ARGS...
    python -u -m meshrun._worker -m MODULE ARGS...

Two things happen first, neither importing torch:

1. ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills this worker the moment
   its parent (this node's elastic agent) dies, even by SIGKILL, so a dead
   agent never leaves orphans holding GPUs and ports;
2. ``faulthandler`` on SIGUSR1 writes every thread's Python stack to
   ``<MESHRUN_LOG_DIR>/stacks/rank<R>.txt``: the watchdog asks for it when the
   job hangs.

Then ``runpy`` runs the target as ``__main__`` with ``sys.argv`` and
``sys.path[0]`` as ``python SCRIPT`` / ``python -m MODULE`` would set them.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import runpy
import signal
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the agent's own cleanup still applies
        return
    if os.getppid() != parent:  # the agent died before prctl took effect
        os._exit(128 + signal.SIGKILL)


def _stacks_on_sigusr1() -> None:
    folder = os.environ.get("MESHRUN_LOG_DIR")
    rank = os.environ.get("RANK")
    if not folder or rank is None or not hasattr(signal, "SIGUSR1"):
        return
    try:
        os.makedirs(os.path.join(folder, "stacks"), exist_ok=True)
        handle = open(os.path.join(folder, "stacks", f"rank{rank}.txt"), "a")  # noqa: SIM115
    except OSError:
        return
    faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True)
    _KEEP.append(handle)  # faulthandler needs the file open for the process's life


_KEEP: list = []


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("--", "-m"):
        sys.exit("usage: python -m meshrun._worker (-- SCRIPT | -m MODULE) [ARGS...]")
    _die_with_parent()
    _stacks_on_sigusr1()
    mode, target, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if mode == "-m":
        sys.argv = [target, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
