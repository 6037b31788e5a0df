"""``meshrun render TARGET [flags] [-o FILE] -- SCRIPT ...``: submission and config files from
the plan: ``k8s``, ``pytorchjob``, ``trainjob``, ``volcano``, ``slurm``, ``docker``
(docs/render.md) and ``accelerate``, ``deepspeed`` (docs/hf.md). The renderers are pure
(:mod:`meshrun.render`); this verb gathers their input and writes the file."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from ..errors import UsageError
from ..runtime.planning import job_input, plan_here, read_deepspeed
from ..topology import Flags
from .base import Context, Verb
from .options import (
    JOB_OPTIONS,
    RENDER_FLAGS,
    RENDER_LIST_FLAGS,
    add_job_flags,
    add_node_flags,
    dest_of,
    flags_from,
    options_argv,
)

# The node flags a submission file writes itself (or leaves to the platform), and those every
# node's `meshrun run` gets again (--join-timeout ...): as the topology's Flags declares them.
FILE_NODE_OPTIONS = tuple(f.name for f in fields(Flags) if f.metadata["render"] != "run")
RUN_NODE_OPTIONS = tuple(f.name for f in fields(Flags) if f.metadata["render"] == "run")


class RenderVerb(Verb):
    name = "render"
    help = ("write a config or submission file from the plan (accelerate, deepspeed, k8s, "
            "pytorchjob, trainjob, volcano, slurm, docker)")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", metavar="TARGET")
        add_node_flags(parser)
        add_job_flags(parser)
        parser.add_argument("-o", "--output", metavar="FILE",
                            help="write here instead of stdout (an existing file is kept "
                                 "unless --force)")
        parser.add_argument("--force", action="store_true", help="overwrite the -o file")
        for flag, text in RENDER_FLAGS.items():
            parser.add_argument(flag, dest=dest_of(flag), metavar="VALUE", help=text)
        parser.add_argument("--env", metavar="NAME=VALUE", action="append", default=[],
                            help="platform targets: a variable for every node (repeatable)")
        for flag, text in RENDER_LIST_FLAGS.items():
            parser.add_argument(flag, dest=dest_of(flag), metavar="VALUE", action="append",
                                default=[], help=text + " (repeatable)")
        parser.add_argument("--infiniband", action="store_true",
                            help="platform targets: InfiniBand devices, memlock, IPC_LOCK")
        parser.add_argument("--no-token", action="store_true",
                            help="platform targets: no job token (by default a multi-node "
                                 "file gives the job one: a Kubernetes Secret drawn now, a "
                                 "secret the SLURM script draws, the docker script's "
                                 "MESHRUN_JOB_TOKEN; docs/security.md)")

    def run(self, ctx: Context) -> int:
        from .. import render
        from ..render import spec as platform

        a = ctx.args
        secret = ""   # the Secret's name when the file holds a job token drawn now
        if a.target in render.TARGETS:
            text = self._render_hf(ctx)
        elif a.target in platform.PLATFORM_TARGETS:
            text, secret = self._render_platform(ctx)
        else:
            known = sorted({*render.TARGETS, *platform.PLATFORM_TARGETS})
            raise UsageError(f"unknown render target {a.target!r}", subject="meshrun render",
                             hint=f"use one of: {', '.join(known)}", code="unknown-render-target")
        text = text if text.endswith("\n") else text + "\n"
        if secret:
            print(f"meshrun: note: the file holds a job token drawn now (Secret "
                  f"{secret}): keep it as you keep a password"
                  + ("; written readable by you only" if a.output else ""), file=sys.stderr)
        if not a.output:
            sys.stdout.write(text)
            return 0
        from ..outfile import write_output

        write_output(a.output, text, force=a.force, private=bool(secret))
        print(f"meshrun: wrote {a.output}", file=sys.stderr)
        return 0

    def _run_flags(self, ctx: Context) -> list[str]:
        """The job-config flags as every node's ``meshrun run`` (and a regenerate line)
        gets them again."""
        a = ctx.args
        flags = options_argv(ctx.parser, a, (*RUN_NODE_OPTIONS, *JOB_OPTIONS))
        if a.recipe:
            if ctx.words:
                raise UsageError("--recipe and a command were both given", subject="--recipe",
                                 hint="give either --recipe NAME or -- SCRIPT, not both",
                                 code="recipe-and-command")
            flags += ["--recipe", a.recipe]
        return flags

    def _render_platform(self, ctx: Context) -> tuple[str, str]:
        """The file, and the name of the Secret in it that holds a job token ("": none)."""
        from ..render import spec as platform

        a = ctx.args
        if a.deepspeed:
            raise UsageError(f"--deepspeed is for the accelerate target, not {a.target}",
                             subject="--deepspeed", hint="drop --deepspeed",
                             code="deepspeed-not-for-target")
        values = {name: getattr(a, name, None)
                  for name in (*FILE_NODE_OPTIONS, *(dest_of(f) for f in RENDER_FLAGS),
                               *(dest_of(f) for f in RENDER_LIST_FLAGS))}
        from ..signing import new_token

        spec = platform.spec_from_flags(a.target, ctx.words, module=ctx.module,
                                        env=tuple(a.env), infiniband=a.infiniband,
                                        run_flags=tuple(self._run_flags(ctx)),
                                        job_token="" if a.no_token else new_token(), **values)
        for note in spec.notes:
            print(f"meshrun: note: {note}", file=sys.stderr)
        holds = spec.signed and spec.target in platform.KUBE_TARGETS  # a Secret in the file
        return platform.render_platform(spec), spec.token_secret if holds else ""

    def _render_hf(self, ctx: Context) -> str:
        from .. import render

        a = ctx.args
        for flag in RENDER_LIST_FLAGS:
            if getattr(a, dest_of(flag)):
                raise UsageError(f"{flag} is for submission files, not {a.target}",
                                 subject=flag, hint=f"drop {flag}",
                                 code="render-flag-not-applicable")
        job, cmd = job_input(ctx.command(), recipe=a.recipe, config=a.config, sets=a.set,
                             checkpoint_dir=a.checkpoint_dir)
        plan = plan_here(ctx.env, flags_from(a), cmd, job)
        extra = options_argv(ctx.parser, a, JOB_OPTIONS) + (["--recipe", a.recipe]
                                                            if a.recipe else [])
        options = {}
        if a.deepspeed:
            if a.target != "accelerate":
                raise UsageError("--deepspeed is for the accelerate target",
                                 subject="--deepspeed",
                                 hint="meshrun render accelerate --deepspeed ds.json",
                                 code="deepspeed-not-for-target")
            read_deepspeed(a.deepspeed, plan, plan.job)
            options["deepspeed_config_file"] = a.deepspeed
            extra += ["--deepspeed", a.deepspeed]
        return render.render(a.target, plan, plan.job,
                             command=render.regenerate_command(a.target, plan, tuple(extra)),
                             **options)


VERB = RenderVerb()
