"""The launcher's supervision: this node's :class:`~meshrun.runtime.watchdog.Watchdog` wired to
torch's agent (what it does on an event), the wait after a worker failure (was a node lost,
or was it the workers' own failure?), and this process's workers as ``/proc`` shows them.

The watchdog may SIGTERM this process only while torch's agent runs (:func:`agent_running`,
:func:`stop_agent`): torch's agent turns that signal into an orderly stop of the workers.
Checking that the agent runs and sending the signal are one step under a lock, so a
signal sent as the agent returns can never surface later, outside the agent's handling
(an exit 143 instead of the event's 4 or 5).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import protocol
from ..plan import LaunchPlan
from ..signing import ignored
from . import procs
from .events import EventKind, process_state
from .store import JobStore
from .supervision import Supervision

AGENT_RUNNING = threading.Event()  # the watchdog may SIGTERM this process only while set
_AGENT_LOCK = threading.Lock()     # held across "is the agent running?" and the SIGTERM
_TERM_SENT = threading.Event()     # the watchdog has sent its SIGTERM in this agent's run


@contextmanager
def agent_running() -> Iterator[None]:
    """Around torch's agent (main thread): while inside, :func:`stop_agent` may SIGTERM this
    process. On the way out, once :func:`stop_agent` cannot send any more, a SIGTERM it
    already sent that has not been handled yet is dropped: the agent it was for is over
    (inside the block it raises as usual, and the caller reports the watchdog's event)."""
    _TERM_SENT.clear()
    AGENT_RUNNING.set()
    handled = False  # the SIGTERM was raised inside (torch's SignalException)
    try:
        yield
    except Exception as exc:
        handled = type(exc).__name__ == "SignalException"
        raise
    finally:
        with _AGENT_LOCK:
            AGENT_RUNNING.clear()
            if _TERM_SENT.is_set() and not handled:
                signal.signal(signal.SIGTERM, lambda *_: None)  # this process is ending


def stop_agent() -> bool:
    """SIGTERM this process if torch's agent is running (see :func:`agent_running`)."""
    with _AGENT_LOCK:
        if not AGENT_RUNNING.is_set():
            return False
        _TERM_SENT.set()
        os.kill(os.getpid(), signal.SIGTERM)
        return True


def node_hosts(job: JobStore, plan: LaunchPlan) -> dict[int, str]:
    """node -> host name, from the claims of the join: one bounded call for all nodes."""
    try:
        claims = job.calls.multi_get([protocol.node_key(r) for r in range(plan.nnodes)])
        return {r: "?" if ignored(raw) else protocol.NodeClaim.decode(raw).host
                for r, raw in enumerate(claims)}
    except Exception:  # noqa: BLE001 - names are for messages only
        return dict.fromkeys(range(plan.nnodes), "?")


def start_watchdog(job: JobStore, plan: LaunchPlan, supervision: Supervision,
                   hosts: dict[int, str], max_restarts: int = 0, rounds: Any = None):
    """Start this node's :class:`meshrun.runtime.watchdog.Watchdog` over the job's store.

    Its ``on_event`` prints the event's line, then either stops the job (SIGTERM to this
    process while torch's agent runs; stopped workers are SIGKILLed, they would ignore
    SIGTERM) or, for a hang with restarts left on every node, SIGKILLs the hung attempt's
    workers so the agent restarts them through the rendezvous."""
    from ..sockets import resolve, shut_connections
    from .watchdog import Watchdog

    store_addresses = resolve(plan.master_addr)  # now: no DNS after the network is gone

    def on_event(event) -> None:
        print(event.line, file=sys.stderr, flush=True)
        if event.kind == EventKind.TAKEOVER:
            # a spare took a lost node's seat: this node's workers of the epoch before (if it
            # ran any, and not already those of the new epoch's round) restart from the
            # newest checkpoint in the new epoch's round (the launcher's loop)
            if rounds is None or rounds.current < rounds.membership(plan).round:
                for pid in procs.worker_pids().values():
                    procs.send(pid, signal.SIGKILL)
            return
        if event.restart:
            if not event.pids:
                return  # a spare: no worker of its own to restart
            used = max_restarts - restarts_left()
            print(f"meshrun: restarting node {plan.node_rank}'s workers after the hang "
                  f"(restart {used + 1} of {max_restarts}); they resume through the "
                  "rendezvous", file=sys.stderr, flush=True)
            for pid in event.pids:
                procs.send(pid, signal.SIGKILL)  # only if still that worker (pid reuse)
            return
        for pid in procs.worker_pids().values():  # a stopped worker would ignore SIGTERM 30 s
            if process_state(pid) in ("T", "t"):
                procs.send(pid, signal.SIGKILL)
        stop_agent()  # torch's agent stops the workers in order
        if event.kind == EventKind.STORE_LOST:
            # torch's calls to the lost store may wait in recv() for TCP's timeout (~15 min)
            # when its host vanished without closing the connections (a cut link, a frozen
            # host): shut them, so those calls fail now and the agent can act on the SIGTERM.
            shut_connections(job.port, store_addresses)

    def restarts_left() -> int:
        """What torch's agent has left, from its workers' TORCHELASTIC_* variables."""
        env = procs.worker_env()
        try:
            return max(0, int(env[b"TORCHELASTIC_MAX_RESTARTS"])
                       - int(env[b"TORCHELASTIC_RESTART_COUNT"]))
        except (KeyError, ValueError):
            return 0

    slow = None
    if plan.node_rank == 0 and supervision.slow_window > 0:
        from .stragglers import Stragglers

        slow = Stragglers(plan.seated_nodes, plan.nproc_per_node, hosts,
                          factor=supervision.slow_factor, window=supervision.slow_window,
                          seats=tuple(range(plan.seated_nodes)),
                          wall_offset=time.time() - time.monotonic())  # the watchdog's clock
        if plan.world_size == 1:  # say so rather than guess
            print("meshrun: slow-node check: one rank, nobody to compare it with: off",
                  file=sys.stderr, flush=True)
    events_path = os.path.join(plan.log_dir, f"events.node{plan.node_rank}.jsonl")

    files = FileWriter()  # off the watchdog's beat: a stalled log folder must not hold it

    def on_notice(record: dict) -> None:
        """A straggler notice: one line on the console, one record in the node's events."""
        print(record.get("line", ""), file=sys.stderr, flush=True)
        files.put(append_line, events_path, json.dumps({**record, "time": time.time()}))

    def on_summary(summary: dict, final: bool = False) -> None:
        args = (os.path.join(plan.log_dir, "node_steps.json"), json.dumps(summary, indent=2))
        if final:  # the node is ending: the queued notices first, then this, in place
            files.drain(1.0)
            write_atomically(*args)
        else:
            files.put(write_atomically, *args)

    status = None
    if plan.node_rank == 0 and supervision.status_every > 0:
        from .status import Status

        job_config = plan.job
        status = Status(supervision.status_every, total_steps=job_config.train.steps
                        if job_config is not None and job_config.recipe else None)

    board: list[Any] = []   # the TensorBoard writer, made at the first line (when installed)

    def on_status(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        files.put(append_line, events_path, json.dumps({"event": "status", "line": line,
                                                        "time": time.time()}))
        files.put(_status_scalars, board, plan.log_dir, dict(status.figures))

    dog = Watchdog(host=plan.master_addr, port=job.port, node_rank=plan.node_rank,
                   nnodes=plan.nnodes, world_size=plan.world_size, hosts=hosts,
                   node_timeout=supervision.node_timeout, hang_timeout=supervision.hang_timeout,
                   interval=supervision.beat, on_event=on_event, local_pids=procs.worker_pids,
                   restarts_left=restarts_left, log_dir=plan.log_dir, rounds=rounds,
                   send_signal=procs.send, slow=slow, on_notice=on_notice,
                   on_summary=on_summary, spares=plan.spares, min_seats=plan.min_nodes,
                   newest_checkpoint=_newest_checkpoint(plan), status=status,
                   on_status=on_status, signing=job.signing)
    dog.start()
    relay_stop_signals(lambda: shut_connections(job.port, store_addresses))
    return dog


STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # what ends a node from outside
_STOP_NUMBERS = frozenset(int(getattr(signal, name)) for name in STOP_SIGNALS)


def relay_stop_signals(shut: Any, grace: float = 0.5) -> bool:
    """Make a stop signal work while torch's agent waits in its exit barrier.

    A Python signal handler runs only when the main thread is back in Python; torch's agent
    waits for the other nodes' agents in a store call in C++ (``_exit_barrier``, up to 300
    s) and so ignores SIGTERM and SIGINT all that time (a peer that stopped never arrives).
    ``signal.set_wakeup_fd`` has the C-level handler write each signal's number to a
    socket the moment it arrives; a thread reads it and, when the main thread is still in
    the exit barrier ``grace`` seconds later, ``shut`` s this process's connections to the
    job's store: the barrier's call fails, the agent returns to Python, and the signal's
    handler runs (this node stops, reporting why). Elsewhere (workers running, the
    rendezvous's bounded calls) the handler runs at once and nothing is shut. Returns
    whether the relay is on (only the main thread may set the wakeup fd)."""
    import socket

    if threading.current_thread() is not threading.main_thread():
        return False
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        before = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):
        return False
    if before != -1:  # someone else's (an event loop's): theirs stays, no relay
        signal.set_wakeup_fd(before)
        reader.close()
        writer.close()
        return False
    _KEEP.extend((reader, writer))
    main = threading.main_thread().ident

    def watch() -> None:
        while True:
            try:
                got = reader.recv(64)
            except OSError:
                return
            if not got:
                return
            if not _STOP_NUMBERS.intersection(got):
                continue
            time.sleep(grace)
            if AGENT_RUNNING.is_set() and procs.in_exit_barrier(main):
                try:
                    shut()
                except Exception:  # noqa: BLE001, S110 - the next signal tries again
                    pass

    threading.Thread(target=watch, name="meshrun-stop-signals", daemon=True).start()
    return True


_KEEP: list = []


class FileWriter:
    """Writes files on a daemon thread of its own, in order; at most 64 waiting (a log
    folder that stalls loses the newest, never the caller's time)."""

    def __init__(self) -> None:
        import queue

        self._queue: Any = queue.Queue(maxsize=64)
        self._thread: threading.Thread | None = None

    def put(self, write: Any, *args: Any) -> None:
        import queue

        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="meshrun-files",
                                            daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait((write, args))
        except queue.Full:
            pass

    def _run(self) -> None:
        while True:
            write, args = self._queue.get()
            try:
                write(*args)
            finally:
                self._queue.task_done()

    def drain(self, seconds: float) -> None:
        """Wait up to ``seconds`` for what is queued to be written."""
        deadline = time.monotonic() + seconds
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)


