"""The job's store protocol: every key meshrun writes in the job's store, and its payload.

Node 0's agent hosts one TCPStore (:mod:`meshrun.runtime.store`); every node's agent, its
watchdog and its workers' :func:`meshrun.progress` talk through it, using only the names
and payload types below (no caller builds a key or parses a value itself). Pure: strings
and bytes in and out, never a store call. docs/architecture.md has the same table.

=================================  =======================  ==========================
key                                written by               payload
=================================  =======================  ==========================
``meshrun/run_id``                 node 0, at start         the run id (text)
``meshrun/nonce``                  node 0, with a token     this launch's nonce (text)
``meshrun/nnodes``                 node 0, at start         the node count (int)
``meshrun/node/<node>``            each node, its claim     :class:`NodeClaim`
``meshrun/joined``                 each node, once          counter
``meshrun/preflight/fp/<node>``    each node                fingerprint (JSON)
``meshrun/preflight/t0``           node 0                   its clock (float)
``meshrun/preflight/offset/<n>``   nodes 1..N-1             clock offset (float)
``meshrun/preflight/verdict``      node 0                   the comparison (JSON)
``meshrun/preflight/seen``         nodes 1..N-1, once       counter
``meshrun/hb/<node>``              each node, every beat    :class:`Heartbeat`
``meshrun/watch``                  node 0, every beat       :class:`Watch`
``meshrun/links``                  node 0, at start         :class:`Endpoint`
``meshrun/ended``                  each node, once          counter
``meshrun/cause/<epoch>``          the first failed node    :class:`Cause` (first wins)
``meshrun/progress/<rank>``        each worker, <= 1/s      :class:`Progress`
``meshrun/stuck/<g>/<node>``       each node, probed        :class:`Probe`
``meshrun/hang_seen/<g>``          nodes 1..N-1, once       counter
``meshrun/round/<r>/workers``      node 0, each round       :class:`Endpoint`
``meshrun/round/<r>/arrived``      each node, each round    counter
``meshrun/round/<r>/ready``        the last to arrive       "1"
``meshrun/round/<r>/...``          torch's agent            its own keys (ranks, exit)
``meshrun/nodecheck/<a>/...``      the node check's workers  in the *workers'* store:
                                                            ``host/<node>``, its group's
``meshrun/leave/<a>/in``           every worker, leaving    counter, in the group's store
``meshrun/leave/<a>/out``          every worker, left       counter, in the group's store
=================================  =======================  ==========================

With a job token (:mod:`meshrun.signing`) every value of meshrun's own above is
signed, and each counter gets a signed mark per node beside it (``<key>/by/<node>``, "1"):
readers decide on the marks, the counter is only a hint. ``run_id`` and ``nnodes`` stay
plain (a node reads them before it knows the nonce).

``<r>`` is the rendezvous round: 0 at the start, one more for each restart of the workers
(:mod:`meshrun.runtime.rendezvous`). ``<g>`` is the hang generation: the number of hangs
handled by a restart so far, the same on every node. Supervision is O(N) on node 0's
store: each node writes its heartbeat and reads node 0's :class:`Watch` (two calls a
beat); node 0 reads every heartbeat in one call and publishes one Watch (its verdicts: lost
nodes, goodbyes, a hang probe, a hang verdict, the newest round). The workers' process
groups use a store of their own per round (hosted by node 0's agent, published under
``round/<r>/workers``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PREFIX = "meshrun/"

RUN_ID = PREFIX + "run_id"
NNODES = PREFIX + "nnodes"
JOINED = PREFIX + "joined"
ENDED = PREFIX + "ended"        # how many nodes' workers are over (failed, finished, stopped)
MEMBERS = PREFIX + "members"    # the membership (runtime/membership.py), node 0 writes it
WATCH = PREFIX + "watch"
LINKS = PREFIX + "links"        # node 0's liveness-link listener (Endpoint)

PREFLIGHT = PREFIX + "preflight/"
PREFLIGHT_T0 = PREFLIGHT + "t0"
PREFLIGHT_VERDICT = PREFLIGHT + "verdict"
PREFLIGHT_SEEN = PREFLIGHT + "seen"


def ended_key(epoch: int) -> str:
    """How many seated nodes' workers are over in membership epoch ``epoch`` (epoch 0: the
    historic key)."""
    return ENDED if epoch == 0 else f"{ENDED}/{epoch}"


def node_key(node: int) -> str:
    return f"{PREFIX}node/{node}"


def heartbeat_key(node: int) -> str:
    return f"{PREFIX}hb/{node}"


def progress_key(rank: int | str) -> str:
    return f"{PREFIX}progress/{rank}"


def fingerprint_key(node: int) -> str:
    return f"{PREFLIGHT}fp/{node}"


def offset_key(node: int) -> str:
    return f"{PREFLIGHT}offset/{node}"


def stuck_key(gen: int, node: int) -> str:
    return f"{PREFIX}stuck/{gen}/{node}"


def hang_seen_key(gen: int) -> str:
    return f"{PREFIX}hang_seen/{gen}"


ROUNDS = PREFIX + "round/"
#: meshrun's own keys under a round's prefix (the rest there is torch's agent's)
ROUND_OWN = ("arrived", "ready", "workers")
#: node 0's per-launch nonce, signed (only with a job token: meshrun/signing.py)
NONCE = PREFIX + "nonce"


def mark_key(counter: str, node: int) -> str:
    """With a job token, node ``node``'s signed mark beside the counter ``counter`` ("1"):
    readers count the marks, the counter is a hint (:mod:`meshrun.signing`)."""
    return f"{counter}/by/{node}"


def round_prefix(rnd: int) -> str:
    """What torch's agent writes for round ``rnd`` goes under this prefix."""
    return f"{ROUNDS}{rnd}/"


