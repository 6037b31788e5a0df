"""The job token: every value meshrun writes to the job's store carries an HMAC.

With ``MESHRUN_JOB_TOKEN`` (or ``--token-file``), the same secret on every node, each value
under ``meshrun/`` (:data:`meshrun.protocol.PREFIX`) is stored as::

    ms1:<seq>:<mac>:<payload>

``seq`` is a decimal number that grows with every value a process signs (it starts from
the clock in nanoseconds and never goes back, even when the clock does); ``mac`` is the hex
of the first 16 bytes of HMAC-SHA256 over ``key + "\\n" + seq + "\\n" + payload`` with a key
derived from the token, the run id and a nonce of this launch (HMAC-SHA256(token, ``"meshrun
job v1\\0" + run_id + "\\0" + nonce``)): a value cannot be moved to another key, another run
or another job, nor, once the nonce is node 0's per-launch one (the wiring must pass it: a
requeued job keeps its run id), to a later launch of the same run id. The payload is the
text :mod:`meshrun.protocol` encodes, unchanged (it may hold ``:`` and newlines).

A reader (:class:`Verifier`) ignores a value that is *unsigned* (no ``ms1:`` header, or not
text), *mis-signed* (another token, another run or key, or changed on the way) or
*replayed*: it remembers the highest seq it accepted for each key, and a value with a lower
one is an earlier value written again. The same value read again (readers poll) is
accepted. Ignored values are counted per key and reason and said once, then again each time
the count grows tenfold (:meth:`Verifier.news`). A process that accepts a value signs its
own later values above its seq, so a node that comes back as a new process (on a host
whose clock is a little behind) still writes over its old values.

What it does not protect: torch's own keys in the same store (its rendezvous, and its
keys under ``meshrun/round/<r>/``) and the workers' process-group store, which are never
signed; reading: the store is not encrypted, anyone who reaches it reads every value; and
deleting or overwriting: a stranger can still replace a key's value, and the reader then
sees "ignored" (a node that falls silent), never a forged verdict. Replays are caught per
reading process from when it starts: a fresh reader takes the first value it sees of this
run. Counters cannot be signed (``add``): keys a node must count are per-node signed keys.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from typing import Any

from . import protocol
from .errors import UsageError, one_line

VARIABLE, FLAG, MIN_LENGTH = "MESHRUN_JOB_TOKEN", "--token-file", 16
JOB_KEY = "MESHRUN_JOB_KEY"  # the workers get the key derived for this launch, not the token
REMEMBER = 1000  # keys whose ignored values a Verifier counts, the oldest forgotten first
# keys whose highest accepted seq it keeps: only validly signed values add one (a stranger
# cannot grow it), and forgetting a key that is polled in turn would switch its replay check
# off (a job of 1,024 ranks has 1,024 progress keys)
REMEMBER_SEQS = 1_000_000
_HEADER = "ms1:"
_WHY = {
    "unsigned": "the job token is set; something without it writes to this job's store",
    "mis-signed": "signed with another token, or changed",
    "replayed": "an earlier value written again",
}


class Ignored(ValueError):
    """A value a reader does not take: ``reason`` is "unsigned", "mis-signed" or "replayed"."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{reason} value in {key}")
        self.key, self.reason = key, reason


def _check_key(key: str) -> None:
    if "\n" in key:  # the MAC's fields are newline-separated: such a key could pose as another
        raise ValueError(f"a key with a newline cannot be signed: {key!r}")


def _ours(key: str) -> bool:
    """meshrun's own keys are signed; torch's agent keeps its keys under a round's prefix
    (``meshrun/round/<r>/...``, :func:`meshrun.protocol.round_prefix`) and never signs."""
    if not key.startswith(protocol.PREFIX):
        return False
    if key.startswith(protocol.ROUNDS):
        return key[len(protocol.ROUNDS):].partition("/")[2].split("/", 1)[0] in protocol.ROUND_OWN
    return True


#: what a signed store's reader gets in place of a value it does not take: no decoder of
#: :mod:`meshrun.protocol` accepts it, so every reader treats it as it treats a value that
#: is no meshrun value (no sign of life; named when it matters)
IGNORED = b"<ignored "


def ignored(raw: Any) -> bool:
    """``raw`` (as a signed store gave it) stands for a value the reader did not take."""
    return isinstance(raw, (bytes, bytearray)) and bytes(raw).startswith(IGNORED)


def _mark(exc: Ignored, raw: Any) -> bytes:
    shown = bytes(raw)[:60].decode(errors="replace") if isinstance(raw, (bytes, bytearray)) \
        else str(raw)[:60]
    return IGNORED + f"{exc.reason} value: {shown!r}>".encode()


