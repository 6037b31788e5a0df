"""``meshrun run [flags] -- SCRIPT [ARGS...]`` (or ``-m MODULE``): plan, join the other nodes,
launch this node's workers through torch's elastic agent (:mod:`meshrun.runtime.launch`)."""

from __future__ import annotations

import argparse

from ..runtime.checks import (
    check_checkpoint_dir,
    check_command,
    check_log_dir,
    check_worker_env,
)
from ..runtime.planning import job_input, plan_here
from .base import Context, Verb
from .options import (
    add_console_flags,
    add_job_flags,
    add_node_check_flag,
    add_node_flags,
    add_preflight_flags,
    add_token_flag,
    add_watch_flags,
    flags_from,
    job_token,
    restarts,
    shown_ranks,
    supervision,
)


def simulated_workers(args: argparse.Namespace) -> int:
    """``--simulated-workers N`` (hidden: ``meshrun simulate`` gives it its node agents)."""
    raw = getattr(args, "simulated_workers", None)
    if raw is None:
        return 0
    from ..topology.base import parse_int

    return parse_int(raw, "--simulated-workers", minimum=1)


def with_node_check(plan, env):
    """The workers run the node check (:mod:`meshrun.worker.nodecheck`) before the script;
    on GPUs NCCL logs to files, so that the check can tell each node's transport."""
    from dataclasses import replace

    from ..plan import EnvVar
    from .bench import nccl_debug_env

    on = EnvVar("MESHRUN_NODE_CHECK", "1", "--node-check: the workers check the nodes first")
    return replace(plan, env=plan.env + (on,) + nccl_debug_env(plan, env))


class RunVerb(Verb):
    name = "run"
    help = "launch the workers of this node"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_node_flags(parser)
        add_watch_flags(parser)
        # `meshrun simulate` tells its node agents how many workers share this host (hidden).
        parser.add_argument("--simulated-workers", metavar="N", default=None,
                            help=argparse.SUPPRESS)
        add_preflight_flags(parser)
        add_node_check_flag(parser)
        add_console_flags(parser)
        add_job_flags(parser)
        add_token_flag(parser)

    def run(self, ctx: Context) -> int:
        from ..runtime.launch import run

        a = ctx.args
        token = job_token(ctx.env, a)
        job, cmd = job_input(ctx.command(), recipe=a.recipe, config=a.config, sets=a.set,
                             checkpoint_dir=a.checkpoint_dir)
        cmd = ctx.require(cmd, self.name)
        plan = plan_here(ctx.env, flags_from(a), cmd, job, simulated_workers=simulated_workers(a),
                         accelerate=a.accelerate, deepspeed=a.deepspeed)
        if a.node_check:
            plan = with_node_check(plan, ctx.env)
        check_command(cmd)
        check_worker_env(ctx.env)
        check_checkpoint_dir(plan)
        check_log_dir(plan.log_dir)
        shown = shown_ranks(a)
        code = run(plan, env=ctx.env, max_restarts=restarts(a, ctx.env),
                   preflight=not a.no_preflight, require_paths=tuple(a.require_path),
                   supervision=supervision(a, ctx.env), verbose=a.verbose, shown=shown,
                   timestamps=a.timestamps, token=token)
        if plan.node_rank == 0:
            _write_page(plan.log_dir)
        return code


def _write_page(log_dir: str) -> None:
    """Node 0 leaves the run's page in the run folder when the job ends (report.html: what
    ``meshrun report --html`` writes; the other nodes' last lines may come after it).
    Best effort: a page that cannot be written never changes the run's outcome."""
    try:
        from ..reports.page import write

        write(log_dir)
    except Exception:  # noqa: BLE001, S110 - a report page never fails a run
        pass


VERB = RunVerb()
