"""``meshrun simulate``: N node agents on this machine, over loopback.

Each simulated node is a separate ``meshrun run`` process given
``--nnodes N --node-rank i --master-addr 127.0.0.1 --master-port P --run-id R``
and an environment cleared of platform variables, so it does exactly what one
machine of a real job would: its own plan, banner, store connection, elastic
agent, workers and ``node<i>.log``. Their output is relayed here, rank lines as
they are and everything else behind ``[node i]`` (the banner rows of node 0 only).

Exit status: the first non-zero status by node rank, else 0.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import one_line
from ..plan import Command


def node_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables through which a platform tells a node its place (the
    detectors' own declarations, :func:`meshrun.topology.platform_variable`). ``MESHRUN_*``
    variables stay: the flags each node gets (``--nnodes``, ``--node-rank``, ...) beat them,
    and the rest (``MESHRUN_JOB_CONFIG``, ``MESHRUN_BACKEND``, ``MESHRUN_LOG_DIR``...) mean
    the same on every node."""
    from ..topology import platform_variable

    return {k: v for k, v in env.items() if not platform_variable(k)}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class SimulateRequest:
    """What to simulate, as the CLI read it: raw flag values (checked here as node 0 will
    check them) and ``node_flags``, the options every node's ``meshrun run`` gets again."""

    nodes: str
    nproc_per_node: str | None = None
    master_port: str | None = None
    run_id: str | None = None
    log_dir: str | None = None
    join_timeout: str | None = None
    spares: str | None = None
    max_restarts: int = 0
    node_flags: tuple[str, ...] = ()
    recipe: str | None = None   # --recipe: every node gets it as the user gave it
    timestamps: bool = False    # --timestamps: the relay stamps each node's meshrun lines


def node_argv(request: SimulateRequest, cmd: Command, nodes: int, rank: int, port: int,
              run_id: str, workers: int) -> list[str]:
    """``meshrun run`` for simulated node ``rank``; ``workers``: all nodes' workers."""
    # -u: each node's lines reach the relay as it writes them, stdout and stderr in their
    # order (block-buffered stdout arrived in bursts: lines out of order across nodes)
    argv = [sys.executable, "-u", "-m", "meshrun", "run", "--nnodes", str(nodes), "--node-rank",
            str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
            "--run-id", run_id, "--max-restarts", str(request.max_restarts),
            "--simulated-workers", str(workers)]
    for flag, value in (("--nproc-per-node", request.nproc_per_node),
                        ("--log-dir", request.log_dir), ("--join-timeout", request.join_timeout),
                        ("--spares", request.spares)):
        if value is not None:
            argv += [flag, str(value)]
    argv += request.node_flags
    if request.recipe:  # the node resolves the recipe's module itself, as `run` would
        return argv + ["--recipe", request.recipe]
    if cmd.module:
        return argv + ["-m", cmd.target, *cmd.args]
    return argv + ["--", cmd.target, *cmd.args]