def append_line(path: str, line: str) -> None:
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    except OSError:
        pass  # the console line is the notice; the file is a copy


def write_atomically(path: str, text: str) -> None:
    """meshrun's own file, replaced whole (a reader never sees half of it)."""
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(path + ".tmp", path)
    except OSError:  # a full disk: the old file stays whole, no half-written one is left
        try:
            os.unlink(path + ".tmp")
        except OSError:
            pass


def _status_scalars(board: list[Any], log_dir: str, figures: dict) -> None:
    """The status line's figures as TensorBoard scalars (``<log dir>/tensorboard/meshrun``),
    where tensorboard is installed; on the file writer's thread, never the watchdog's."""
    try:
        if not board:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:   # optional
                board.append(None)
                return
            board.append(SummaryWriter(os.path.join(log_dir, "tensorboard", "meshrun")))
        writer = board[0]
        if writer is None:
            return
        step = int(figures.pop("position", 0))
        for key, value in figures.items():
            writer.add_scalar(f"status/{key}", value, step)
        writer.flush()
    except Exception:  # noqa: BLE001 - scalars are a copy: never the file writer's end
        board[:] = [None]


def _newest_checkpoint(plan: LaunchPlan) -> Callable[[], int | None]:
    """For a shrunk job's admission and the status line (node 0): the step of the job's
    newest complete checkpoint (-1: none yet; ``UNKNOWN_CHECKPOINT``: not read yet), or None
    where meshrun does not know where the checkpoints go (a script run without
    ``--checkpoint-dir``: a node that comes back is seated at once). The folder: a recipe's
    ``checkpoint.dir``, or the one ``--checkpoint-dir`` / ``MESHRUN_CHECKPOINT_DIR`` names for
    a script (its HF Trainer or Lightning checkpoints: :func:`meshrun.worker.checkpoint.
    newest_in_any_layout`). It is listed on a thread of its own every 2 s, never on the
    watchdog's beat: a stalled folder (a shared file system) holds that thread only, and a
    failed listing keeps the value before it."""
    from .watchdog import UNKNOWN_CHECKPOINT

    job = plan.job
    named = job is not None and (job.recipe or not job.source.get("checkpoint.dir", "default")
                                 .startswith("default"))   # a script's: only when given
    directory = os.environ.get("MESHRUN_CHECKPOINT_DIR") or (
        job.checkpoint.dir if named else "")
    if not directory:
        return lambda: None
    newest = [UNKNOWN_CHECKPOINT]

    def watch() -> None:
        from ..worker.checkpoint import newest_in_any_layout

        while True:
            try:
                newest[0] = newest_in_any_layout(directory)
            except OSError:
                pass
            time.sleep(2.0)

    started: list[bool] = []

    def read() -> int | None:
        if not started:   # at the first question: most jobs never ask
            started.append(True)
            threading.Thread(target=watch, name="meshrun-checkpoints", daemon=True).start()
        return newest[0]

    return read


