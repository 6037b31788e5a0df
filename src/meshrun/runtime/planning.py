"""Planning on this host: read the job's input (its TOML file), collect the facts, plan, look
at the network towards the master, plan again. The planner itself (:mod:`meshrun.plan`) is
pure; this is the one place that gathers what it is handed, for every verb that plans.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from ..plan import Command, JobInput, LaunchPlan, make_plan
from ..topology import Flags


def plan_here(env: Mapping[str, str], flags: Flags, cmd: Command | None = None,
              job: JobInput | None = None, *, simulated_workers: int = 0,
              accelerate: bool = False, deepspeed: str | None = None) -> LaunchPlan:
    """This node's plan from this host's facts.

    Two passes: the first validates the input and finds the master address; the network
    facts (the interface that routes to the master, RDMA ports) need it, and the second
    pass plans with them. ``accelerate``/``deepspeed``: add the variables an accelerate or
    HF Trainer script needs (docs/hf.md), after checking the DeepSpeed file against the plan.
    """
    from ..facts import collect
    from ..facts.net import collect as collect_net

    env = dict(env)
    host = collect(env)
    first = make_plan(env, flags, host, cmd, job, simulated_workers=simulated_workers)
    net = collect_net(first.master_addr, first.master_port, env=env)
    plan = make_plan(env, flags, replace(host, net=net), cmd, job,
                     simulated_workers=simulated_workers)
    if accelerate or deepspeed:
        from ..render.accelerate import hf_worker_env

        path = None
        if deepspeed:
            read_deepspeed(deepspeed, plan, plan.job)
            path = os.path.abspath(deepspeed)
        plan = replace(plan, env=plan.env + tuple(hf_worker_env(plan, plan.job, path, env=env)))
    return plan


def read_deepspeed(path: str, plan: LaunchPlan, job: Any) -> None:
    """Read a DeepSpeed JSON the user brings and check it against the plan and job config."""
    from ..render.deepspeed import check_deepspeed_config

    try:
        with open(path) as handle:
            data = json.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read the DeepSpeed config {path}: {exc.strerror}",
                         subject="--deepspeed", hint="check the path",
                         code="deepspeed-config-unreadable") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})",
                         subject="--deepspeed", hint="fix the file, or write one with "
                         "meshrun render deepspeed -o ds.json",
                         code="deepspeed-config-unreadable") from None
    job_dict = job.to_dict() if hasattr(job, "to_dict") else job
    check_deepspeed_config(data, plan, job_dict, source=f"--deepspeed {path}")


def job_input(cmd: Command | None, *, recipe: str | None = None, config: str | None = None,
              sets: list[str] | tuple[str, ...] = (), checkpoint_dir: str | None = None
              ) -> tuple[JobInput | None, Command | None]:
    """``--recipe`` / ``--config`` / ``--set`` / ``--checkpoint-dir`` (the config file read
    here) as the planner's :class:`~meshrun.plan.JobInput`.

    Returns (JobInput or None, command): a recipe (``--recipe``, the config's ``recipe``
    key, or ``-m meshrun.recipes.<x>``) becomes the workers' command."""
    if not (recipe or config or sets or checkpoint_dir):
        if cmd is None or not cmd.module or not cmd.target.startswith("meshrun.recipes."):
            return None, cmd  # a plain script: no job config (and no import of it)
    from .. import job as jobcfg
    from .. import recipes

    if not (recipe or config or sets or checkpoint_dir):
        by_module = [r for r in recipes.RECIPES.values() if cmd.target == r.module]
        if not by_module:
            return None, cmd
        return JobInput(recipe_defaults=by_module[0].defaults), cmd
    file_data = jobcfg.load_file(config) if config else None
    overrides = jobcfg.parse_sets(list(sets)) if sets else {}
    if checkpoint_dir:
        overrides.setdefault("checkpoint", {})["dir"] = checkpoint_dir
    if recipe:
        if cmd is not None:
            raise UsageError(f"--recipe {recipe} and a command ({cmd.display()}) were both "
                             "given", subject="--recipe",
                             hint="give either --recipe NAME or -- SCRIPT, not both",
                             code="recipe-and-command")
        overrides["recipe"] = recipe
    name = jobcfg.recipe_name(file_data, overrides)
    if name is None and cmd is not None and cmd.module:
        name = next((r.name for r in recipes.RECIPES.values() if r.module == cmd.target), None)
    chosen = recipes.get(name) if name else None
    if chosen is not None and cmd is None:
        cmd = Command(chosen.module, module=True)
    flags = {key: flag for key, flag, given in (("recipe", "--recipe", recipe),
                                                 ("checkpoint.dir", "--checkpoint-dir",
                                                  checkpoint_dir)) if given}
    return JobInput(recipe_defaults=chosen.defaults if chosen else None, file_data=file_data,
                    sets=overrides or None, config_path=config, flags=flags or None), cmd