def round_arrived_key(rnd: int) -> str:
    return f"{round_prefix(rnd)}arrived"


def round_ready_key(rnd: int) -> str:
    return f"{round_prefix(rnd)}ready"


def round_workers_key(rnd: int) -> str:
    return f"{round_prefix(rnd)}workers"


def nodecheck_prefix(attempt: int | str) -> str:
    """The node check's own process group (:mod:`meshrun.worker.nodecheck`), in the
    workers' store of attempt ``attempt``: its keys never meet the script's."""
    return f"{PREFIX}nodecheck/{attempt}/"


def leave_key(attempt: int | str, phase: str) -> str:
    """:func:`meshrun.destroy_process_group`'s counters (``in`` before the teardown, ``out``
    after it), in the default process group's own store, per attempt of the workers."""
    return f"{PREFIX}leave/{attempt}/{phase}"


def cause_key(epoch: int) -> str:
    """The job's first cause in membership epoch ``epoch`` (a :class:`Cause`): the first
    node whose own rank failed of its own (not as a victim of another's failure) sets it;
    the others lead their reports with it."""
    return f"{PREFIX}cause/{epoch}"


def nodecheck_host_key(node: int) -> str:
    """Under :func:`nodecheck_prefix`: node ``node``'s host name."""
    return f"host/{node}"


def text(raw: bytes | str) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


#: what decoding a value that is not one raises besides ValueError (a stranger's write, a
#: value cut short): every reader turns these into one ValueError naming the value
BAD_VALUE = (KeyError, TypeError, AttributeError, IndexError, OverflowError, RecursionError)


def _decoder(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A payload's ``decode``: whatever a value that is not one makes it raise (a stranger's
    write into the store, a value cut short) becomes one ValueError naming the value, which
    its reader reports ("which is no meshrun value"); never another exception that would
    take a watchdog's beat down (tests/unit/test_protocol_fuzz.py)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def decode(cls: Any, raw: bytes | str) -> Any:
            try:
                return fn(cls, raw)
            except ValueError:
                raise
            except BAD_VALUE as exc:
                raise ValueError(f"not a {what}: {text(raw)[:80]!r}") from exc
        return decode
    return wrap


