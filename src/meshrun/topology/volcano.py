"""Volcano: ``VC_<TASK>_NUM`` and ``VC_<TASK>_HOSTS`` for every task of the job (svc plugin),
``VC_TASK_INDEX`` (env plugin) for this pod's index within its own task.

Node ranks run over the tasks in order: a task named ``master`` first, then the
others alphabetically (the pytorch plugin's order: master 0, worker i -> i + 1).
This pod's task is found from its hostname ``<job>-<task>-<index>``. When the
pytorch plugin is on, its ``WORLD_SIZE``/``RANK``/``MASTER_ADDR`` are explicit and
these derived values yield to them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .base import Claims, HostInfo, Sourced, parse_int

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("VC_TASK_INDEX", "VK_TASK_INDEX")
# VC_<TASK>_NUM, VC_<TASK>_HOSTS: one pair per task of the job
FAMILIES = ("VC_",)
# Read for context, but not the platform's own: never cleared from a simulated node.
# the pod's name <job>-<task>-<index>: Kubernetes sets it, and so do shells
CONTEXT = ("HOSTNAME",)

_NUM = re.compile(r"^VC_(?P<task>[A-Z0-9_]+)_NUM$")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    index_var = "VC_TASK_INDEX" if env.get("VC_TASK_INDEX") else "VK_TASK_INDEX"
    tasks = {m.group("task"): parse_int(value, name, minimum=0)
             for name, value in env.items() if (m := _NUM.match(name)) and value.strip()}
    if not tasks and not env.get(index_var):
        return None
    claims = Claims(platform="volcano")
    order = sorted(tasks, key=lambda t: (t != "MASTER", t))
    mine = _my_task(order, env.get("HOSTNAME", "") or host.hostname)
    if len(order) == 1 and mine is None:
        mine = order[0]
    if order:
        claims.nnodes = Sourced(sum(tasks.values()),
                                "sum of " + " + ".join(f"VC_{t}_NUM" for t in order), False)
        hosts = env.get(f"VC_{order[0]}_HOSTS", "").split(",")
        if hosts and hosts[0].strip():
            claims.master_addr = Sourced(hosts[0].strip(), f"first host of VC_{order[0]}_HOSTS",
                                         False)
    if env.get(index_var) and mine is not None:
        index = parse_int(env[index_var], index_var)
        offset = sum(tasks[t] for t in order[:order.index(mine)])
        claims.node_rank = Sourced(offset + index, f"{index_var} + {offset} nodes of earlier "
                                   f"tasks (task {mine.lower()})", False)
    return claims


def _my_task(order: list[str], hostname: str) -> str | None:
    for task in order:
        if re.search(rf"-{re.escape(task.lower().replace('_', '-'))}-\d+$", hostname):
            return task
    return None
