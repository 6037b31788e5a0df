"""Sockets of this process, beyond what the store client offers: cut this process's own
connections to a store whose host went silent, and resolve a host within a timeout. Linux
(``/proc``); used by the agent (a lost store host) and by :func:`meshrun.progress` (its
writer thread).
And the resolver settings a node agent runs with (:func:`resolver_for_agent`)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence


def shut_connections(port: int, addresses: Sequence[str] = ()) -> int:
    """Shut down (``shutdown(SHUT_RDWR)``) this process's TCP connections to ``port`` on one of
    ``addresses`` (any address if empty); returns how many.

    For a lost store host: torch's own clients of the job's store (the agent's rendezvous)
    may be blocked in ``recv()`` on a connection whose peer vanished without closing it;
    after the shutdown that ``recv()`` returns, torch raises, and the agent stops in order.
    Linux only (reads ``/proc/self/fd``); elsewhere it does nothing."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    count = 0
    for name in fds:
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET,
                                                                   socket.AF_INET6):
                host, peer_port = sock.getpeername()[:2]
                host = host.removeprefix("::ffff:")  # IPv4 on a dual-stack socket
                if peer_port == port and (not addresses or host in addresses):
                    sock.shutdown(socket.SHUT_RDWR)
                    count += 1
        except OSError:
            pass  # not connected
        finally:
            sock.close()  # closes the duplicate only
    return count


def lookup(host: str, port: int | None = None, timeout: float = 5.0,
           kind: int = 0) -> tuple[list, str]:
    """``socket.getaddrinfo(host, port, type=kind)`` within ``timeout`` seconds: ``(infos, "")``
    or ``([], why)``. The lookup runs in a daemon thread, so a DNS server that never answers
    holds no caller longer than ``timeout`` (glibc's own retries can take 2 x 5 s, more with
    several servers); the thread ends when glibc gives up."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["infos"] = socket.getaddrinfo(host, port, type=kind)
        except (OSError, UnicodeError) as exc:   # UnicodeError: a label IDNA refuses
            box["error"] = f"cannot resolve: {getattr(exc, 'strerror', None) or exc}"
        except Exception as exc:  # noqa: BLE001 - any other: said, never printed by the thread
            box["error"] = f"cannot resolve: {type(exc).__name__}: {exc}"

    worker = threading.Thread(target=run, name="meshrun-lookup", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return [], f"name lookup did not answer within {timeout:g} s"
    if "error" in box:
        return [], str(box["error"])
    return list(box.get("infos", [])), ""


def resolve(host: str, timeout: float = 5.0) -> tuple[str, ...]:
    """The addresses ``host`` resolves to (itself if it does not resolve within ``timeout``)."""
    infos, _ = lookup(host, None, timeout)
    return tuple({info[4][0] for info in infos}) or (host,)


# --- the resolver of a node agent (issue 21: a flood of connections to the job store) ------

#: The resolver options a node agent runs with unless the user set ``RES_OPTIONS``: a name
#: lookup whose reply is lost fails after 1 s instead of glibc's 2 x 5 s.
AGENT_RES_OPTIONS = "timeout:1 attempts:1"
_MARK = "MESHRUN_RESOLVER_SET"   # set across the re-exec, removed at once after it


def resolver_for_agent(argv: Sequence[str], environ: dict[str, str] | None = None) -> None:
    """Before anything else in a ``meshrun run`` process: run with :data:`AGENT_RES_OPTIONS`.

    torch's store server looks up the host name of every connection it accepts
    (``getnameinfo``), on the one thread that serves every client: a reverse lookup whose
    DNS reply is lost holds every call of every node for glibc's 5 s (measured: 200 idle
    connections to the port made every call take 4-5 s, and meshrun then named node 0
    lost). glibc reads ``RES_OPTIONS`` once, when the process first loads its resolver
    settings, so this process starts again (``exec``, same pid) with it set, loads the
    settings at once, and takes the variable out of its environment again: the workers,
    which inherit the environment, resolve as the user's settings say. A user's own
    ``RES_OPTIONS`` is left alone (and then nothing is done). Not on non-glibc systems
    (no ``__res_init``): nothing is done there either."""
    env = os.environ if environ is None else environ
    if env.get(_MARK) == "1":   # the process after the exec: load them, then forget them
        load_resolver()
        env.pop(_MARK, None)
        env.pop("RES_OPTIONS", None)
        return
    if "RES_OPTIONS" in env or _res_init() is None:
        return
    import sys

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # the command line as it was, interpreter options too (simulate starts nodes with -u)
    again = list(getattr(sys, "orig_argv", None) or [sys.executable, "-m", "meshrun", *argv])
    os.execve(sys.executable, again, {**env, "RES_OPTIONS": AGENT_RES_OPTIONS, _MARK: "1"})


def _res_init():
    """glibc's ``__res_init`` (it loads the resolver settings), or None elsewhere."""
    try:
        import ctypes

        return getattr(ctypes.CDLL(None), "__res_init", None)
    except OSError:
        return None


def load_resolver() -> bool:
    """Load glibc's resolver settings now (with this environment's ``RES_OPTIONS``)."""
    init = _res_init()
    return init is not None and init() == 0