@dataclass(frozen=True)
class Cause:
    """A job's first cause (:func:`cause_key`): which rank on which node failed, how
    ("exited with code 7", "was killed by SIGABRT") and its error line ("" when it left
    none). JSON in the store."""

    rank: int
    node: int
    host: str
    how: str
    line: str

    def encode(self) -> str:
        return json.dumps({"rank": self.rank, "node": self.node, "host": self.host[:200],
                           "how": self.how[:100], "line": self.line[:300]})

    @classmethod
    def decode(cls, raw: bytes | str) -> Cause:
        """Raises ValueError for a value that is not one (it names what it got)."""
        try:
            data = json.loads(text(raw))
            return cls(int(data["rank"]), int(data["node"]), str(data["host"]),
                       str(data["how"]), str(data["line"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a cause record: {text(raw)[:80]!r}") from exc

    def lead(self, after: str) -> str:
        """The line a node's report leads with; ``after``: what happened on that node."""
        said = f": {self.line}" if self.line else ""
        return (f"meshrun: the job failed because rank {self.rank} on node {self.node} "
                f"({self.host}) {self.how}{said}; {after}")


@dataclass(frozen=True)
class NodeClaim:
    """Who holds a node rank: ``"<host> pid <pid> <token>"`` (the token tells two processes
    of one host apart)."""

    host: str
    pid: int
    token: str

    def encode(self) -> str:
        return f"{self.host} pid {self.pid} {self.token}"

    @classmethod
    @_decoder("node claim")
    def decode(cls, raw: bytes | str) -> NodeClaim:
        host, _, rest = text(raw).partition(" pid ")
        pid, _, token = rest.partition(" ")
        return cls(host, int(pid) if pid.isdigit() else 0, token)

    def who(self) -> str:
        """``host pid N``, as a person reads it."""
        return f"{self.host} pid {self.pid}"


@dataclass(frozen=True)
class Progress:
    """A worker's report: its position, the wall-clock time it reported, and its timings.

    Position: ``step``, the last step the script reported (:func:`meshrun.progress`; -1 when
    it reports none), and ``coll``, the collectives the rank has issued over all its process
    groups (:mod:`meshrun.worker.observe`; -1 when not observed); ``active``, the seconds
    its main thread was seen working on a CPU (gloo only; -1 when not observed). Any of the
    three moving is progress (``moved``); the ranks whose ``position`` is behind the
    others' are the ones the others wait for.

    Timings since its previous report: the steps it ended (``steps``, 0 when unknown), their
    mean duration ``step_s`` and, when the script marks its arrival at each step's
    synchronisation (:func:`meshrun.arrive`), the mean time of its own work before that mark,
    ``busy_s`` (-1 when unknown); and ``work``, the share of that time it spent working
    rather than waiting for the others, as the worker shim observes it (-1 when unknown).
    The straggler check (:mod:`meshrun.runtime.stragglers`) compares ``work`` between
    ranks, else ``busy_s``: in synchronous training ``step_s`` is the same for all."""

    step: int
    at: float
    step_s: float = -1.0
    busy_s: float = -1.0
    steps: int = 0
    coll: int = -1
    work: float = -1.0
    active: int = -1

    @property
    def position(self) -> tuple[int, int]:
        """How far the rank got: (its step, its collectives)."""
        return self.step, self.coll

    @property
    def moved(self) -> tuple[int, int, int]:
        """What changes while the rank progresses: its position and its active seconds."""
        return self.step, self.coll, self.active

    def encode(self) -> str:
        if self.coll < 0 and self.work < 0 and self.active < 0:
            if self.steps <= 0:
                return f"{self.step} {self.at}"
            return f"{self.step} {self.at} {self.step_s:.6f} {self.busy_s:.6f} {self.steps}"
        return (f"{self.step} {self.at} {self.step_s:.6f} {self.busy_s:.6f} {self.steps} "
                f"{self.coll} {self.work:.6f} {self.active}")

    @classmethod
    @_decoder("progress value")
    def decode(cls, raw: bytes | str) -> Progress:
        parts = text(raw).split()
        if not parts:
            raise ValueError("empty progress value")
        if len(parts) >= 7:
            return cls(int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3]),
                       int(parts[4]), int(parts[5]), float(parts[6]),
                       int(parts[7]) if len(parts) >= 8 else -1)
        if len(parts) >= 5:
            return cls(int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3]),
                       int(parts[4]))
        return cls(int(parts[0]), float(parts[1]) if len(parts) > 1 else 0.0)


@dataclass(frozen=True)
class Endpoint:
    """A store address: ``"<host> <port>"`` (space-separated: the host may be IPv6)."""

    host: str
    port: int

    def encode(self) -> str:
        return f"{self.host} {self.port}"

    @classmethod
    def decode(cls, raw: bytes | str) -> Endpoint:
        """Raises ValueError for a value that is not one (it names what it got)."""
        host, _, port = text(raw).rpartition(" ")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not a workers' endpoint ('HOST PORT'): {text(raw)[:80]!r}")
        return cls(host, int(port))


