"""meshrun's command line: parse, read the environment once, dispatch to a verb.

    meshrun plan     [NODE FLAGS] [--json] [-- SCRIPT ARGS...]
    meshrun run      [NODE FLAGS] [-- SCRIPT ARGS... | -m MODULE ARGS...]
    meshrun simulate --nodes N [--nproc-per-node M] [FLAGS] -- SCRIPT ARGS...
    meshrun render   TARGET [FLAGS] [-o FILE] -- SCRIPT ARGS...
    meshrun doctor | diagnose | report | bench ...

Each verb is one module here (``cli/<verb>.py``, a :class:`~meshrun.cli.base.Verb`); the
options they share and what is derived from the parser are in :mod:`.options`. Node flags
are also ``MESHRUN_<NAME>`` variables (a flag wins). ``os.environ`` is read here, once, and
handed down: nothing below the CLI reads it. Every user error is one line on stderr and
its exit code, the code at the end of the line (see :mod:`meshrun.errors`); stdout stays
empty, so ``--json`` output is never mixed with an error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..errors import MeshrunError
from .base import Context
from .options import flags_from, split_command, split_paths
from .parser import VERBS, build_parser, verb_parser

__all__ = ["build_parser", "flags_from", "main", "split_command", "split_paths"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one verb; however it ends (its exit code, ``SystemExit``, an exception such as
    ``BrokenPipeError`` when the reader of this node's output went away), the process exits
    then, not when every thread left running agrees (:func:`_exit_if_stuck`)."""
    try:
        code = _main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        _exit_if_stuck(code)
        raise
    except BaseException:
        try:
            import traceback

            traceback.print_exc()
        except BaseException:  # noqa: BLE001, S110 - stderr itself may be the broken pipe
            pass
        _exit_if_stuck(1)
        raise
    return _exit_if_stuck(code)


def _main(argv: Sequence[str] | None) -> int:
    if argv is None and sys.argv[1:2] == ["run"]:   # a node agent's process (not a test's call)
        from ..sockets import resolver_for_agent

        resolver_for_agent(sys.argv[1:])   # may exec this process again, once
    own_process = argv is None  # not a test's call
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)  # the one read of the environment; handed down from here
    if own_process:   # meshrun's own process: its import of torch, if any, without the
        from ..worker import frozen  # collector walking torch's objects (worker/frozen.py)

        if frozen.enabled(env):
            frozen.install()
    try:
        verb = VERBS.get(argv[0]) if argv else None
        if verb is not None and verb.takes_paths:  # paths, options anywhere among them
            options, words = split_paths(argv)
            module = False
        else:
            options, words, module = split_command(argv)
        parser = build_parser()
        args = parser.parse_args(options)
        if args.verb is None:
            parser.print_help()
            return 2
        ctx = Context(args=args, words=words, module=module, env=env,
                      parser=verb_parser(parser, args.verb))
        return VERBS[args.verb].run(ctx)
    except MeshrunError as err:
        print(err.line(), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("meshrun: interrupted", file=sys.stderr)
        return 130


def _exit_if_stuck(code: int) -> int:
    """Exit at once when a thread would stop or spoil the interpreter's exit.

    - a store call of the watchdog still stuck (its host vanished), or the watchdog thread
      itself still inside a TCPStore connection attempt (a loaded host, node 0 gone): a
      daemon thread inside a C++ call at interpreter shutdown aborts the process (SIGABRT,
      "terminate called without an active exception") and would hide ``code``;
    - any other non-daemon thread still running, such as torch's ``TailLog`` readers that
      its agent leaves running when a second signal interrupts its shutdown: the
      interpreter would wait for them forever, and the node's agent would linger after
      its workers are gone."""
    import threading

    main_thread = threading.main_thread()
    if any(t.is_alive() and t is not main_thread
           and (t.name in ("meshrun-store-calls", "meshrun-watchdog") or not t.daemon)
           for t in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # the reader went away, or the stream is closed
                pass
        os._exit(code)
    return code
