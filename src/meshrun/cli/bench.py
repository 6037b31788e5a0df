"""``meshrun bench [--json] [flags]`` and ``meshrun simulate ... --bench``: all-reduce and
all-gather bandwidth across the job's nodes, the workers running
:mod:`meshrun.worker.collbench` (nccl-tests' definitions of algbw and busbw)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from ..errors import UsageError
from ..plan import Command, EnvVar, LaunchPlan
from ..runtime.planning import plan_here
from .base import Context, Verb
from .options import add_bench_flags, add_node_flags, add_preflight_flags, flags_from


def nccl_debug_env(plan: LaunchPlan, env: dict | os._Environ) -> tuple[EnvVar, ...]:
    """NCCL's INFO log to files on GPU runs, so collbench can tell which transport carried the
    traffic (unless the user set NCCL_DEBUG)."""
    if plan.device != "cuda" or "NCCL_DEBUG" in env:
        return ()
    why = "meshrun bench reads NCCL's log to tell which transport carried the traffic"
    out = [EnvVar("NCCL_DEBUG", "INFO", why)]
    if "NCCL_DEBUG_SUBSYS" not in env:
        out.append(EnvVar("NCCL_DEBUG_SUBSYS", "INIT,NET", why))
    if "NCCL_DEBUG_FILE" not in env:
        out.append(EnvVar("NCCL_DEBUG_FILE",
                          os.path.join(os.path.abspath(plan.log_dir), "nccl.%h.%p.log"), why))
    return tuple(out)


def run_bench(ctx: Context) -> int:
    from ..topology.base import parse_int
    from ..worker.collbench import sizes_between

    a = ctx.args
    cmd = ctx.command()
    if cmd is not None:
        raise UsageError(f"'meshrun {a.verb}' with --bench runs its own workers, not "
                         f"{cmd.display()}", subject="--bench",
                         hint="drop the script, or drop --bench", code="bench-with-command")
    try:
        sizes_between(a.sizes)
    except ValueError as exc:
        raise UsageError(str(exc), subject="--sizes", hint="e.g. --sizes 1K:1G",
                         code="bad-sizes") from None
    iters = parse_int(a.iters, "--iters", minimum=1)
    bench_cmd = Command("meshrun.worker.collbench", ("--sizes", a.sizes, "--iters", str(iters)),
                        module=True)
    real_stdout = sys.stdout
    if a.json:  # everything but the JSON goes to stderr
        sys.stdout = sys.stderr
    try:
        if a.verb == "simulate":
            from ..runtime.simulate import simulate
            from .simulate import request

            a.run_id = a.run_id or f"bench-{os.getpid()}"
            log_dir = os.path.join(a.log_dir or "logs", a.run_id)
            code = simulate(ctx.env, bench_cmd, request(ctx, max_restarts=0))
        else:
            from ..runtime.launch import run

            plan = plan_here(ctx.env, flags_from(a), bench_cmd)
            plan = replace(plan, env=plan.env + nccl_debug_env(plan, ctx.env))
            log_dir = plan.log_dir
            code = run(plan, env=ctx.env, preflight=not a.no_preflight,
                       require_paths=tuple(a.require_path))
    finally:
        sys.stdout = real_stdout
    if code == 0 and a.json:
        try:
            with open(os.path.join(log_dir, "bench.json")) as handle:
                print(handle.read())
        except OSError:
            pass  # not node 0: node 0 prints and keeps the results
    return code


class BenchVerb(Verb):
    name = "bench"
    help = "all-reduce / all-gather bandwidth across the job's nodes"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_node_flags(parser)
        add_bench_flags(parser)
        parser.add_argument("--json", action="store_true", help="print the results as JSON")
        add_preflight_flags(parser)

    def run(self, ctx: Context) -> int:
        return run_bench(ctx)


VERB = BenchVerb()
