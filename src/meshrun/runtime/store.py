"""The job's store: node 0 hosts one TCPStore at the master address:port; every node joins it.

The same store serves, in order:

1. meshrun's join step: each node claims its node rank and waits, printing
   ``waiting for nodes: 1/2 joined``, until every node is there (or stops
   with a message naming the master address and port it waited on);
2. the c10d rendezvous of PyTorch's elastic agent (``C10dRendezvousBackend``
   over this very store);
3. the workers' own ``env://`` process-group store (torchrun's shared-store
   mode, ``TORCHELASTIC_USE_AGENT_STORE``).

The keys meshrun writes and their payloads are :mod:`meshrun.protocol`; the rendezvous and
the workers use their own prefixes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from .. import protocol
from ..errors import StartupError
from ..plan import LaunchPlan
from ..signing import Ignored, Signer, Signing, Verifier, catch_up, tallied, tally, wrap
from ..topology.address import is_loopback, join_host_port
from .membership import Membership

_ATTEMPT_S = 5.0
CALL_S = 15.0  # the longest one of meshrun's own calls may take (join, preflight, hosts)


@dataclass
class JobStore:
    """The job's store: torch's client (``store``, for its rendezvous), and ``calls``, the
    same connection with every call of meshrun's own bounded (:class:`BoundedStore`): a cut
    link or a frozen store host never holds the join, the preflight exchange or the host
    lookup past :data:`CALL_S` (or a ``wait``'s own timeout). :meth:`close_calls` when done."""

    store: Any  # torch.distributed.TCPStore
    port: int   # the real port (a free one when the plan said 0)
    hosting: bool
    calls: Any = None
    signing: Signing | None = None  # the job token's signing (None: no token)

    def __post_init__(self) -> None:
        if self.calls is None:
            self.calls = wrap(BoundedStore(self.store, CALL_S), self.signing)

    def close_calls(self) -> bool:
        """End the calls' thread (False: a call is still stuck; the process must not wait
        for it at exit: see meshrun.cli)."""
        return self.calls.close(1.0)


def say(message: str) -> None:
    print(f"meshrun: {message}", flush=True)


def control_plane_line(plan: LaunchPlan, token: str | None) -> str:
    """How the job's control plane is protected (docs/security.md): "" when there is nothing
    to say (one node, or every node on this host's loopback without a token)."""
    if plan.nnodes <= 1:
        return ""
    if token is not None:
        return ("control plane signed with the job token: values in the job's store that "
                "do not carry it are ignored")
    if is_loopback(plan.master_addr):
        return ""
    where = join_host_port(plan.master_addr, plan.master_port or "auto")
    return (f"warning: the control plane is unauthenticated: anyone who can reach {where} "
            "(the job's store) can stop this job or make it blame a healthy node; set "
            "MESHRUN_JOB_TOKEN (or --token-file) to the same secret on every node "
            "(docs/security.md)")


def say_control_plane(plan: LaunchPlan, token: str | None) -> None:
    line = control_plane_line(plan, token)
    if line:
        say(line)


def open_store(plan: LaunchPlan, *, token: str | None = None,
               clock: Callable[[], float] = time.monotonic) -> JobStore:
    """Node 0 hosts the store; the others connect to it, retrying until the join timeout.
    With a job ``token``, every value of meshrun's own is signed (meshrun/signing.py)."""
    from torch.distributed import TCPStore

    where = join_host_port(plan.master_addr, plan.master_port or "auto")
    if plan.is_master:
        try:
            store = TCPStore(plan.master_addr, plan.master_port, is_master=True,
                             timeout=timedelta(seconds=60), wait_for_workers=False)
        except (RuntimeError, ValueError, OSError) as exc:
            text = str(exc).lower()
            if "address already in use" in text or "errno 98" in text or "eaddrinuse" in text:
                raise StartupError(
                    f"port {plan.master_port} on this host (node 0) is already in use, so the "
                    "job's store cannot start there", code="port-in-use",
                    subject="--master-port",
                    hint=f"choose another --master-port, or find the process holding it with "
                         f"'ss -ltnp sport = :{plan.master_port}'") from None
            raise StartupError(f"cannot host the job's store at {where}: {_first_line(exc)}",
                               code="store-failed", subject="--master-addr",
                               hint="check that --master-addr is an address of this host") from None
        signing = _claim_run(store, plan, token)
        return JobStore(store, store.port, True, signing=signing)

    deadline = clock() + plan.join_timeout
    _resolve(plan, deadline, clock)
    started = clock()
    last_note = started
    attempt: StoreConnect | None = None
    while True:
        try:
            # A plain TCP connect first: refused at once while node 0 is not up yet, where
            # a TCPStore client would wait out its timeout and print C++ stack traces.
            left = max(0.1, deadline - clock())
            socket.create_connection((plan.master_addr, plan.master_port),
                                     timeout=min(_ATTEMPT_S, left)).close()
            # The handshake on a thread: against a frozen node 0 (its kernel still accepts)
            # it would wait forever; one attempt at a time, waited for at most this slice.
            if attempt is None:
                attempt = StoreConnect(plan.master_addr, plan.master_port, min(_ATTEMPT_S, left))
            attempt.join(min(_ATTEMPT_S, left))
            if attempt.is_alive():
                raise TimeoutError("node 0's store accepted the connection but did not answer")
            store, error, attempt = attempt.store, attempt.error, None
            if store is None:
                raise error or TimeoutError("no connection")
            break
        except (RuntimeError, ValueError, OSError, TimeoutError) as exc:
            now = clock()
            if now >= deadline:
                raise StartupError(
                    f"node 0's store at {where} did not answer within {plan.join_timeout} s "
                    f"({_first_line(exc)})", code="master-unreachable", subject="--master-addr",
                    hint="check that node 0 is running meshrun with the same --master-addr/"
                         f"--master-port, and that port {plan.master_port} is open between the "
                         "nodes (nc -zv ADDR PORT)") from None
            if now - last_note >= 10:
                say(f"waiting for node 0's store at {where} ... {int(now - started)} s")
                last_note = now
            time.sleep(0.5)
    store.set_timeout(timedelta(seconds=60))
    signing = _check_run(store, plan, where, token)
    return JobStore(store, plan.master_port, False, signing=signing)


def _resolve(plan: LaunchPlan, deadline: float, clock: Callable[[], float]) -> None:
    """Wait for the master's name to resolve (Kubernetes creates DNS records late)."""
    noted = False
    while True:
        try:
            socket.getaddrinfo(plan.master_addr, plan.master_port)
            return
        except socket.gaierror as exc:
            if clock() >= deadline:
                raise StartupError(
                    f"the master address {plan.master_addr} does not resolve ({exc.strerror})",
                    code="master-dns-failure", subject="--master-addr",
                    hint="check the name (on Kubernetes: the headless Service and the pod's "
                         "subdomain), or pass node 0's IP address") from None
            if not noted:
                say(f"waiting for {plan.master_addr} to resolve ({exc.strerror}) ...")
                noted = True
            time.sleep(1.0)


def _claim_run(store: Any, plan: LaunchPlan, token: str | None) -> Signing | None:
    signing = None
    if token is not None:  # this launch's nonce first: a node reads it once run_id is there
        nonce = secrets.token_hex(8)
        store.set(protocol.NONCE, Signer(token, plan.run_id).sign(protocol.NONCE, nonce))
        signing = Signing(Signer(token, plan.run_id, nonce))
    store.set(protocol.NNODES, str(plan.nnodes))
    store.set(protocol.RUN_ID, plan.run_id)
    # Every key the watchdogs read in one call exists from the start: node 0's watch, and
    # every rank's progress (empty until the rank reports).
    signed = wrap(store, signing)
    signed.set(protocol.WATCH, protocol.Watch(0).encode())
    ranks = range(plan.world_size)
    signed.multi_set([protocol.progress_key(r) for r in ranks], [""] * len(ranks))
    return signing


def _check_run(store: Any, plan: LaunchPlan, where: str, token: str | None) -> Signing | None:
    try:
        store.wait([protocol.RUN_ID], timedelta(seconds=_ATTEMPT_S * 2))
        theirs = protocol.text(store.get(protocol.RUN_ID))
    except Exception:  # noqa: BLE001 - anything but a meshrun store
        raise StartupError(f"the process listening at {where} is not a meshrun job's store",
                           code="store-foreign", subject="--master-port",
                           hint="another program uses this port: choose another --master-port"
                           ) from None
    if theirs != plan.run_id:
        raise StartupError(
            f"the store at {where} belongs to run {theirs!r}, not to this run {plan.run_id!r}: "
            "another job uses this master address and port", code="store-other-job",
            subject="--run-id", hint="give each job its own --master-port, and the same "
                                     "--run-id on all nodes of one job")
    nnodes = protocol.text(store.get(protocol.NNODES)) if store.check([protocol.NNODES]) else ""
    if nnodes.isdigit() and int(nnodes) != plan.nnodes:
        raise StartupError(
            f"node 0's job has {nnodes} nodes, this node was told {plan.nnodes}",
            code="nnodes-differs", subject="--nnodes",
            hint="give every node the same node count (--nnodes, WORLD_SIZE, PET_NNODES, ...)")
    return _signing_of(store, plan, token)


def _signing_of(store: Any, plan: LaunchPlan, token: str | None) -> Signing | None:
    """This node's signing for node 0's launch: its nonce, opened with this node's token;
    a node whose token differs from node 0's (or has none where node 0 has one, or the
    reverse) stops here, before it claims anything."""
    signed = store.check([protocol.NONCE])
    fix = ("give every node the same MESHRUN_JOB_TOKEN (or --token-file), or none to any")
    if token is None:
        if signed:
            raise StartupError("node 0's job is signed with a job token and this node has none",
                               code="job-token-differs", subject="MESHRUN_JOB_TOKEN", hint=fix)
        return None
    if not signed:
        raise StartupError("this node has a job token and node 0's job runs without one",
                           code="job-token-differs", subject="MESHRUN_JOB_TOKEN", hint=fix)
    try:
        nonce = Verifier(Signer(token, plan.run_id)).open(protocol.NONCE,
                                                          store.get(protocol.NONCE))
    except Ignored:
        raise StartupError(
            f"this node's job token is not node 0's ({protocol.NONCE} does not open with it, "
            "or something else wrote it)", code="job-token-differs", subject="MESHRUN_JOB_TOKEN",
            hint=fix) from None
    return Signing(Signer(token, plan.run_id, nonce))


def join(job: JobStore, plan: LaunchPlan, *, wait_lost: float = 0.0,
         clock: Callable[[], float] = time.monotonic) -> Membership | None:
    """Claim this node's rank and wait until every node has joined (every call bounded).

    A node the running job has found lost (its platform started it again with the same
    rank) takes its claim back and returns the job's membership (it will wait as a spare:
    :mod:`meshrun.runtime.membership`); a normal join returns None. A platform may start a
    node again faster than the job notices its loss (the node timeout): with ``wait_lost``
    > 0 (a job with spares), a rank held in a job that already formed is waited for that
    long to be found lost before it counts as taken by another node."""
    store = job.calls
    me = protocol.NodeClaim(plan.hostname, os.getpid(), uuid.uuid4().hex[:8]).encode()
    key = protocol.node_key(plan.node_rank)
    holder = protocol.text(store.compare_set(key, "", me))
    if holder != me:
        members = _lost_here(store, plan.node_rank)
        if members is None and wait_lost > 0 and \
                tallied(store, protocol.JOINED, range(plan.nnodes), plan.nnodes) >= plan.nnodes:
            members = _await_lost(store, plan.node_rank, holder, wait_lost, clock)
        if members is not None:
            store.set(key, me)
            catch_up(store, [protocol.heartbeat_key(plan.node_rank)])  # its old process's
            store.set(protocol.heartbeat_key(plan.node_rank), protocol.Heartbeat(0).encode())
            say(f"node {plan.node_rank} was lost earlier in this job and comes back: it "
                f"waits as a spare (membership epoch {members.epoch})")
            return members
        raise StartupError(
            f"node rank {plan.node_rank} is already taken by "
            f"{protocol.NodeClaim.decode(holder).who()}: two nodes "
            "were given the same rank", code="duplicate-node-rank", subject="--node-rank",
            hint="give every node its own rank 0..N-1 (check NODE_RANK/RANK on each node)")
    store.set(protocol.heartbeat_key(plan.node_rank), protocol.Heartbeat(0).encode())
    joined = tally(store, protocol.JOINED, plan.node_rank)
    where = join_host_port(plan.master_addr, job.port)
    if plan.nnodes == 1:
        return None
    deadline = clock() + plan.join_timeout
    shown, last_note = -1, clock()
    while True:
        joined = tallied(store, protocol.JOINED, range(plan.nnodes), plan.nnodes)
        if joined >= plan.nnodes:
            if joined > plan.nnodes:
                raise StartupError(
                    f"{joined} nodes joined the store at {where} but the job has {plan.nnodes}",
                    code="too-many-nodes", subject="--nnodes",
                    hint="two jobs share this master address and port, or the node count is "
                         "wrong on some node")
            say(f"all {plan.nnodes} nodes joined")
            return None
        now = clock()
        if joined != shown or now - last_note >= 10:
            say(f"waiting for nodes: {joined}/{plan.nnodes} joined (store {where})")
            shown, last_note = joined, now
        if now >= deadline:
            missing = [r for r in range(plan.nnodes)
                       if not store.check([protocol.node_key(r)])]
            raise StartupError(
                f"only {joined} of {plan.nnodes} nodes joined the store at {where} within "
                f"{plan.join_timeout} s; missing node ranks: {', '.join(map(str, missing))}",
                code="join-timeout", subject="--join-timeout",
                hint=f"start meshrun on the missing nodes with --master-addr {plan.master_addr} "
                     f"--master-port {job.port}, and check they can reach it")
        time.sleep(0.2)


def _await_lost(store: Any, node: int, holder: str, seconds: float,
                clock: Callable[[], float]) -> Membership | None:
    """Wait up to ``seconds`` for the running job to list ``node`` as lost (its membership),
    or for its claim to be given up; the membership (None: still held by a live node)."""
    say(f"node rank {node} is still held in the running job by "
        f"{protocol.NodeClaim.decode(holder).who()}: waiting up to {seconds:.0f} s for the "
        "job to find that node lost (its platform started it again before the node timeout)")
    deadline = clock() + seconds
    while clock() < deadline:
        members = _lost_here(store, node)
        if members is not None:
            return members
        time.sleep(0.5)
    return _lost_here(store, node)


def _lost_here(store: Any, node: int) -> Membership | None:
    """The job's membership, if it lists ``node`` as lost (None otherwise)."""
    if not store.check([protocol.MEMBERS]):
        return None
    try:
        members = Membership.decode(store.get(protocol.MEMBERS))
    except (ValueError, TypeError, KeyError):
        return None
    return members if node in members.lost else None


@contextlib.contextmanager
def store_errors(plan: LaunchPlan, port: int | None, step: str) -> Iterator[None]:
    """Turn a failed store call during ``step`` into one line (exit 3), not a traceback.

    torch raises DistNetworkError when node 0, which hosts the store, went away (it
    stopped: its own output says why) and DistStoreError when a wait timed out."""
    try:
        yield
    except (RuntimeError, OSError, TimeoutError) as exc:
        where = join_host_port(plan.master_addr, port or plan.master_port or "auto")
        if plan.is_master:
            raise StartupError(f"the job's store failed while {step}: {_first_line(exc)}",
                               code="store-failed", subject="--master-port",
                               hint="see the other nodes' output; rerun the job") from None
        timed_out = "timeout" in str(exc).lower() or isinstance(exc, TimeoutError)
        raise StartupError(
            f"node 0's store at {where} " + ("did not answer in time" if timed_out else
                                             "went away") + f" while {step} "
            f"({_first_line(exc)})", code="master-lost", subject="--master-addr",
            hint="node 0 stopped or cannot be reached: its own output says why (a join "
                 "timeout, a preflight mismatch, a crash); start it again, then this node"
        ) from None
    except ValueError as exc:   # a value the protocol's decoders refused: someone else's
        raise StartupError(
            f"the job's store held a value that is no meshrun value while {step} "
            f"({_first_line(exc)}): something else writes to this job's store",
            code="store-foreign-value", subject="--master-port",
            hint="keep node 0's ports on a trusted network (docs/security.md), give the job a "
                 "--master-port no other job uses, and rerun") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# --- a client whose calls are bounded, and connections cut on purpose ---------------------

class CallTimeout(TimeoutError):
    """A :class:`BoundedStore` call gave up (or an earlier one is still stuck): the store
    is slow, frozen or cut off. Not torch's own timeout of a ``wait``."""


class BoundedStore:
    """A TCPStore client whose calls give up after ``timeout`` seconds.

    TCPStore's client waits in ``recv()`` without a deadline for ``check``, ``set``,
    ``add`` and ``compare_set``: when the store's host vanishes without closing the
    connection (a cut link, a frozen host) such a call would block for TCP's
    retransmission timeout (~15 min). Calls here run one at a time on a daemon thread;
    the caller waits at most ``timeout``. After a call timed out the store counts as
    broken: later calls fail at once (:class:`CallTimeout`) until the stuck call returns.
    """

    def __init__(self, store: Any, timeout: float) -> None:
        import queue

        self._store, self.timeout = store, timeout
        self._requests: Any = queue.SimpleQueue()
        self._stuck = threading.Event()
        self._flag = threading.Lock()  # the stuck flag and a call's end, together
        self._thread = threading.Thread(target=self._serve, name="meshrun-store-calls",
                                        daemon=True)
        self._thread.start()

    def close(self, timeout: float) -> bool:
        """Let the calling thread end once the calls before have returned, and drop the
        connection; True when it ended within ``timeout`` (False: a call is still stuck)."""
        self._requests.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        self._store = None  # the client's destructor closes the connection, here
        return True

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            call, box, done = request
            if done.is_set():  # the caller gave up already
                continue
            try:
                box["value"] = call()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box["error"] = exc
            with self._flag:  # with the caller's give-up: never "stuck" after it returned
                box["finished"] = True
                self._stuck.clear()
                done.set()

    @property
    def stuck(self) -> bool:
        """A call timed out and has not returned yet: every call fails at once until it does."""
        return self._stuck.is_set()

    def _call(self, name: str, *args: Any, timeout: float | None = None) -> Any:
        if self._stuck.is_set():
            raise CallTimeout(f"an earlier store call has not returned; {name} not sent")
        box: dict[str, Any] = {}
        done = threading.Event()
        limit = self.timeout if timeout is None else timeout
        self._requests.put((lambda: getattr(self._store, name)(*args), box, done))
        if not done.wait(limit):
            with self._flag:
                if "finished" not in box:  # else it returned just now: take its answer
                    self._stuck.set()
                    done.set()  # withdraws this request if it has not started
                    raise CallTimeout(f"store {name} did not return within {limit:.0f} s")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def set(self, key: str, value: str) -> None:
        self._call("set", key, value)

    def get(self, key: str) -> bytes:
        return self._call("get", key)

    def check(self, keys: list[str]) -> bool:
        return self._call("check", keys)

    def add(self, key: str, amount: int) -> int:
        return self._call("add", key, amount)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self._call("multi_get", keys)

    def multi_set(self, keys: list[str], values: list[str]) -> None:
        self._call("multi_set", keys, values)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        return self._call("compare_set", key, expected, desired)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        """torch's ``wait`` (it raises when ``timeout`` passes); here it may take ``timeout``
        plus the bound of one call (on a loaded host the answer to a 1 s wait can come
        seconds late: that is not a stuck store)."""
        self._call("wait", keys, timeout, timeout=timeout.total_seconds() + self.timeout)


class StoreConnect(threading.Thread):
    """One TCPStore client connection attempt on a thread of its own: TCPStore's handshake
    has no deadline, so against a frozen host (its kernel still accepts into the listen
    queue) it would wait forever. The caller waits on it as long as it likes (``join``),
    then reads ``store`` (None on failure: ``error`` says why). Named like the store-call
    threads, so ``meshrun.cli`` exits past one still stuck inside C++."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        super().__init__(name="meshrun-store-calls", daemon=True)
        self.host, self.port, self.timeout = host, port, timeout
        self.store: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        from torch.distributed import TCPStore

        try:
            self.store = TCPStore(self.host, self.port, is_master=False,
                                  timeout=timedelta(seconds=self.timeout),
                                  wait_for_workers=False)
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            self.error = exc