class Signer:
    """Signs values for one run with one job token (which it does not keep)."""

    __slots__ = ("run_id", "_key", "_last", "_lock")

    def __init__(self, token: str, run_id: str, nonce: str = "", *,
                 key: bytes | None = None) -> None:
        self.run_id = run_id
        if key is None:
            context = b"meshrun job v1\0" + run_id.encode() + b"\0" + nonce.encode()
            key = hmac.new(token.encode(), context, hashlib.sha256).digest()
        self._key = key
        self._last = 0
        self._lock = threading.Lock()

    @classmethod
    def from_key(cls, key_hex: str, run_id: str) -> Signer:
        """A signer with the key another one derived (:attr:`key_hex`): what the workers get
        (``MESHRUN_JOB_KEY``), never the token itself."""
        return cls("", run_id, key=bytes.fromhex(key_hex))

    @property
    def key_hex(self) -> str:
        """The derived key (this run and launch only), for this node's workers."""
        return self._key.hex()

    def __repr__(self) -> str:
        return f"Signer(run_id={self.run_id!r})"

    def mac(self, key: str, seq: int, payload: str) -> str:
        message = f"{key}\n{seq}\n{payload}".encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()[:16].hex()

    def above(self, seq: int) -> None:
        """Sign later values above ``seq`` (a value this process accepted)."""
        with self._lock:
            self._last = max(self._last, seq)

    def sign(self, key: str, payload: str) -> str:
        """The value to store for ``payload`` under ``key``: ``ms1:<seq>:<mac>:<payload>``;
        seq is the clock in nanoseconds, or one more than the last when that is not more."""
        _check_key(key)
        with self._lock:
            seq = self._last = max(time.time_ns(), self._last + 1)
        return f"{_HEADER}{seq}:{self.mac(key, seq, payload)}:{payload}"


