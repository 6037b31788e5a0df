"""``meshrun simulate --nodes N [--nproc-per-node M] [flags] -- SCRIPT ...``: N node agents on
this machine over loopback (:mod:`meshrun.runtime.simulate`), each a ``meshrun run``."""

from __future__ import annotations

import argparse

from ..runtime.checks import check_checkpoint_path, check_command, check_worker_env
from ..runtime.planning import job_input
from ..runtime.supervision import options as supervision_options
from .base import Context, Verb
from .options import (
    JOB_OPTIONS,
    add_bench_flags,
    add_console_flags,
    add_job_flags,
    add_node_check_flag,
    add_node_flags,
    add_preflight_flags,
    add_token_flag,
    add_watch_flags,
    job_token,
    options_argv,
    restarts,
    shown_ranks,
)

# What every simulated node's `meshrun run` gets again, as the user gave it.
NODE_OPTIONS = ("no_preflight", "require_path", "accelerate", "verbose", "show_ranks",
                *(name for name, _ in supervision_options()), "node_check", "deepspeed",
                "token_file", *JOB_OPTIONS)


def request(ctx: Context, *, max_restarts: int):
    """The simulation the command line asks for."""
    from ..runtime.simulate import SimulateRequest

    a = ctx.args
    node_flags = options_argv(ctx.parser, a, NODE_OPTIONS)
    return SimulateRequest(nodes=a.nodes, nproc_per_node=a.nproc_per_node,
                           master_port=a.master_port, run_id=a.run_id, log_dir=a.log_dir,
                           join_timeout=a.join_timeout, spares=a.spares,
                           max_restarts=max_restarts,
                           node_flags=tuple(node_flags), recipe=a.recipe or None,
                           timestamps=a.timestamps)


class SimulateVerb(Verb):
    name = "simulate"
    help = "run N node agents on this machine over loopback"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--nodes", metavar="N", required=True, help="simulated nodes")
        add_node_flags(parser, only=("--nproc-per-node", "--master-port", "--run-id",
                                     "--log-dir", "--join-timeout", "--spares"))
        add_watch_flags(parser)
        add_preflight_flags(parser)
        add_node_check_flag(parser)
        add_console_flags(parser)
        add_job_flags(parser)
        add_token_flag(parser)
        parser.add_argument("--bench", action="store_true",
                            help="run the collective benchmark (as `meshrun bench`) instead of "
                                 "a script")
        parser.add_argument("--json", action="store_true",
                            help="with --bench: print results as JSON")
        add_bench_flags(parser)

    def run(self, ctx: Context) -> int:
        from ..runtime.simulate import simulate

        if ctx.args.bench:
            from .bench import run_bench

            return run_bench(ctx)
        a = ctx.args
        job, cmd = job_input(ctx.command(), recipe=a.recipe, config=a.config, sets=a.set,
                             checkpoint_dir=a.checkpoint_dir)
        cmd = ctx.require(cmd, self.name)
        check_command(cmd)
        check_worker_env(ctx.env)
        job_token(ctx.env, a)  # each node reads it again: a bad one must stop before any starts
        shown_ranks(a)  # each node reads it again: a bad one must stop before any starts
        if a.checkpoint_dir:  # one from --config or --set: each node's `run` checks it
            check_checkpoint_path(a.checkpoint_dir, "--checkpoint-dir")
        return simulate(ctx.env, cmd, request(ctx, max_restarts=restarts(a, ctx.env)), job=job)


VERB = SimulateVerb()
