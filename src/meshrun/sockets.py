"""Sockets of this process, beyond what the store client offers: cut this process's own
connections to a store whose host went silent, and resolve a host once. Linux (``/proc``);
used by the agent (a lost store host) and by :func:`meshrun.progress` (its writer thread)."""

from __future__ import annotations

import os
import socket
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


def resolve(host: str) -> tuple[str, ...]:
    """The addresses ``host`` resolves to (itself if it does not resolve)."""
    try:
        return tuple({info[4][0] for info in socket.getaddrinfo(host, None)}) or (host,)
    except OSError:
        return (host,)
