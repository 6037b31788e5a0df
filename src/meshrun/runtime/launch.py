"""The only place that starts processes: PyTorch's elastic agent, as torchrun runs it.

``run(plan)`` does, on one node:

1. open the run's log folder and tee everything printed into ``node<k>.log``;
2. print the banner (the plan, with where each value came from);
3. open the job's store (node 0 hosts it at the master address:port) and wait
   until every node has joined (:mod:`meshrun.runtime.store`), and compare the nodes
   (:mod:`meshrun.runtime.preflight`);
4. call ``torch.distributed.launcher.api.launch_agent``, torchrun's own entry
   point, with a c10d rendezvous over that store (:mod:`meshrun.runtime.rendezvous`:
   torch's handler, the group rank pinned to the node rank), while this node's
   watchdog runs beside it (:mod:`meshrun.runtime.supervise`);
5. report the outcome and return the workers' exit status.

Workers run ``python -u SCRIPT ARGS`` (or ``-m MODULE``) with ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``MASTER_ADDR``/``MASTER_PORT`` (the job's store), ``TORCHELASTIC_*`` set by
the agent, plus the plan's variables (``CUDA_VISIBLE_DEVICES``,
``OMP_NUM_THREADS``, ``MESHRUN_*``).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from .. import protocol
from ..diagnose.lines import reads_like_error
from ..errors import EXIT_STARTUP, MeshrunError, StartupError
from ..plan import LaunchPlan, brief, describe, ranks_phrase
from ..redact import redact_text
from ..reports import bundle
from ..signing import JOB_KEY, Signing
from ..signing import VARIABLE as TOKEN_VARIABLE
from ..topology.base import in_spans
from . import failures
from .agent_output import quiet_agent_lines, worker_logs_spec
from .events import EventKind, Goodbye
from .logs import LogRouter
from .rendezvous import RDZV_BACKEND, Rounds, register_backend
from .store import JobStore, join, open_store, say, say_control_plane, store_errors
from .supervise import (
    STOP_SIGNALS,
    Supervision,
    agent_running,
    await_event,
    node_hosts,
    report_event,
    start_watchdog,
)

STOPPED_BY_SIGNAL = threading.Event()  # the run was stopped from outside (not by meshrun)


def _raise_on_signals() -> None:
    """SIGTERM/SIGINT/SIGHUP/SIGQUIT raise torch's SignalException from now on, as torch's
    agent handler does — which torch installs only when it starts the workers, after the
    rendezvous: a signal before that (the watchdog's SIGTERM when a node is lost during
    the rendezvous, a scheduler's) would otherwise kill meshrun with no report."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    def handler(signum: int, _frame: Any) -> None:
        raise SignalException(f"Process {os.getpid()} got signal: {signum}",
                              sigval=signal.Signals(signum))

    for name in STOP_SIGNALS:
        signal.signal(getattr(signal, name), handler)


def _default_signals() -> None:
    """Back to the default actions (the first signal has been handled)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in STOP_SIGNALS:
        signal.signal(getattr(signal, name),
                      signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL)


def run(plan: LaunchPlan, *, env: Mapping[str, str], max_restarts: int = 0,
        preflight: bool = True,
        require_paths: tuple[str, ...] = (), supervision: Supervision = Supervision(),
        verbose: bool = False, shown: tuple[tuple[int, int], ...] | None = None,
        timestamps: bool = False, token: str | None = None) -> int:
    """Launch this node's workers; return the exit code for the meshrun process. The console
    gets the short banner (``verbose``: the whole plan); the node log always the whole plan.
    ``shown``: the global ranks whose output reaches the console (None: all; the logs get
    every rank's). ``timestamps``: meshrun's own console lines carry the time (its lines in
    the node log always do). ``token``: the job token (meshrun/signing.py), or None."""
    assert plan.command is not None
    from .rundir import set_aside

    earlier = set_aside(plan.log_dir, plan.node_rank, plan.global_ranks)
    # meshrun's own console lines say whose they are (simulate's relay marks them itself)
    prefix = f"[node {plan.node_rank}] " if plan.nnodes > 1 and not plan.simulated_workers \
        else ""
    router = LogRouter(plan.log_dir, plan.node_rank, plan.global_ranks, shown=shown,
                       timestamps=timestamps, prefix=prefix)
    router.install()
    try:
        if verbose:
            print(describe(plan), flush=True)
        else:
            router.log_only(describe(plan))
            print(brief(plan, router.node_log_path), flush=True)
        from ..reports.bundle import write_start

        write_start(plan, env)
        if earlier:
            say(f"an earlier run with this run id: its files of this node are in {earlier}")
        if shown is not None and not any(in_spans(r, shown) for r in range(plan.world_size)):
            span = "0" if plan.world_size == 1 else f"0-{plan.world_size - 1}"
            say(f"note: --show-ranks names no rank of this job (ranks {span}): no worker "
                "output on the console (the rank logs keep it all)")
        for moved in router.moved:
            say(f"kept an earlier run's log as {moved}")
        stopped = False
        told: list[protocol.Cause] = []   # another node's first cause, when it ended the job
        try:
            code = _launch(plan, max_restarts, preflight, require_paths, supervision, router,
                           told, token)
        except MeshrunError as err:
            print(err.line(), file=sys.stderr, flush=True)
            code = err.exit_code
        except Exception as exc:  # noqa: BLE001 - torch's SignalException: stopped from outside
            sigval = getattr(exc, "sigval", None)
            if sigval is None:
                raise
            print(f"meshrun: node {plan.node_rank} stopped by {sigval.name}", file=sys.stderr,
                  flush=True)
            code, stopped = 128 + int(sigval), True
        stopped = stopped or STOPPED_BY_SIGNAL.is_set()
        _default_signals()  # a second signal during the clean-up ends meshrun at once
        from .agent_output import scrub_raw
        from .logs import drop_empty_stacks

        scrub_raw(plan.log_dir, plan.node_rank)
        drop_empty_stacks(plan.log_dir, router.ranks_run())
        if code != 0 and not stopped:  # nothing to explain when the user or scheduler stopped it
            _explain(plan, router.ranks_run(), told[0] if told else None)
        return code
    finally:
        router.close()


def _quiet_agent_cpp_warnings() -> None:
    """The agent's own c10d C++ warnings (a broken store connection, with 20 C++ frames) say
    nothing meshrun's one line does not; workers keep the user's TORCH_CPP_LOG_LEVEL."""
    if "TORCH_CPP_LOG_LEVEL" in os.environ or "torch" in sys.modules:
        return
    os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    try:
        import torch  # noqa: F401 - c10 reads the level once, when it loads
    finally:
        del os.environ["TORCH_CPP_LOG_LEVEL"]


def _launch(plan: LaunchPlan, max_restarts: int, preflight: bool,
            require_paths: tuple[str, ...], supervision: Supervision, router: LogRouter,
            told: list[protocol.Cause], token: str | None) -> int:
    started = time.monotonic()
    _quiet_agent_cpp_warnings()
    say_control_plane(plan, token)
    job = open_store(plan, token=token)
    try:
        with store_errors(plan, job.port, "waiting for the other nodes to join"):
            members = join(job, plan, wait_lost=(supervision.node_timeout + 10.0 if
                                                 plan.spares or plan.min_nodes else 0.0))
        if preflight:  # a node that came back into a running job: against node 0's alone
            _preflight(job, plan, require_paths, late=members is not None)
        elif plan.nnodes > 1:
            say("preflight skipped (--no-preflight)")
        hosts = node_hosts(job, plan)
    finally:
        job.close_calls()
    # torch's agent gives every worker a copy of this process's environment: meshrun writes
    # it here, with what the workers need, and again before each membership epoch's workers
    # (nothing here reads it back).
    os.environ.update(worker_environment(plan, job.port, job.signing))
    os.environ.pop(TOKEN_VARIABLE, None)  # the workers get the derived key, not the token
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import launch_agent

    rounds = Rounds(members)
    register_backend(job, plan, rounds)
    quiet_agent_lines(router)
    dog = start_watchdog(job, plan, supervision, hosts, max_restarts, rounds)
    target = (["-m", plan.command.target] if plan.command.module
              else ["--", plan.command.target])
    status = Goodbye.FAILED
    _raise_on_signals()  # before the watchdog may SIGTERM us: torch's own handler comes later
    reason = ""
    def set_up(members: Any, reason: str) -> tuple[int, ...]:
        """An epoch's workers set up (their variables, the line, the logs' mark); their ranks.
        Called by the loop below, and by the rendezvous (Rounds.entered) when torch's agent
        restarts the workers into a newer epoch by itself."""
        os.environ.update(epoch_environment(members, reason))
        ranks = members.ranks_of(plan.node_rank, plan.nproc_per_node)
        if members.epoch:
            router.begin_epoch(members.epoch, ranks)
        say(f"starting {_workers(plan.nproc_per_node)}: {ranks_phrase(ranks)} of "
            f"{len(members.seats) * plan.nproc_per_node} ({time.monotonic() - started:.1f} s "
            "after start" + (f"; membership epoch {members.epoch}" if members.epoch else "") + ")")
        return ranks

    rounds.on_epoch = set_up
    try:
        while True:  # one pass per membership epoch this node holds a seat in
            if not rounds.membership(plan).seated(plan.node_rank):
                code = _wait_for_seat(plan, dog, rounds)
                if code is not None:
                    status = Goodbye.DONE if code == 0 else Goodbye.STOPPED
                    return code
            members = rounds.membership(plan)
            dog.clear_suspicion()  # a failure of the epoch before is no suspicion now
            rounds.claim(members.epoch)   # the loop sets every pass up (a new agent's workers)
            ranks = set_up(members, reason)
            launched = time.time()   # a worker's failure record older than this: not ours
            failures.Stopping.reset()
            router.show_workers()
            try:
                with agent_running():  # the watchdog may SIGTERM this process only inside
                    try:
                        launch_agent(_agent_config(plan, job, max_restarts, router),
                                     sys.executable, ["-u", "-m", "meshrun.worker.bootstrap",
                                                      *target, *plan.command.args])
                    finally:
                        router.drain_workers()  # their last lines before meshrun's report
                status = Goodbye.DONE
                break
            except ChildFailedError as failed:
                event = await_event(dog, supervision, epoch=members.epoch)
                if event is not None and event.kind == EventKind.TAKEOVER:
                    reason = f"takeover: {event.line.removeprefix('meshrun: ')}"
                    continue  # a spare took a lost node's seat: the next epoch
                if event is not None:
                    status = Goodbye.STOPPED  # by the event: another node's cause, not this node's
                    _lead_with_cause(dog, event, plan, told)
                    return report_event(event)
                # Goodbye.FAILED: the others stop for it
                return _report_failure(plan, failed, launched, ranks, dog, told)
            except SignalException as exc:
                status = Goodbye.STOPPED
                if dog.event is not None:
                    _lead_with_cause(dog, dog.event, plan, told)
                    return report_event(dog.event)
                STOPPED_BY_SIGNAL.set()
                print(f"meshrun: node {plan.node_rank} stopped by {exc.sigval.name}; its "
                      "workers were stopped", file=sys.stderr, flush=True)
                return 128 + int(exc.sigval)
            except Exception as exc:  # the agent itself failed (rendezvous, store)
                event = await_event(dog, supervision, epoch=members.epoch)  # a lost store
                if event is not None and event.kind == EventKind.TAKEOVER:   # host fails the
                    reason = f"takeover: {event.line.removeprefix('meshrun: ')}"  # agent first
                    continue
                if event is not None:
                    status = Goodbye.STOPPED
                    return report_event(event)
                first = str(exc).strip().splitlines()
                print(f"meshrun: error: the elastic agent on node {plan.node_rank} stopped: "
                      f"{type(exc).__name__}: {first[0] if first else ''}; fix: see "
                      f"{plan.log_dir}/node{plan.node_rank}.log", file=sys.stderr, flush=True)
                return EXIT_STARTUP
    finally:
        dog.stop(status)
        note = dog.unwatched()
        if note:
            print(note, file=sys.stderr, flush=True)
    say(f"{'all ' if plan.nproc_per_node > 1 else ''}{_workers(plan.nproc_per_node)} of node "
        f"{plan.node_rank} finished successfully; "
        f"logs in {plan.log_dir}")
    return 0


def _agent_config(plan: LaunchPlan, job: JobStore, max_restarts: int,
                  router: LogRouter) -> Any:
    """torchrun's launch config for this node's agent: meshrun's rendezvous
    (:mod:`meshrun.runtime.rendezvous`), one agent per membership epoch (``--max-restarts``
    counts within an epoch: a spare's take-over starts the count again)."""
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=plan.seated_nodes, max_nodes=plan.seated_nodes,
        nproc_per_node=plan.nproc_per_node,
        run_id=plan.run_id, role="worker", rdzv_endpoint=f"{plan.master_addr}:{job.port}",
        rdzv_backend=RDZV_BACKEND, rdzv_configs={"join_timeout": plan.join_timeout},
        max_restarts=max_restarts, monitor_interval=0.1, start_method="spawn",
        logs_specs=worker_logs_spec(plan.log_dir, plan.node_rank, router),
    )


def _wait_for_seat(plan: LaunchPlan, dog: Any, rounds: Rounds, poll: float = 0.1) -> int | None:
    """A spare waits (heartbeating: its watchdog runs) until the membership gives it a seat
    (None: start the workers), or the job ends: 0 once node 0 said it finished, else the
    exit code of the event that ended it."""
    members = rounds.membership(plan)
    say(f"node {plan.node_rank} waits as a spare: it takes a lost node's seat (or a new one in "
        "a job that shrank, at a checkpoint), and starts no worker until then")
    told = False
    while True:
        members = rounds.membership(plan)
        if members.seated(plan.node_rank):
            return None
        if plan.node_rank in members.kept_out and not told:
            told = True
            say(f"node {plan.node_rank} was lost {members.strikes_of(plan.node_rank)} times "
                "in this job: it is kept out and waits for the job's end")
        if dog.event is not None:
            return report_event(dog.event)
        if dog.goodbyes.get(0) == Goodbye.DONE:
            say(f"the job finished; spare node {plan.node_rank} was not needed")
            return 0
        time.sleep(poll)


def epoch_environment(members: Any, reason: str) -> dict[str, str]:
    """What the workers of an epoch learn of it (RANK, WORLD_SIZE, GROUP_RANK: torch's agent)."""
    return {"MESHRUN_MEMBERSHIP_EPOCH": str(members.epoch),
            "MESHRUN_NNODES": str(len(members.seats)),   # fewer once the job shrank
            "MESHRUN_RESTART_REASON": reason}


def worker_environment(plan: LaunchPlan, store_port: int,
                       signing: Signing | None = None) -> dict[str, str]:
    """What the workers get on top of the agent's environment: the plan's variables (each
    with its reason in the banner) and the job's store for :func:`meshrun.progress` (their
    MASTER_PORT is their round's own store: :mod:`meshrun.runtime.rendezvous`); with a job
    token, the key derived from it for this launch (never the token)."""
    env = {**plan.env_dict(),
           "MESHRUN_STORE": f"{plan.master_addr}:{store_port}"}  # bare: split at the last ':'
    if signing is not None:
        env[JOB_KEY] = signing.signer.key_hex
    return env


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count != 1 else ''}"


