"""Every worker starts here, then runs the user's script or module exactly as python would.

    python -u -m meshrun.worker.bootstrap -- SCRIPT ARGS...
    python -u -m meshrun.worker.bootstrap -m MODULE ARGS...

Two things happen first, neither importing torch:

1. ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills this worker the moment
   its parent (this node's elastic agent) dies, even by SIGKILL, so a dead
   agent never leaves orphans holding GPUs and ports;
2. ``faulthandler`` on SIGUSR1 writes every thread's Python stack to
   ``<MESHRUN_LOG_DIR>/stacks/rank<R>.txt``: the watchdog asks for it when the
   job hangs. A fatal signal (an abort in C++, a segfault) writes the same there before
   the process dies: where in Python it was when the native code gave up.

With ``meshrun run --node-check`` the node check (:mod:`meshrun.worker.nodecheck`) runs
next, on the first attempt. Then the observer's thread starts
(:mod:`meshrun.worker.observe`: the script's collectives, for the hang and slow-node
checks). Then ``runpy`` runs the target as ``__main__`` with ``sys.argv`` and
``sys.path[0]`` as ``python SCRIPT`` / ``python -m MODULE`` would set them. When it fails,
the moment and its error line go to ``failures/rank<R>.json`` (:mod:`meshrun.worker.failure`:
the node names the first cause from them, not torch's whole-second order), and its
traceback is printed from the script's own first frame (not this shim's and runpy's).
When it succeeds, what it left is collected and its process group destroyed before the
interpreter shuts down (see :func:`_tear_down`: otherwise a gloo thread can abort a
successful run at exit).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import runpy
import signal
import sys

from . import failure, frozen, streams

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


def _stacks_to_file() -> None:
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
    if not faulthandler.is_enabled():  # the user's own (PYTHONFAULTHANDLER) stays theirs
        faulthandler.enable(file=handle, all_threads=True)  # SIGABRT, SIGSEGV, SIGBUS, ...
    _KEEP.append(handle)  # faulthandler needs the file open for the process's life


_KEEP: list = []


def _observe() -> None:
    """The script's collectives, observed from a thread of their own for the watchdog
    (:mod:`meshrun.worker.observe`): progress and slowness for a script that calls nothing."""
    if "MESHRUN_STORE" not in os.environ:
        return
    from .observe import start
    from .progress import observed

    start(observed)


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("--", "-m"):
        sys.exit("usage: python -m meshrun.worker.bootstrap (-- SCRIPT | -m MODULE) [ARGS...]")
    failure.clear()  # this rank's record of an earlier attempt is not this attempt's
    if frozen.enabled(os.environ):
        frozen.install()  # the script's `import torch`, without the collector (frozen.py)
    _die_with_parent()
    _stacks_to_file()
    streams.tolerate()  # a full log disk drops output, never the training
    if os.environ.get("MESHRUN_NODE_CHECK") == "1":  # meshrun run --node-check
        from .nodecheck import before_script

        before_script()
    _observe()
    mode, target, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    import atexit

    # Registered first, so it runs last: after the script's own atexit handlers, and after
    # Python has joined the script's non-daemon threads (an async checkpoint save, an upload).
    atexit.register(_tear_down_if, _SUCCEEDED)
    try:
        _run(mode, target, args)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            failure.record(failure.line_of(exc), failure.exit_code(exc))
            raise
    except Exception as exc:
        failure.record(failure.line_of(exc), 1)  # when, to the microsecond: the first cause
        shown = _script_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(shown), shown)  # Python reads the former
        sys.exit(1)  # what Python exits with for an uncaught exception
    except BaseException as exc:  # KeyboardInterrupt and its kin: Python's own ending
        failure.record(failure.line_of(exc), 1)
        raise
    _SUCCEEDED.append(True)


def _script_frames(tb):
    """The traceback from the script's first frame on: the frames of this shim and of
    ``runpy`` that lead to it are meshrun's, not the user's (Python would print eight of
    them atop every traceback). Frames of meshrun the script called stay."""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name != __file__ and name != "<frozen runpy>" and not name.endswith("runpy.py"):
            break
        tb = tb.tb_next
    return tb


_SUCCEEDED: list = []


def _tear_down_if(succeeded: list) -> None:
    if succeeded:
        _tear_down()


def _run(mode: str, target: str, args: list[str]) -> None:
    """Run the target as ``python SCRIPT`` / ``python -m MODULE`` would (its namespace is
    dropped on return, so what only it held can be collected)."""
    sys.argv = [target, *args]
    if mode == "-m":
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


def _tear_down() -> None:
    """After the script succeeded: free what it left and destroy its process group while the
    interpreter is still whole.

    A script that ends without ``destroy_process_group()`` (an HF Trainer script, most
    scripts) leaves a gloo process group and the DDP model holding it for the interpreter's
    shutdown to collect; a gloo worker thread that then wants the GIL is ended mid-C++ and
    the process aborts (``terminate called without an active exception``, exit 134) after
    training succeeded. Seen under plain torchrun too (2 of 8 runs of an HF Trainer script
    on CPU). Collecting first, then destroying the group with every rank
    (:func:`meshrun.worker.leave.destroy_process_group`: nobody exits while another is still
    tearing down, the race's other half), ends those threads in order. It
    runs as the last atexit handler: the script's threads are joined and its own handlers
    have run, the interpreter is still whole. The collections run even when the script
    destroyed its group itself (accelerate's ``end_training`` does): what still holds gloo
    objects must go while the interpreter is whole (skipping them there to save their
    0.1-0.5 CPU-s brought the abort back, once in a fresh-clone run)."""
    import gc

    observer = sys.modules.get("meshrun.worker.observe")
    if observer is not None:
        observer.stop()  # no sample may hold the group while it is destroyed
    gc.collect()
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            from .leave import destroy_process_group

            destroy_process_group()  # with every rank: none exits while another tears down
    except Exception:  # noqa: BLE001, S110 - the run succeeded; its exit must not fail it
        pass
    gc.collect()


if __name__ == "__main__":
    main()
