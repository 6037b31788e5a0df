"""``meshrun doctor [--json] [--all-nodes] [flags]``: check this node (torch, GPUs, disk, the
master's name and port, the NCCL/gloo environment lint); with ``--all-nodes``, the cross-node
preflight with the other nodes' doctors, then the node check (:mod:`meshrun.worker.nodecheck`:
compute, all-reduce and transfers between nodes; a slow node is an error). Exit 3 on
errors."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from ..errors import EXIT_STARTUP
from ..runtime.planning import plan_here
from .base import Context, Verb
from .options import add_node_flags, add_token_flag, flags_from, job_token


class DoctorVerb(Verb):
    name = "doctor"
    help = "check this node (and, with --all-nodes, every node)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_node_flags(parser)
        parser.add_argument("--json", action="store_true", help="print the findings as JSON")
        parser.add_argument("--all-nodes", action="store_true",
                            help="also run the cross-node preflight and the node check "
                                 "(compute, all-reduce, transfers) with the other nodes' "
                                 "doctors")
        parser.add_argument("--require-path", metavar="PATH", action="append", default=[],
                            help="with --all-nodes: PATH must exist on every node (repeatable)")
        parser.add_argument("--checkpoint-dir", metavar="DIR", default="checkpoints",
                            help="where checkpoints will go, for the free-space check")
        add_token_flag(parser)

    def run(self, ctx: Context) -> int:
        from ..runtime import doctor

        a = ctx.args
        token = job_token(ctx.env, a)
        plan = plan_here(ctx.env, flags_from(a))
        checks = doctor.local_checks(plan, dict(ctx.env), checkpoint_dir=a.checkpoint_dir,
                                     token=token)
        if a.all_nodes and plan.nnodes > 1:
            checks += _all_nodes(plan, a, token)
            if not any(c.severity == "error" for c in checks):
                checks += _node_check(plan, ctx)
        order = {"error": 0, "warning": 1, "info": 2}
        checks.sort(key=lambda c: order.get(c.severity, 3))
        if a.json:
            print(json.dumps({"findings": [c.to_json() for c in checks]}, indent=2))
        else:
            for check in checks:
                print(check.line())
            errors = sum(c.severity == "error" for c in checks)
            warnings = sum(c.severity == "warning" for c in checks)
            print(f"meshrun doctor: {errors} error(s), {warnings} warning(s)")
        return EXIT_STARTUP if any(c.severity == "error" for c in checks) else 0


def _all_nodes(plan, args: argparse.Namespace, token: str | None) -> list:
    from ..runtime import doctor, preflight
    from ..runtime.store import join, open_store, store_errors
    from ..signing import wrap

    real_stdout = sys.stdout
    if args.json:
        sys.stdout = sys.stderr  # progress lines ("waiting for nodes") stay off the JSON
    job = None
    try:
        job = open_store(plan, token=token)
        with store_errors(plan, job.port, "checking the nodes (doctor --all-nodes)"):
            join(job, plan)
            mine = preflight.fingerprint(plan, require_paths=tuple(args.require_path))
            verdict = preflight.exchange(wrap(job.store, job.signing), plan, mine,
                                         timeout_s=min(plan.join_timeout, 120))
    finally:
        sys.stdout = real_stdout
        if job is not None:
            job.close_calls()
    return doctor.from_preflight(verdict)


def _wait_until_closed(host: str, port: int, seconds: float = 10.0) -> bool:
    """Nodes 1..N-1: until node 0's doctor has closed the store of the exchange (the node
    check's run opens a new one on the same port; joining the old one would find another
    run's id)."""
    import socket
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False


_FIX = {
    "compute": "look at that node: other processes on it, its CPU/GPU clocks, temperature and "
               "power limits (nvidia-smi -q -d CLOCK,PERFORMANCE); or leave it out of the job",
    "link": "check that node's network: meshrun bench, its NIC's link speed (ethtool, ibstat), "
            "NCCL_SOCKET_IFNAME / NCCL_IB_HCA; or leave it out of the job",
    "transport": "check NCCL_IB_DISABLE and NCCL_IB_HCA on that node and its InfiniBand "
                 "drivers (ibstat); meshrun bench shows the transport",
}


def _node_check(plan, ctx: Context) -> list:
    """Every node's doctor starts a `meshrun run` of the node check's workers (its own run
    id, ``<run-id>-nodecheck``, no preflight: it was just done) and reads this node's
    ``nodecheck.node<k>.json``."""
    from ..errors import Finding
    from .bench import nccl_debug_env
    from .options import NODE_FLAGS, dest_of, options_argv

    a = ctx.args
    run_id = f"{plan.run_id}-nodecheck"
    log_root = os.path.dirname(os.path.normpath(plan.log_dir)) or "."
    dests = [dest_of(f) for f in NODE_FLAGS if dest_of(f) not in ("run_id", "log_dir")]
    dests.append("token_file")  # MESHRUN_JOB_TOKEN travels in the environment
    argv = [sys.executable, "-m", "meshrun", "run", *options_argv(ctx.parser, a, dests),
            "--run-id", run_id, "--log-dir", log_root, "--no-preflight", "--hang-timeout", "0",
            "--slow-window", "0", "-m", "meshrun.worker.nodecheck"]
    env = {**ctx.env, **{v.name: v.value for v in nccl_debug_env(plan, ctx.env)}}
    folder = os.path.join(log_root, run_id)
    # an earlier check's verdict is kept aside by the run's bundle (write_start)
    result = os.path.join(folder, f"nodecheck.node{plan.node_rank}.json")
    print("meshrun doctor: running the node check on every node ...", file=sys.stderr,
          flush=True)
    if plan.node_rank != 0:
        if not _wait_until_closed(plan.master_addr, plan.master_port):
            return [Finding("node-check-failed", "error", "nodes",
                            f"node 0's store at {plan.master_addr}:{plan.master_port} still "
                            "answers 10 s after the preflight: the node check cannot start "
                            "its own run there",
                            "run meshrun doctor --all-nodes on every node at once, and "
                            "nothing else on that port")]
    else:
        import gc

        gc.collect()  # the exchange's store, unreferenced by now, closed before a new one
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=plan.join_timeout + 180)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = str(exc.stdout or "") + str(exc.stderr or ""), None
    try:
        with open(result, encoding="utf-8") as handle:
            verdict = json.load(handle)
    except (OSError, ValueError):
        tail = " | ".join(line for line in output.splitlines()[-3:] if line.strip())
        return [Finding("node-check-failed", "error", "nodes",
                        f"the node check did not finish (exit {code}): {tail[-300:]}",
                        f"see {folder}/node{plan.node_rank}.log; the other nodes must run "
                        "meshrun doctor --all-nodes too")]
    out = [Finding("slow-node", "error", f"node {f['node']}", f["line"].removeprefix(
        "meshrun: node check: "), _FIX.get(f["what"], "")) for f in verdict["findings"]]
    out.append(Finding("node-check", "info", "nodes",
                       verdict["summary"].removeprefix("meshrun: node check: ")))
    return out


VERB = DoctorVerb()
