"""``meshrun plan [--json] [flags] [-- SCRIPT ...]``: what ``run`` would do on this node, and
where every value came from. No side effects; never imports torch."""

from __future__ import annotations

import argparse
import json

from ..plan import describe
from ..runtime.checks import check_checkpoint_dir, check_command, check_worker_env
from ..runtime.planning import job_input, plan_here
from .base import Context, Verb
from .options import add_job_flags, add_node_flags, flags_from


class PlanVerb(Verb):
    name = "plan"
    help = "print what run would do here, and why (no side effects)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_node_flags(parser)
        parser.add_argument("--json", action="store_true", help="print the plan as JSON")
        add_job_flags(parser)

    def run(self, ctx: Context) -> int:
        a = ctx.args
        job, cmd = job_input(ctx.command(), recipe=a.recipe, config=a.config, sets=a.set,
                             checkpoint_dir=a.checkpoint_dir)
        plan = plan_here(ctx.env, flags_from(a), cmd, job, accelerate=a.accelerate,
                         deepspeed=a.deepspeed)
        if cmd is not None:  # what run would refuse, plan refuses (and makes nothing)
            check_command(cmd)
        check_worker_env(ctx.env)
        check_checkpoint_dir(plan)
        print(json.dumps(plan.to_json(), indent=2, sort_keys=True) if a.json
              else describe(plan))
        return 0


VERB = PlanVerb()