class Verifier:
    """Opens signed values for one reading process: checks the MAC and the replay rule,
    counts what it ignores (memory bounded: ``remember`` keys, the oldest forgotten)."""

    def __init__(self, signer: Signer, remember: int = REMEMBER,
                 remember_seqs: int = REMEMBER_SEQS) -> None:
        self._signer, self.remember, self.remember_seqs = signer, remember, remember_seqs
        self._seqs: OrderedDict[str, int] = OrderedDict()
        # key -> reason -> [count, count when last said, the last ignored value]
        self._counts: OrderedDict[str, dict[str, list[Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Verifier(run_id={self._signer.run_id!r}, keys={len(self._seqs)})"

    def open(self, key: str, raw: bytes | str) -> str:
        """The payload of ``raw`` read from ``key``; raises :class:`Ignored` otherwise."""
        _check_key(key)
        data = raw.encode(errors="surrogatepass") if isinstance(raw, str) else bytes(raw)
        try:
            value = data.decode()
        except UnicodeDecodeError:
            raise self.count_ignored(key, "unsigned", data) from None
        if not value.startswith(_HEADER):
            raise self.count_ignored(key, "unsigned", data)
        seq_text, _, rest = value[len(_HEADER):].partition(":")
        mac, _, payload = rest.partition(":")
        if not (seq_text.isascii() and seq_text.isdigit() and len(seq_text) <= 30
                and str(int(seq_text)) == seq_text and mac.isascii() and len(mac) == 32
                and rest[32:33] == ":"):
            raise self.count_ignored(key, "mis-signed", data)
        seq = int(seq_text)
        if not hmac.compare_digest(mac, self._signer.mac(key, seq, payload)):
            raise self.count_ignored(key, "mis-signed", data)
        with self._lock:
            older = seq < self._seqs.get(key, 0)
            if not older:
                self._keep(self._seqs, key, seq, self.remember_seqs)
        if older:
            raise self.count_ignored(key, "replayed", data)
        self._signer.above(seq)
        return payload

    def count_ignored(self, key: str, reason: str, data: bytes) -> Ignored:
        """Count an ignored value (the same value read again counts once)."""
        digest = hashlib.sha256(data).digest()[:8]
        with self._lock:
            entry = self._keep(self._counts, key, self._counts.get(key, {}))
            entry = entry.setdefault(reason, [0, 0, b""])
            if entry[2] != digest:
                entry[0], entry[2] = entry[0] + 1, digest
        return Ignored(key, reason)

    def _keep(self, table: OrderedDict[str, Any], key: str, value: Any,
              limit: int | None = None) -> Any:
        """``table[key] = value``, the newest; the oldest keys past ``limit`` (``remember``)
        forgotten."""
        table[key] = value
        table.move_to_end(key)
        while len(table) > (self.remember if limit is None else limit):
            table.popitem(last=False)
        return value

    def counts(self) -> dict[tuple[str, str], int]:
        """How many values were ignored, by (key, reason), for the keys remembered."""
        with self._lock:
            return {(k, why): e[0] for k, whys in self._counts.items() for why, e in whys.items()}

    def news(self) -> list[str]:
        """Lines to print: each (key, reason) the first time, then when its count reached
        the next power of ten above the count last said (1, 10, 100 ...)."""
        lines = []
        with self._lock:
            for key, reasons in self._counts.items():
                for reason, entry in reasons.items():
                    count, said = entry[0], entry[1]
                    if count >= (10 ** len(str(said)) if said else 1):
                        entry[1] = count
                        writes = "write" if count == 1 else "writes"
                        lines.append(f"meshrun: ignored {count} {reason} {writes} to {key} "
                                     f"({_WHY[reason]})")
        return lines


class SignedStore:
    """A store client (:class:`meshrun.runtime.store.BoundedStore` or torch's TCPStore) whose
    values under ``meshrun/`` are signed when written and opened when read; other keys (torch's
    own) pass through as they are. Reads give the payload as bytes, like the store does.

    ``get`` raises :class:`Ignored` for a value it does not take; ``multi_get`` gives None in
    its place. ``add`` refuses meshrun's keys: a counter cannot be signed.
    """

    def __init__(self, store: Any, signer: Signer, verifier: Verifier | None = None) -> None:
        self.raw, self.signer = store, signer
        self.verifier = verifier or Verifier(signer)

    def __repr__(self) -> str:
        return f"SignedStore({self.raw!r}, {self.signer!r})"

    def __getattr__(self, name: str) -> Any:  # the client's own (a BoundedStore's stuck, close)
        if name == "raw":
            raise AttributeError(name)
        return getattr(self.raw, name)

    def _seal(self, key: str, value: str | bytes) -> str | bytes:
        return self.signer.sign(key, protocol.text(value)) if _ours(key) else value

    def _open(self, key: str, raw: bytes) -> bytes:
        return self.verifier.open(key, raw).encode() if _ours(key) else raw

    def set(self, key: str, value: str | bytes) -> None:
        self.raw.set(key, self._seal(key, value))

    def multi_set(self, keys: list[str], values: list[str]) -> None:
        self.raw.multi_set(keys, [self._seal(k, v) for k, v in zip(keys, values, strict=True)])

    def get(self, key: str) -> bytes:
        """The payload; for a value that is ignored (it is counted), an :data:`IGNORED`
        text that names it, which no reader decodes."""
        return self._open_or_mark(key, self.raw.get(key))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        """The payloads (:meth:`get`'s rule for each)."""
        return [self._open_or_mark(k, raw)
                for k, raw in zip(keys, self.raw.multi_get(keys), strict=True)]

    def _open_or_mark(self, key: str, raw: bytes) -> bytes:
        try:
            return self._open(key, raw)
        except Ignored as exc:
            return _mark(exc, raw)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        """Store ``desired`` (signed) if the key holds ``expected``: "" for an absent key,
        else the raw stored value (as ``raw.get`` gives it). Returns the payload the key
        holds now: ``desired`` when this call set it.

        First writer wins among signed writers only: with ``expected`` "", a value there
        that is ignored (a stranger's write before ours) holds nothing, and is replaced by
        comparing against it (a few tries; then :class:`Ignored`). Two nodes replacing one
        such value still race through the store's compare: one wins, the other reads it."""
        if not _ours(key):
            return self.raw.compare_set(key, expected, desired)
        sealed = self.signer.sign(key, desired)
        compare: str | bytes = expected
        for _ in range(3):
            now = self.raw.compare_set(key, compare, sealed)
            try:
                return self._open(key, now)
            except Ignored as exc:
                if expected != "":
                    raise
                compare, last = bytes(now), exc   # the stored bytes as they are, not decoded
        raise last

    def add(self, key: str, amount: int) -> int:
        if _ours(key):
            raise TypeError("a counter cannot be signed: use tally() and tallied()")
        return self.raw.add(key, amount)

    def tally(self, key: str, node: int) -> int:
        """Count ``node`` in the counter ``key``: its signed mark (``key/by/<node>``) first,
        then the counter (a hint anyone can add to); the counter's new value."""
        self.set(protocol.mark_key(key, node), "1")
        return int(self.raw.add(key, 1))

    def tallied(self, key: str, nodes: Collection[int], need: int) -> int:
        """How many of ``nodes`` are counted in ``key``: the counter while it is below
        ``need`` (one call); from there, the nodes whose signed mark is there. A node sets
        its mark before it adds to the counter, so a counter at ``need`` whose marks are
        missing was added to by something else: counted as ignored, said once."""
        hint = int(self.raw.add(key, 0))
        if hint < need:
            return hint
        marks = [protocol.mark_key(key, n) for n in nodes]
        values = self.multi_get(marks) if self.raw.check(marks) else \
            [self.get(k) if self.raw.check([k]) else b"" for k in marks]
        good = sum(1 for v in values if v == b"1")
        if hint > good:
            self.verifier.count_ignored(key, "unsigned", f"add {hint}".encode())
        return good

    def catch_up(self, keys: list[str]) -> None:
        """Read the values there are of ``keys`` (this process's, or another's it takes
        over): this process then signs above them, even where its clock is behind the clock
        that wrote them (a node that came back on another host, a worker's progress after
        node 0's empty value); otherwise its values would read as replays."""
        for key in keys:
            if self.raw.check([key]):
                self.get(key)

    def check(self, keys: list[str]) -> bool:
        return self.raw.check(keys)

    def wait(self, keys: list[str], timeout: Any = None) -> None:
        if timeout is None:
            self.raw.wait(keys)
        else:
            self.raw.wait(keys, timeout)


def tally(store: Any, key: str, node: int) -> int:
    """Count ``node`` in the counter ``key`` (:meth:`SignedStore.tally`; a plain store's
    ``add``); the counter's new value."""
    if isinstance(store, SignedStore):
        return store.tally(key, node)
    return int(store.add(key, 1))


def catch_up(store: Any, keys: list[str]) -> None:
    """:meth:`SignedStore.catch_up` (nothing for a plain store)."""
    if isinstance(store, SignedStore):
        store.catch_up(keys)


def tallied(store: Any, key: str, nodes: Collection[int], need: int) -> int:
    """How many of ``nodes`` are counted in ``key`` (:meth:`SignedStore.tallied`; a plain
    store's counter)."""
    if isinstance(store, SignedStore):
        return store.tallied(key, nodes, need)
    return int(store.add(key, 0))


class Signing:
    """One process's signing for one launch of a run: its signer and its verifier (shared
    by every store client of the process, so each ignored value is said once)."""

    def __init__(self, signer: Signer) -> None:
        self.signer, self.verifier = signer, Verifier(signer)

    def __repr__(self) -> str:
        return f"Signing({self.signer!r})"

    def wrap(self, store: Any) -> SignedStore:
        return SignedStore(store, self.signer, self.verifier)

    def link_token(self, rank: int, claim_token: str) -> bytes:
        """What node ``rank``'s liveness link carries (:mod:`meshrun.runtime.links`) in
        place of its claim's token, which anyone who reads the store can read: 8 bytes of
        an HMAC over the claim's token, which only a holder of the job token can make."""
        return bytes.fromhex(self.signer.mac(protocol.node_key(rank), 0, f"link {claim_token}"))[:8]


def wrap(store: Any, signing: Signing | None) -> Any:
    """``store``, signed when the job has a token (``signing``)."""
    return store if signing is None or store is None else signing.wrap(store)


def _refuse(message: str, fix: str) -> UsageError:
    return UsageError(one_line(message), hint=one_line(fix), code="job-token-invalid",
                      subject=FLAG if message.startswith(FLAG) else VARIABLE)


def token_from(env: Mapping[str, str], token_file: str | None) -> str | None:
    """The job token: from ``token_file`` (``--token-file``, first) or ``MESHRUN_JOB_TOKEN``;
    None when neither is given. Raises UsageError (one line: what, which, the fix; exit 2,
    ``job-token-invalid``) for an empty or short token, a file that cannot be read or that
    others may read."""
    fix = (f"give every node the same secret of at least {MIN_LENGTH} characters "
           "(python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if token_file is not None:
        where = f"{FLAG} {token_file}"
        try:  # opened first, then looked at: what is checked is what is read (never a FIFO's wait)
            fd = os.open(token_file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    raise _refuse(f"{where} is not a regular file", f"name a file; {fix}")
                if mode & 0o077:
                    raise _refuse(f"{where} may be read by others (mode {mode & 0o777:04o})",
                                  f"chmod 600 {token_file}")
                data = os.read(fd, 4097)
            finally:
                os.close(fd)
            if len(data) > 4096:
                raise _refuse(f"{where} is longer than 4096 bytes", fix)
            token = data.decode()
        except OSError as exc:
            raise _refuse(f"{where} cannot be read ({exc.strerror or exc})", fix) from None
        except UnicodeDecodeError:
            raise _refuse(f"{where} is not text", fix) from None
        token = token[:-2] if token.endswith("\r\n") else token.removesuffix("\n")
    elif VARIABLE in env:
        where, token = VARIABLE, env[VARIABLE]
    else:
        return None
    if not token:
        raise _refuse(f"{where} is empty", fix)
    if len(token) < MIN_LENGTH:
        raise _refuse(f"{where} holds {len(token)} characters, fewer than {MIN_LENGTH}", fix)
    return token


def new_token() -> str:
    """A fresh job token (43 characters, URL-safe)."""
    return secrets.token_urlsafe(32)
