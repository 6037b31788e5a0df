"""Liveness links: one idle TCP connection from every node's agent to node 0's, so that a
killed node is named in about a second instead of after its heartbeat's silence.

When a process dies (SIGKILL, a crash, the OOM killer), its kernel closes its sockets: the
other end reads end-of-file at once. Node 0's :class:`Hub` listens on a port the kernel
picks (published as ``meshrun/links``, :class:`meshrun.protocol.Endpoint`) and watches
every node's :class:`Link` with one selector; each link carries the node's rank when it
opens and one byte when the node ends in order (its :class:`~meshrun.runtime.events.Goodbye`,
after the goodbye heartbeat). A link that closes without that byte is a node whose agent
died. Node 0's end does the same the other way: every node learns at once that node 0's
agent died.

What a link cannot see: a frozen host or a cut cable send nothing at all, so those are
still found by the heartbeats (``--node-timeout``). A link that never opened (a firewall)
only means the heartbeats alone judge that node.

A link proves which node it is: its header carries the node's rank and the token of its
claim from the join (``meshrun/node/<k>``: a random tag each process draws), and the hub
takes it only when that token is the rank's claim's. A connection with another token (a
stranger on the port, a second process given the same rank) is held unverified while node
0's watchdog reads the rank's claim again (a node that came back may link before node 0
saw its new claim), then closed and reported once (:meth:`Hub.ignored`); it never replaces,
closes or speaks for the rank's real link. A link with the rank's current token replaces an
older one of another token: the node came back as a new process. (Anyone who can read the
job's store can read a claim's token too: the job token of issue 21 is the protection
against those; this stops the four-byte stranger.)
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable

_HEADER = struct.Struct("!I8s")  # the node rank and its claim's token, when a link opens
_CONNECT_S = 3.0
UNVERIFIED_S = 5.0   # how long a link with an unknown token waits for node 0 to check it
MAX_UNVERIFIED = 64  # unverified connections held at once; older ones are dropped first


def token_bytes(token: str | bytes) -> bytes:
    """The header's 8 bytes for a claim's token (text), or for the job token's proof of it
    (bytes: :meth:`meshrun.signing.Signing.link_token`)."""
    raw = token if isinstance(token, bytes) else token.encode("ascii", "replace")
    return raw[:8].ljust(8, b"\0")


class Hub(threading.Thread):
    """Node 0's end: accepts links, reads their goodbyes, notes the ones that died."""

    def __init__(self, host: str, *, on_change: Callable[[], None] = lambda: None,
                 tokens: dict[int, str | bytes] | None = None) -> None:
        super().__init__(name="meshrun-links", daemon=True)
        self._tokens = {r: token_bytes(t) for r, t in (tokens or {}).items()}  # rank -> claim's
        self._link_token: dict[int, bytes] = {}          # rank -> its live link's token
        self._unverified: dict[socket.socket, tuple[int, bytes, float, str]] = {}
        self._ignored: list[tuple[str, str]] = []         # (kind, line) not yet taken
        # accepted, no whole header yet: (when it was accepted, what it has sent)
        self._pending: dict[socket.socket, tuple[float, bytes]] = {}
        self._server = socket.create_server((host, 0), backlog=1024)
        self._server.setblocking(False)
        self.port = self._server.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._lock = threading.RLock()
        self._conns: dict[int, socket.socket] = {}      # rank -> its link
        self.goodbyes: dict[int, str] = {}              # rank -> the byte it sent, decoded
        self.died: dict[int, float] = {}                # rank -> when its link closed bare
        self._halt = False
        self._on_change = on_change

    def run(self) -> None:
        pending = self._pending
        while not self._halt:
            try:
                ready = self._selector.select(0.5)
            except (OSError, ValueError):
                return
            for key, _ in ready:
                sock = key.fileobj
                if sock is self._server:
                    try:
                        conn, _ = self._server.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    pending[conn] = (time.monotonic(), b"")
                    self._selector.register(conn, selectors.EVENT_READ, None)
                    continue
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(64)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if sock in pending:
                    since, header = pending[sock]
                    header += data
                    if data and len(header) < _HEADER.size:
                        pending[sock] = (since, header)
                        continue
                    del pending[sock]
                    if len(header) < _HEADER.size:
                        self._forget(sock)
                        continue
                    rank, token = _HEADER.unpack(header[:_HEADER.size])
                    data = header[_HEADER.size:]
                    if not self._admit(sock, rank, token):
                        continue
                    if not data:
                        continue
                elif sock in self._unverified:
                    if not data:                # gone before it was checked
                        self._drop(sock, "it closed before its token was checked")
                    continue
                self._read(sock, data, self._selector.get_key(sock).data)
            self._expire()

    def _admit(self, sock: socket.socket, rank: int, token: bytes) -> bool:
        """Take a link whose token is its rank's claim's; hold any other for checking."""
        with self._lock:
            expected = self._tokens.get(rank)
            if expected is None or token != expected:
                self._unverified[sock] = (rank, token, time.monotonic(), _peer(sock))
                while len(self._unverified) > MAX_UNVERIFIED:
                    oldest = next(iter(self._unverified))
                    self._drop(oldest, "too many unverified links at once")
                self._selector.modify(sock, selectors.EVENT_READ, None)
                return False
            live = self._conns.get(rank)
            if live is not None and self._link_token.get(rank) == token:
                self._ignore(sock, rank, _peer(sock), f"node {rank}'s link is already open")
                return False
            if live is not None:        # the node came back as a new process
                self._conns.pop(rank, None)
                self._forget(live)
            self._conns[rank] = sock
            self._link_token[rank] = token
            self.died.pop(rank, None)
            self.goodbyes.pop(rank, None)
        self._selector.modify(sock, selectors.EVENT_READ, rank)
        return True

    def unverified(self) -> list[int]:
        """The ranks of links waiting for node 0 to read their claim again."""
        with self._lock:
            return sorted({rank for rank, *_ in self._unverified.values()})

    def expect(self, rank: int, token: str | bytes) -> None:
        """``token`` is ``rank``'s claim's now (node 0 read it): a link held for it with that
        token is taken on the hub's next turn (within half a second); the others stay until
        they expire."""
        with self._lock:
            self._tokens[rank] = token_bytes(token)

    def ignored(self) -> list[tuple[str, str]]:
        """The connections refused since the last call: (its kind — the rank claimed and
        why —, the line to say)."""
        with self._lock:
            out, self._ignored = self._ignored, []
        return out

    def _expire(self) -> None:
        """The hub's thread, each turn: take the held links whose token is now known to be
        their rank's claim's; drop those held too long."""
        now = time.monotonic()
        with self._lock:
            known = [(s, r, t) for s, (r, t, _, _) in self._unverified.items()
                     if self._tokens.get(r) == t]
            old = [s for s, (_, _, since, _) in self._unverified.items()
                   if now - since >= UNVERIFIED_S]
        for sock, rank, token in known:
            with self._lock:
                self._unverified.pop(sock, None)
            if self._admit(sock, rank, token):
                self._on_change()
        for sock in old:
            self._drop(sock, "it did not carry the token of that node's claim from the join")
        silent = [s for s, (since, _) in self._pending.items() if now - since >= UNVERIFIED_S]
        for sock in silent:  # connected, never sent a whole header: an idle stranger
            del self._pending[sock]
            self._forget(sock)

    def _drop(self, sock: socket.socket, why: str) -> None:
        with self._lock:
            entry = self._unverified.pop(sock, None)
        if entry is not None:
            self._ignore(sock, entry[0], entry[3], why)

    def _ignore(self, sock: socket.socket, rank: int, peer: str, why: str) -> None:
        with self._lock:
            self._ignored.append((f"{rank}: {why}", f"meshrun: ignored a liveness link "
                                  f"claiming node {rank} from {peer}: {why}"))
        self._forget(sock)

    def _read(self, sock: socket.socket, data: bytes, rank: int) -> None:
        with self._lock:
            current = self._conns.get(rank) is sock  # not a link this rank has replaced
        if not current:
            self._forget(sock)
            return
        if data:
            with self._lock:
                self.goodbyes[rank] = data[:1].decode(errors="replace")
            self._on_change()
            return
        self._forget(sock)
        with self._lock:
            self._conns.pop(rank, None)
            if rank not in self.goodbyes:
                self.died[rank] = time.monotonic()
        self._on_change()

    def _forget(self, sock: socket.socket) -> None:
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def linked(self) -> set[int]:
        with self._lock:
            return set(self._conns)

    def said(self) -> dict[int, str]:
        """rank -> the goodbye byte its link carried (decoded)."""
        with self._lock:
            return dict(self.goodbyes)

    def dead(self) -> dict[int, float]:
        """rank -> when its link closed without a goodbye."""
        with self._lock:
            return dict(self.died)

    def forget(self, rank: int) -> None:
        """The node came back as a new process: its old link's death is history."""
        with self._lock:
            self.died.pop(rank, None)
            self.goodbyes.pop(rank, None)

    def close(self, goodbye: str) -> None:
        """Node 0 ends: one byte (its goodbye) on every link, then close them all. Links
        still held for their claim get it too: a node that came back a moment before the
        job ended (its new claim not read yet) would otherwise take the bare close for node
        0's death; the byte tells a stranger nothing it could use."""
        self._halt = True
        self.join(2.0)   # its loop ends within a turn (0.5 s): nothing is admitted after this
        with self._lock:
            conns = [*self._conns.values(), *self._unverified, *self._pending]
            self._conns.clear()
            self._unverified.clear()
            self._pending.clear()
        for conn in conns:
            try:
                conn.send(goodbye.encode()[:1] or b"?")
            except OSError:
                pass
        for conn in conns:
            conn.close()
        self._server.close()
        self._selector.close()


class Link(threading.Thread):
    """Every other node's end: opens the link and waits for node 0's byte or its end."""

    def __init__(self, host: str, port: int, rank: int, *, token: str | bytes = "",
                 on_change: Callable[[], None] = lambda: None) -> None:
        super().__init__(name="meshrun-link", daemon=True)
        self._sock = socket.create_connection((host, port), timeout=_CONNECT_S)
        self._sock.sendall(_HEADER.pack(rank, token_bytes(token)))
        self._sock.settimeout(None)
        self.goodbye: str | None = None   # node 0's goodbye, when it sent one
        self.died_at: float | None = None  # when node 0's end closed without one
        self._closing = False
        self._on_change = on_change

    def run(self) -> None:
        try:
            data = self._sock.recv(64)
        except OSError:
            data = b""
        if self._closing:
            return
        if data:
            self.goodbye = data[:1].decode(errors="replace")
        else:
            self.died_at = time.monotonic()
        self._on_change()

    def close(self, goodbye: str) -> None:
        """This node ends: its goodbye byte, then the link closes."""
        self._closing = True
        try:
            self._sock.sendall(goodbye.encode()[:1] or b"?")
        except OSError:
            pass
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self.join(1.0)


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"
