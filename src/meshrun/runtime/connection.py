"""The watchdog's own client of the job's store: made, kept, dropped and made again.

Every call goes through :class:`~meshrun.runtime.store.BoundedStore` (one call at most
``patience`` seconds), so a dead or frozen store host cannot block the watchdog. The
connection is made on a thread of its own (:class:`~meshrun.runtime.store.StoreConnect`),
after a plain TCP connect that a dead host refuses at once; the agent's thread reads the
current connection too (the job's cause, the end of the workers), hence the lock.

I/O: sockets, the store.
"""

from __future__ import annotations

import socket
import threading

from ..signing import Signing, wrap
from .store import BoundedStore, StoreConnect

FIRST_CONNECT_S = 10.0  # a watchdog's first connection may take this long (a loaded host)


class Connection:
    """The connection to the store at ``host``:``port``, each call bounded by ``patience``
    seconds."""

    def __init__(self, host: str, port: int, patience: float,
                 signing: Signing | None = None) -> None:
        self.host, self.port, self.patience = host, port, patience
        self.signing = signing  # the job token's (meshrun/signing.py): every call signed
        self._lock = threading.Lock()    # guards store: the agent's thread reads it too
        self._store: BoundedStore | None = None
        self._connecting: StoreConnect | None = None  # an attempt still under way
        self._present: set[str] = set()  # key groups known to exist (multi_get is safe)

    @property
    def store(self) -> BoundedStore | None:
        """The connection now (None: none yet, or dropped)."""
        return self._store

    def connect(self, first: bool = False) -> BoundedStore | None:
        """A client of the job's store, every call bounded; None when it cannot be had now.

        The connection is made on a thread of its own, waited for at most one call's bound
        (the first, made right after the join, up to :data:`FIRST_CONNECT_S`: on a host
        running many agents the handshake alone can take seconds). TCPStore's handshake has
        no deadline of its own: against a frozen host, whose kernel still accepts into the
        listen queue, it waits forever; such an attempt is left to itself (one at a time;
        the process exits past it, see ``meshrun.cli``) and the beat goes on as a failed
        one."""
        try:
            # A plain connect first: refused at once when the store's host is gone, where a
            # TCPStore client would retry for its whole timeout and print C++ frames.
            socket.create_connection((self.host, self.port),
                                     timeout=min(1.0, self.patience)).close()
        except OSError:
            return None
        wait = max(self.patience, FIRST_CONNECT_S) if first else self.patience
        attempt = self._connecting
        if attempt is None:
            attempt = self._connecting = StoreConnect(self.host, self.port, wait)
        attempt.join(wait)
        if attempt.is_alive():
            return None  # still in the handshake: a failed beat; looked at again next time
        self._connecting = None
        if attempt.store is None:
            return None
        return wrap(BoundedStore(attempt.store, self.patience), self.signing)

    def use(self, store: BoundedStore | None) -> BoundedStore | None:
        """Make ``store`` the connection (None: none); returns it."""
        with self._lock:
            self._store = store
        return store

    def usable(self) -> BoundedStore | None:
        """The connection, or a fresh one when it is gone or stuck in a call."""
        with self._lock:
            store = self._store
        if store is not None and not store.stuck:
            return store
        self.drop()
        return self.use(self.connect())

    def drop(self) -> None:
        """Close the connection (a broken one: a fresh one is made on the next beat)."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            try:
                store.close(0.5)
            except Exception:  # noqa: BLE001, S110
                pass

    def read_all(self, store: BoundedStore, keys: list[str]) -> list[bytes]:
        """The values of ``keys`` in one call once all exist (every heartbeat does from the
        join on), else one check and a get per key that exists (b"" for the others)."""
        group = keys[0] if keys else ""
        if not keys:
            return []
        if group in self._present or store.check(keys):
            self._present.add(group)
            return store.multi_get(keys)
        return [store.get(k) if store.check([k]) else b"" for k in keys]
