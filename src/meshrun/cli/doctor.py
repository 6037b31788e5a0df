"""``meshrun doctor [--json] [--all-nodes] [flags]``: check this node (torch, GPUs, disk, the
master's name and port, the NCCL/gloo environment lint); with ``--all-nodes``, the cross-node
preflight with the other nodes' doctors. Exit 3 on errors."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import EXIT_STARTUP
from ..runtime.planning import plan_here
from .base import Context, Verb
from .options import add_node_flags, flags_from


class DoctorVerb(Verb):
    name = "doctor"
    help = "check this node (and, with --all-nodes, every node)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_node_flags(parser)
        parser.add_argument("--json", action="store_true", help="print the findings as JSON")
        parser.add_argument("--all-nodes", action="store_true",
                            help="also run the cross-node preflight with the other nodes' "
                                 "doctors")
        parser.add_argument("--require-path", metavar="PATH", action="append", default=[],
                            help="with --all-nodes: PATH must exist on every node (repeatable)")
        parser.add_argument("--checkpoint-dir", metavar="DIR", default="checkpoints",
                            help="where checkpoints will go, for the free-space check")

    def run(self, ctx: Context) -> int:
        from ..runtime import doctor

        a = ctx.args
        plan = plan_here(ctx.env, flags_from(a))
        checks = doctor.local_checks(plan, dict(ctx.env), checkpoint_dir=a.checkpoint_dir)
        if a.all_nodes and plan.nnodes > 1:
            checks += _all_nodes(plan, a)
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


def _all_nodes(plan, args: argparse.Namespace) -> list:
    from ..runtime import doctor, preflight
    from ..runtime.store import join, open_store, store_errors

    real_stdout = sys.stdout
    if args.json:
        sys.stdout = sys.stderr  # progress lines ("waiting for nodes") stay off the JSON
    try:
        job = open_store(plan)
        with store_errors(plan, job.port, "checking the nodes (doctor --all-nodes)"):
            join(job, plan)
            mine = preflight.fingerprint(plan, require_paths=tuple(args.require_path))
            verdict = preflight.exchange(job.store, plan, mine,
                                         timeout_s=min(plan.join_timeout, 120))
    finally:
        sys.stdout = real_stdout
    return doctor.from_preflight(verdict)


VERB = DoctorVerb()
