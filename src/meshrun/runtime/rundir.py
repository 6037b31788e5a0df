"""A run folder's earlier runs: a rerun with the same run id moves the files of the run
before it aside, one folder per run (``earlier/<n>/``), so the plain names are always the
newest run's (see :mod:`meshrun.runtime.logs`)."""

from __future__ import annotations

import os

EARLIER = "earlier"
# a node's own files in a run folder (k: its node rank); its ranks' are listed per rank
_NODE_FILES = ("node{k}.log", "plan.node{k}.json", "env.node{k}.json",
               "diagnosis.node{k}.json", "events.node{k}.jsonl", "nodecheck.node{k}.json",
               "cause.node{k}.json")
_NODE0_FILES = ("node_steps.json",)
_RANK_FILES = ("rank{r}.log", "stacks/rank{r}.txt", "failures/rank{r}.json")


def set_aside(run_dir: str, node_rank: int, ranks: tuple[int, ...]) -> str | None:
    """Move this node's files of an earlier run with this run id into ``earlier/<n>/``
    (the first n whose folder holds no ``node<k>.log`` of this node: every node of a run
    that ran on all of them picks the same n); return that folder, or None when there was
    nothing to move. An empty ``stacks/rank<r>.txt`` (a worker opens one for its stack
    dumps; only a hang or a crash fills it) is removed, not kept. Files that cannot be
    moved stay where they are (never lost, never overwritten: the new run then keeps them
    aside under its own name, :func:`meshrun.runtime.logs.keep_previous`). A node that missed a run (it died
    before starting) numbers the next one lower than the others do; and a rank file of a
    rank this node no longer runs (another layout under the same run id) stays where it is:
    only this node's planned ranks are its to move."""
    names = [n.format(k=node_rank) for n in _NODE_FILES]
    if node_rank == 0:
        names += list(_NODE0_FILES)
    names += [n.format(r=r) for r in ranks for n in _RANK_FILES]
    raw = os.path.join(run_dir, "raw")
    try:
        raws = [os.path.join("raw", d) for d in sorted(os.listdir(raw))
                if d.startswith(f"node{node_rank}-")]
    except OSError:
        raws = []
    present = [n for n in names if os.path.isfile(os.path.join(run_dir, n))] + raws
    empty = [n for n in present if n.startswith("stacks/") and _is_empty(run_dir, n)]
    for name in empty:
        try:
            os.remove(os.path.join(run_dir, name))
        except OSError:
            pass
    present = [n for n in present if n not in empty]
    if not present:
        return None
    n = 1
    while os.path.exists(os.path.join(run_dir, EARLIER, str(n), f"node{node_rank}.log")):
        n += 1
    target = os.path.join(run_dir, EARLIER, str(n))
    for name in present:
        dest = os.path.join(target, name)
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.exists(dest):
                continue                      # never overwrite: it stays, kept aside later
            os.replace(os.path.join(run_dir, name), dest)
        except OSError:
            continue
    for sub in ("stacks", "failures", "raw"):
        try:
            os.rmdir(os.path.join(run_dir, sub))   # only when empty: others' files stay
        except OSError:
            pass
    return target


def _is_empty(run_dir: str, name: str) -> bool:
    try:
        return os.path.getsize(os.path.join(run_dir, name)) == 0
    except OSError:
        return False