def simulate(env: Mapping[str, str], cmd: Command, request: SimulateRequest, *,
             job=None) -> int:
    """Start the simulated nodes, relay their output, and return the job's exit status."""
    from ..facts import host as facts
    from ..plan import make_plan, threads_for
    from ..topology import Flags
    from ..topology.base import parse_int

    nodes = parse_int(request.nodes, "--nodes", minimum=1)
    port = int(request.master_port) if request.master_port else free_port()
    run_id = request.run_id or f"sim-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    env = node_env(env)
    # Validate exactly as node 0 will, before anything starts (bad input -> exit 2 here).
    host = facts.collect(env)
    flags = Flags(nnodes=str(nodes), node_rank="0", master_addr="127.0.0.1",
                  master_port=str(port), run_id=run_id, nproc_per_node=request.nproc_per_node,
                  log_dir=request.log_dir, join_timeout=request.join_timeout,
                  spares=request.spares)
    nproc = make_plan(env, flags, host, cmd, job, simulated_workers=nodes).nproc_per_node
    workers = nodes * nproc
    plan = make_plan(env, flags, host, cmd, job, simulated_workers=workers)  # node 0's
    threads = threads_for(env, plan.nproc_per_node, host.cpus, workers, nodes)
    share = (f"; {workers} workers share {host.cpus} CPUs: OMP_NUM_THREADS={threads.value}"
             if threads is not None else "")
    print(f"meshrun: simulating {nodes} nodes on this machine (store 127.0.0.1:{port}, "
          f"run id {run_id}{share})", flush=True)
    started = time.time()   # a rank's failure record older than this is another run's
    procs = [subprocess.Popen(node_argv(request, cmd, nodes, rank, port, run_id, workers),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, bufsize=1, start_new_session=True,
                              preexec_fn=_term_with_parent)
             for rank in range(nodes)]
    lock = threading.Lock()
    relays = [threading.Thread(target=_relay, args=(p, rank, lock, request.timestamps),
                               daemon=True)
              for rank, p in enumerate(procs)]
    for thread in relays:
        thread.start()
    interrupted = False
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        interrupted = True
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)
        codes = [p.wait() for p in procs]
    for thread in relays:
        thread.join(timeout=5)
    failed = [(rank, code) for rank, code in enumerate(codes) if code != 0]
    if failed and not interrupted:
        _explain(plan)
    if failed:
        # the node whose rank failed first (each rank records the moment it failed; a rank
        # that failed because another did comes after any that did not), else the first
        from .failures import first_recorded, job_cause

        try:
            # the job's first cause as the nodes agreed on it in the store (a SIGKILLed rank
            # leaves no record of its own), else the ranks' own failure records
            cause = None if interrupted else (job_cause(plan.log_dir, since=started)
                                              or first_recorded(plan.log_dir, since=started))
        except Exception:  # noqa: BLE001 - the last line must come whatever the records hold
            cause = None
        first = next((f for f in failed if cause is not None and f[0] == cause.get("node")),
                     failed[0])
        rank, code = first
        if code < 0:  # a node agent killed by a signal: the shell's 128 + N, not 256 - N
            code = 128 - code
        others = [str(r) for r, _ in failed if r != rank]
        said = ""
        if cause is not None and cause.get("node") == rank:
            how = str(cause.get("how") or "")
            said = f"; rank {cause['rank']} failed first" + (   # a signal says more than a code
                f" ({how})" if how.startswith("was killed") else "") + (
                f": {one_line(cause['line'][:300])}" if cause.get("line") else "")
        print(f"meshrun: simulated node {rank} exited with {code}{said}"
              + (f" (also failed: nodes {', '.join(others)})" if others else ""),
              file=sys.stderr, flush=True)
        return code
    print(f"meshrun: all {nodes} simulated nodes finished successfully", flush=True)
    return 0


def _explain(plan) -> None:
    """One diagnosis of the whole run (every simulated node's logs share one folder), instead
    of one per node: each node agent wrote its own ``diagnosis.node<k>.json`` but printed
    nothing."""
    from ..diagnose import diagnose_files, render_text

    try:
        found = diagnose_files([plan.log_dir], job=plan.job, device=plan.device)
    except Exception as exc:  # noqa: BLE001 - a diagnosis must never hide the failure itself
        print(f"meshrun: diagnosis failed: {str(exc)[:200]}", file=sys.stderr, flush=True)
        return
    for line in render_text(found).splitlines():
        if line.strip():
            print(f"meshrun: diagnosis: {line}", file=sys.stderr, flush=True)


def _term_with_parent() -> None:
    """In each node agent: SIGTERM when simulate dies (even by SIGKILL), so the agent stops
    its workers instead of running on, orphaned."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _relay(proc: subprocess.Popen, rank: int, lock: threading.Lock,
           timestamps: bool = False) -> None:
    """One node's console on this one, its meshrun lines marked ``[node k]`` (with
    ``timestamps``: the time first, as a node's own ``--timestamps`` would put it)."""
    from .logs import stamp

    assert proc.stdout is not None
    banner = rank > 0  # node 0 shows the banner; every node's log keeps its own
    for line in proc.stdout:
        if banner and (line.startswith(("meshrun: ", "[rank")) or "Traceback" in line):
            banner = False
        if banner or (rank > 0 and line.startswith("  ")):
            continue
        text = line if line.startswith("[rank") else f"[node {rank}] {line}"
        if timestamps and not line.startswith("[rank"):
            text = f"{stamp()} {text}"
        with lock:
            sys.stdout.write(text)
            sys.stdout.flush()