def _preflight(job: JobStore, plan: LaunchPlan, require_paths: tuple[str, ...], *,
               late: bool = False) -> None:
    """Compare this node with the others before any worker starts (see
    meshrun.runtime.preflight). ``late``: this node came back into a running job; it is
    compared with node 0's fingerprint alone (the others compared theirs at the start)."""
    from . import preflight

    started = time.monotonic()
    if plan.nnodes == 1:
        missing = [p for p in require_paths if not os.path.exists(p)]
        if missing:
            raise StartupError(f"required path {missing[0]} does not exist on this node",
                               code="preflight-mismatch", subject="--require-path",
                               hint="create it, or fix --require-path")
        return
    env = plan.env_dict()
    hcas = [t.lstrip("=").split(":")[0] for t in env.get("NCCL_IB_HCA", "").split(",") if t]
    mine = preflight.fingerprint(plan, require_paths=require_paths, ib_devices=hcas,
                                 interface=env.get("GLOO_SOCKET_IFNAME", "").lstrip("="))
    with store_errors(plan, job.port, "comparing the nodes (preflight)"):
        verdict = (preflight.against_node_0(job.calls, plan, mine) if late else
                   preflight.exchange(job.calls, plan, mine,
                                      timeout_s=min(plan.join_timeout, 120)))
    for warning in verdict.warnings:
        say(f"warning: {warning}")
    preflight.check(verdict)
    who = "this node and node 0 agree" if late else f"{plan.nnodes} nodes agree"
    say(f"preflight: {who} on code, versions, packages and devices "
        f"({time.monotonic() - started:.2f} s)")