@dataclass(frozen=True)
class Probe:
    """One node's answer to a hang probe: its ranks that look stuck (with why) and the
    restarts its agent has left."""

    stuck: tuple[tuple[int, str], ...] = ()
    restarts_left: int = 0

    def encode(self) -> str:
        return json.dumps({"stuck": [list(s) for s in self.stuck],
                           "restarts_left": self.restarts_left})

    @classmethod
    @_decoder("hang probe answer")
    def decode(cls, raw: bytes | str) -> Probe:
        data = json.loads(text(raw))
        return cls(tuple((int(r), str(why)) for r, why in data["stuck"]),
                   int(data["restarts_left"]))


@dataclass(frozen=True)
class HangVerdict:
    """Node 0's verdict on a hang: the line every node prints, the stuck ranks as
    (rank, node, host), and whether every node restarts its workers."""

    line: str
    stuck: tuple[tuple[int, int, str], ...] = ()
    restart: bool = False

    def encode(self) -> str:
        return json.dumps({"line": self.line, "stuck": [list(s) for s in self.stuck],
                           "restart": self.restart})

    @classmethod
    @_decoder("hang verdict")
    def decode(cls, raw: bytes | str) -> HangVerdict:
        data = json.loads(text(raw))
        return cls(data["line"], tuple((int(r), int(n), str(h)) for r, n, h in data["stuck"]),
                   bool(data.get("restart")))


@dataclass(frozen=True)
class Heartbeat:
    """A node's heartbeat: its beat number, and at its end its goodbye (a ``Goodbye``
    value: done, failed, stopped), so that node 0 reads every beat and every goodbye in one
    call: ``"<beat>"`` or ``"<beat> <goodbye>"``."""

    beat: int
    goodbye: str = ""

    def encode(self) -> str:
        return f"{self.beat} {self.goodbye}".rstrip()

    @classmethod
    @_decoder("heartbeat")
    def decode(cls, raw: bytes | str) -> Heartbeat:
        beat, _, goodbye = text(raw).partition(" ")
        return cls(int(beat), goodbye.strip())


@dataclass(frozen=True)
class Watch:
    """What node 0's watchdog publishes every beat, for every other node to read in one call:
    its own beat number (node 0's watchdog is alive while it changes), the nodes it found lost
    (node, seconds silent), every goodbye it has read (node -> Goodbye value), the hang
    in hand: the generation ``gen``, ``probe`` (every node: dump your workers' stacks and
    answer under ``stuck/<gen>/<node>``) and node 0's ``verdict`` once it has one; and
    ``round``, the newest rendezvous round some node has arrived at (a node in an older
    round restarts its workers to join it); ``closed``: the lost nodes whose liveness link
    (:mod:`meshrun.runtime.links`) closed without a goodbye: their agent died;
    ``notices``: the newest straggler notices (:mod:`meshrun.runtime.stragglers`, JSON
    records with a ``seq``), which every node prints once; ``members``: the job's
    membership (:class:`meshrun.runtime.membership.Membership` as JSON: who holds which
    seat, the spares, the lost nodes), when the job has spares."""

    beat: int
    lost: tuple[tuple[int, float], ...] = ()
    goodbyes: dict[int, str] = field(default_factory=dict)
    gen: int = 0
    probe: bool = False
    verdict: HangVerdict | None = None
    round: int = 0
    closed: tuple[int, ...] = ()   # the lost nodes whose liveness link closed (they died)
    notices: tuple[dict, ...] = ()  # the newest straggler notices, each with its "seq"
    members: dict | None = None    # the membership (runtime/membership.py), as JSON

    def encode(self) -> str:
        return json.dumps({"beat": self.beat, "lost": [list(x) for x in self.lost],
                           "goodbyes": {str(k): v for k, v in self.goodbyes.items()},
                           "gen": self.gen, "probe": self.probe,
                           "verdict": self.verdict.encode() if self.verdict else None,
                           "round": self.round, "closed": list(self.closed),
                           "notices": list(self.notices), "members": self.members})

    @classmethod
    @_decoder("watch")
    def decode(cls, raw: bytes | str) -> Watch:
        data = json.loads(text(raw))
        verdict = data.get("verdict")
        return cls(int(data["beat"]), tuple((int(n), float(s)) for n, s in data["lost"]),
                   {int(k): str(v) for k, v in data.get("goodbyes", {}).items()},
                   int(data.get("gen", 0)), bool(data.get("probe")),
                   HangVerdict.decode(verdict) if verdict else None, int(data.get("round", 0)),
                   tuple(int(n) for n in data.get("closed", ())),
                   tuple(n for n in data.get("notices", ()) if isinstance(n, dict)),
                   data.get("members") if isinstance(data.get("members"), dict) else None)