def await_event(dog, supervision: Supervision, poll: float = 0.1, *, epoch: int | None = None):
    """After a worker failure: was a node lost? The watchdog now counts ``suspicion``
    seconds of silence as lost (:meth:`Watchdog.suspect`); wait until it says so, or every
    node's workers are over (each node counts itself in ``meshrun/ended`` when its workers
    end: a node that counted itself was not lost), or every other node has said goodbye, or
    that time (plus two beats) has passed: then every other node is alive and the failure
    is the workers' own. When every node failed, the last one to fail ends the wait for all,
    within a poll.

    ``epoch``: the membership epoch the failed workers ran in. A newer one (a spare took a
    lost node's seat, before or during the wait) is the answer: its event is returned (kind
    ``takeover``) and the launcher starts the workers again."""
    epoch = dog.members.epoch if epoch is None else epoch

    def changed():
        if dog.members.epoch > epoch and dog.changes:
            return dog.changes[-1]
        return None

    if changed() is not None:
        return changed()
    suspicion = supervision.suspicion
    dog.suspect(suspicion)
    dog.mark_ended()
    deadline = time.monotonic() + suspicion + 2 * supervision.beat
    while time.monotonic() < deadline:
        if dog.event is not None:
            return dog.event
        if changed() is not None:
            return changed()
        dog.mark_ended()  # again until it is counted (the store may have been reconnecting)
        if dog.all_ended() or dog.others_done():
            return None
        time.sleep(poll)
    return dog.event or changed()


def report_event(event) -> int:
    from ..errors import EXIT_HANG, EXIT_NODE_LOST, EXIT_WORKER_FAILED

    if event.kind == EventKind.PEER_FAILED:  # another node's workers failed: so did the job
        return EXIT_WORKER_FAILED
    if event.kind == EventKind.PEER_STOPPED:  # this node's workers had all succeeded
        return 0
    return EXIT_HANG if event.kind == EventKind.HANG else EXIT_NODE_LOST