def _explain(plan: LaunchPlan, ranks: tuple[int, ...], cause: protocol.Cause | None) -> None:
    """After a failure: meshrun diagnose over this node's logs, one sentence per cause
    (written to ``diagnosis.node<k>.json``; printed here unless the node is simulated:
    ``meshrun simulate`` prints one diagnosis of the whole run instead of one per node).
    ``cause``: another node's first cause, which ended the job: its diagnosis leads."""
    from ..reports.bundle import write_diagnosis

    sys.stdout.flush()
    sys.stderr.flush()
    lines = write_diagnosis(plan, ranks)
    if plan.simulated_workers:
        return
    if cause is not None:
        lines = [_cause_diagnosis(cause), *lines]
    for line in lines:
        print(f"meshrun: diagnosis: {line}", file=sys.stderr, flush=True)


def _lead_with_cause(dog: Any, event: Any, plan: LaunchPlan,
                     told: list[protocol.Cause]) -> None:
    """Another node's failure ended the job: this console leads with that node's first cause
    (its rank, how it failed, its error line), as that node offered it in the store."""
    if event.kind != EventKind.PEER_FAILED:
        return
    cause = dog.job_cause(wait=1.0)
    bundle.write_cause(plan, cause)
    if cause is not None and cause.node != plan.node_rank:
        told.append(cause)
        print(cause.lead("this node's workers were stopped"), file=sys.stderr, flush=True)


