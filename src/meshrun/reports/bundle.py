"""The log bundle: one folder per run to attach to a bug report.

``<log-dir>/<run-id>/`` holds, per node ``k``:

==========================  =====================================================
``node<k>.log``             the launcher's log (banner, progress, failures)
``rank<r>.log``             each rank's output (and ``raw/`` torch's own files)
``plan.node<k>.json``       the plan and topology, with where each value came from
``env.node<k>.json``        the launcher's environment, secrets redacted
``diagnosis.node<k>.json``  when the run failed: ``meshrun diagnose``'s JSON
``stacks/rank<r>.txt``      when the job hung: every thread's Python stack
``events.node<k>.jsonl``    the node's timeline, straggler notices and status lines
``node_steps.json``         node 0: each node's mean step and compute time
``nodecheck.node<k>.json``  with ``--node-check``: the node check's verdict
``cause.node<k>.json``      when the job failed: its first cause (rank, node, error)
``earlier/<n>/``            an earlier run with this run id: the same files, as it left them
==========================  =====================================================

Tokens, keys, passwords and credentials never reach these files: the env dump
and the plan go through :mod:`meshrun.redact`, and the banner shows the
command redacted.

Nothing is overwritten: a rerun with the same run id (the default for an identical
rerun: the id is a hash) first moves this node's files of the earlier run, these among
them, into ``earlier/<n>/`` (:func:`meshrun.runtime.rundir.set_aside`), so the plain names
are always this run's: a rerun that succeeds never leaves the earlier failure's diagnosis
under the plain name. A file still in the way (it could not be moved) is renamed to
``<name>.<its mtime>.json`` before it would be written over. ``meshrun report`` reads only
the plain ``plan.node<k>.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..plan import LaunchPlan
from ..redact import redact_argv, redact_env, redact_text
from ..runtime.logs import keep_previous


def write_start(plan: LaunchPlan, env: Mapping[str, str]) -> list[str]:
    """plan.node<k>.json and env.node<k>.json, written when the node starts.

    Returns the paths an earlier run's files were kept under (see the module doc)."""
    data = plan.to_json()
    data["env"] = redact_env(data["env"])
    if data.get("command"):
        data["command"] = redact_argv(data["command"])
    kept = [_write(plan, f"plan.node{plan.node_rank}.json", data),
            _write(plan, f"env.node{plan.node_rank}.json", redact_env(env)),
            _keep(os.path.join(plan.log_dir, f"diagnosis.node{plan.node_rank}.json")),
            _keep(os.path.join(plan.log_dir, f"nodecheck.node{plan.node_rank}.json"))]
    if plan.node_rank == 0:
        kept.append(_keep(os.path.join(plan.log_dir, "node_steps.json")))
    return [path for path in kept if path]


def node_logs(plan: LaunchPlan, ranks: tuple[int, ...] | None = None) -> list[str]:
    """This node's own logs: ``node<k>.log`` and its ranks' ``rank<r>.log`` (those that exist;
    ``ranks``: those its workers ran, when a spare took a seat; else the plan's). Not the
    other nodes' files a shared log folder also holds: a node explains what it saw."""
    ranks = plan.global_ranks if ranks is None else ranks
    names = [f"node{plan.node_rank}.log", *(f"rank{r}.log" for r in ranks)]
    return [p for p in (os.path.join(plan.log_dir, n) for n in names) if os.path.isfile(p)]


def write_diagnosis(plan: LaunchPlan, ranks: tuple[int, ...] | None = None) -> list[str]:
    """Diagnose this node's logs (see :func:`node_logs`); write diagnosis.node<k>.json;
    return the sentences."""
    from ..diagnose import diagnose_files, render_text, to_json

    try:
        found = diagnose_files(node_logs(plan, ranks), job=plan.job, device=plan.device)
    except Exception as exc:  # noqa: BLE001 - a diagnosis must never hide the failure itself
        return [f"(diagnosis failed: {redact_text(str(exc))[:200]})"]
    _write(plan, f"diagnosis.node{plan.node_rank}.json", to_json(found))
    text = render_text(found)
    return [line for line in text.splitlines() if line.strip()]


def _keep(path: str) -> str | None:
    """Rename an earlier run's ``path`` aside; the new name, or None (none, or no rename)."""
    try:
        return keep_previous(path)
    except OSError:
        return None


def _write(plan: LaunchPlan, name: str, data: Any) -> str | None:
    """Write ``name`` in the run folder, an earlier run's file kept aside first; return
    the name it was kept under (None when there was none)."""
    path, kept = os.path.join(plan.log_dir, name), None
    try:
        os.makedirs(plan.log_dir, exist_ok=True)
        kept = keep_previous(path)  # an OSError here skips the write: never overwrite
        with open(path, "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=True, default=str)
    except OSError:
        pass  # the bundle is a help; a full disk must not turn into a second failure
    return kept


def write_cause(plan: LaunchPlan, cause: Any) -> None:
    """``cause.node<k>.json``: the job's first cause as this node knows it (the store's record,
    which the first node to fail offered), for ``meshrun simulate``'s last line and for
    whoever reads the run folder after the store is gone. Never raises."""
    if cause is None:
        return
    import time

    from ..runtime.supervise import write_atomically

    write_atomically(os.path.join(plan.log_dir, f"cause.node{plan.node_rank}.json"),
                     json.dumps({**json.loads(cause.encode()), "time": time.time()}))