def _cause_diagnosis(cause: protocol.Cause) -> str:
    """The diagnosis of another node's first cause, from its error line, in diagnose's own
    sentence (``render_text``), said to be the first failure."""
    from dataclasses import replace

    from ..diagnose import diagnose_text, render_text

    found = diagnose_text(cause.line) if cause.line else []
    if not found:
        said = f": {cause.line}" if cause.line else ""
        return f"first failure: rank {cause.rank} on {cause.host}: {cause.how}{said}"
    return f"first failure: {render_text([replace(found[0], rank=cause.rank, host=cause.host)])}"


def _report_failure(plan: LaunchPlan, failed: Any, since: float,
                    ranks: tuple[int, ...], dog: Any, told: list[protocol.Cause]) -> int:
    """One block naming the first cause among this node's failed ranks (runtime/failures.py:
    a rank whose error names a cause before a victim's, then the moment each failed), its
    exit, its first error line (never a line that does not read like an error) and the
    others that failed.

    Across nodes: a node whose first failure is a cause of its own offers it as the job's
    (:meth:`Watchdog.offer_cause`); a node whose ranks only saw a peer fail (victims) waits
    a moment for that cause and leads with it: the console people open first (node 0's)
    names the rank whose own failure ended the job wherever it ran (the first node to offer
    one: a failure of its own, not a victim's, comes before the victims' by cause and
    effect; two independent failures at once are told apart by who reported first)."""
    def line_of(rank: int, failure: Any) -> str:
        return _first_error_line(failure, plan, rank)

    try:
        order = failures.ordered(failed.failures, plan.log_dir, since=since, ranks=ranks,
                                 stopping=failures.Stopping.since, fallback=line_of)
    except Exception:  # noqa: BLE001 - the report must come whatever the records hold:
        order = failures.ordered(failed.failures, plan.log_dir, since=float("inf"),
                                 fallback=line_of, victim=lambda line: False)  # torch's order
    first = order[0]
    seen = failed.failures.get(first.rank)
    code = first.exit
    how = (f"was killed by {seen.signal_name()}" if code < 0 and seen is not None
           else f"exited with code {code}")
    said = next((f for f in order if reads_like_error(f.line)), None)
    if not first.victim:
        line = redact_text(first.line) if reads_like_error(first.line) else ""
        dog.offer_cause(protocol.Cause(first.rank, plan.node_rank, socket.gethostname(), how,
                                       line[:300]))
        bundle.write_cause(plan, dog.job_cause())
    elif plan.seated_nodes > 1:
        cause = dog.job_cause(wait=_CAUSE_WAIT_S)
        bundle.write_cause(plan, cause)
        if cause is not None and cause.node != plan.node_rank:
            told.append(cause)
            print(cause.lead("this node's ranks failed after it"), file=sys.stderr, flush=True)
    print(f"meshrun: rank {first.rank} on node {plan.node_rank} ({socket.gethostname()}) "
          f"{how}", file=sys.stderr, flush=True)
    if said is not None:
        whose = f" (rank {said.rank})" if said.rank != first.rank else ""
        print(f"meshrun:   first error{whose}: {said.line[:300]}", file=sys.stderr, flush=True)
    others = sorted(f.rank for f in order[1:])
    if others:
        print(f"meshrun:   also failed: ranks {', '.join(map(str, others))}", file=sys.stderr)
    where = said.rank if said is not None else first.rank
    print(f"meshrun:   logs: {plan.log_dir}/rank{where}.log", file=sys.stderr, flush=True)
    crash = _crash_stack(plan.log_dir, first.rank, since) if code < 0 else None
    if crash:
        print(f"meshrun:   its Python stack when it died: {crash}", file=sys.stderr, flush=True)
    if code < 0:
        return 128 + (-code)
    return code if code > 0 else 1


_CAUSE_WAIT_S = 3.0  # a victim's node waits this long for the cause's node to offer it:
# both reach their reports together (the last node's workers to end ends every node's wait)


def _crash_stack(log_dir: str, rank: int, since: float) -> str | None:
    """``stacks/rank<r>.txt`` when the worker shim's faulthandler wrote a fatal signal's
    stack there (meshrun.worker.bootstrap) since ``since`` (the file is appended to, across
    attempts and reruns: its last 1 MB is read), else None."""
    path = os.path.join(log_dir, "stacks", f"rank{rank}.txt")
    try:
        if os.path.getmtime(path) < since:
            return None
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - (1 << 20)))
            return path if b"Fatal Python error" in handle.read() else None
    except OSError:
        return None


def _first_error_line(failure: Any, plan: LaunchPlan, rank: int) -> str:
    """The rank's error: torch's error file's message, else the last line of its log that
    reads like an error, else its last line."""
    message = failure.message
    if isinstance(message, dict):
        text = message.get("message", "")
        if text:
            return str(text).strip().splitlines()[-1]
    path = os.path.join(plan.log_dir, f"rank{rank}.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [line.rstrip() for line in handle if line.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if reads_like_error(line):
            return line[:300]
    return lines[-1][:300] if lines else ""
