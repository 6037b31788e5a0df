"""Checkpoints with ``torch.distributed.checkpoint`` (DCP): save, keep the newest K, resume.

Layout
------
::

    <dir>/step-<N>/            one checkpoint per saved step (N without leading zeros)
        .metadata              written last, by rank 0, once every rank's data is down
        __<rank>_0.distcp      each rank's shards

A ``step-N`` folder is **complete** exactly when ``step-N/.metadata`` exists.
DCP's file writer writes every rank's shards, then rank 0 writes
``.metadata`` (via a temporary file renamed into place) and only then does
``dcp.save`` return on any rank. So meshrun saves straight into the final
folder: a save cut short leaves a folder without ``.metadata``, which is never
resumed from. (The alternative, a temporary folder renamed after a barrier,
buys nothing over that and needs a rename that is atomic on every shared
filesystem.) On several nodes ``<dir>`` must be a filesystem all nodes share:
:func:`check_shared` stops the run before its first step when it is not.

What is saved: the model and optimizer through
``torch.distributed.checkpoint.state_dict.get_state_dict`` (sharded DTensors
keyed by parameter name, so a checkpoint saved by 4 ranks as dp 2 x tp 2 loads
onto 2 ranks as dp 1 x tp 2 or dp 2 x tp 1), plus a small ``trainer`` dict the
caller chooses (the recipes store the step, samples seen and the model config).

Rules
-----
* Resume: the newest complete ``step-N``; rank 0 chooses and tells the others,
  and prints ``resumed from step N (<path>)``, or ``no complete checkpoint in
  <dir>: starting fresh``.
* Save: never over a complete ``step-N`` (an error says so); an incomplete
  ``step-N`` left by an interrupted save is removed first, with a message.
* Retention, after each save, on rank 0: keep the newest ``keep`` (>= 2)
  complete checkpoints; remove incomplete folders older than the newest
  complete one (each removal is printed); keep incomplete folders newer than
  it (maybe still being written); never touch anything not named ``step-N``.
* Rank 0's file work (preparing a save, choosing what to resume, pruning) runs
  through :func:`_rank0_does`: whatever it raises is raised on every rank as one
  line, so no rank waits for rank 0 in a collective until the process-group timeout.

The selection and retention rules are pure functions of a directory listing
(:func:`parse_listing`, :func:`newest_complete`, :func:`plan_retention`,
:func:`check_target`); only :func:`save` / :func:`resume` touch torch and files.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

METADATA = ".metadata"
_STEP_DIR = re.compile(r"^step-(0|[1-9][0-9]*)$")  # canonical names only: step-12, not step-012


@dataclass(frozen=True, order=True)
class Found:
    """One ``step-N`` folder: its step, name and whether ``.metadata`` exists."""

    step: int
    name: str
    complete: bool


def step_dir(step: int) -> str:
    """The folder name for ``step``: ``step-<N>``."""
    return f"step-{step}"


def parse_listing(entries: Iterable[tuple[str, bool]]) -> list[Found]:
    """The ``step-N`` folders among ``(name, has_metadata)`` pairs, oldest first.

    Names that are not exactly ``step-<N>`` are not checkpoints and are left out
    (so nothing else in the folder is ever selected or removed).
    """
    found = []
    for name, complete in entries:
        match = _STEP_DIR.match(name)
        if match:
            found.append(Found(int(match.group(1)), name, bool(complete)))
    return sorted(found)


def newest_complete(found: Iterable[Found]) -> Found | None:
    """The complete checkpoint with the highest step, or None."""
    complete = [f for f in found if f.complete]
    return max(complete) if complete else None


def plan_retention(found: Iterable[Found], keep: int) -> list[tuple[Found, str]]:
    """What to remove so the newest ``keep`` complete checkpoints remain, with reasons.

    Never lists the newest complete checkpoint, nor an incomplete one newer than it.
    """
    if keep < 2:
        raise UsageError(f"checkpoint keep={keep} is below 2", subject="checkpoint.keep",
                         hint="keep at least 2, so a crash while saving leaves one to resume",
                         code="checkpoint-keep-too-low")
    found = sorted(found)
    complete = [f for f in found if f.complete]
    if not complete:
        return []
    newest = complete[-1]
    doomed = [(f, f"older than the newest {keep} complete checkpoints")
              for f in complete[:-keep]]
    stale = (f"incomplete (no {METADATA}) and older than the newest complete "
             f"{newest.name}")
    doomed += [(f, stale) for f in found if not f.complete and f.step < newest.step]
    return sorted(doomed)


def check_target(found: Iterable[Found], step: int, directory: str = "") -> bool:
    """Whether saving ``step`` must first remove an incomplete ``step-N`` (True) or not.

    Raises :class:`UsageError` if a complete ``step-N`` is already there: a
    checkpoint is never overwritten.
    """
    for f in found:
        if f.step == step:
            if f.complete:
                where = os.path.join(directory, f.name) if directory else f.name
                raise UsageError(f"checkpoint {where} already exists and is complete; "
                                 "refusing to overwrite it", subject="checkpoint.dir",
                                 hint="resume from it (run the same command), or use another "
                                      "checkpoint folder (MESHRUN_CHECKPOINT_DIR)",
                                      code="checkpoint-exists")
            return True
    return False


def listing(directory: str) -> list[tuple[str, bool]]:
    """``(name, has_metadata)`` for each sub-folder of ``directory`` (none if it is absent).

    Any other ``OSError`` (a file where the folder should be, ESTALE, EACCES) is raised:
    its callers run it on rank 0 through :func:`_rank0_does`, which makes it one line on
    every rank.
    """
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    return [(e.name, os.path.exists(os.path.join(e.path, METADATA)))
            for e in entries if e.is_dir()]


_HF_DIR = re.compile(r"^checkpoint-(\d+)$")           # HF Trainer: output_dir/checkpoint-N/
_HF_COMPLETE = "trainer_state.json"                    # written once the model and optimizer are
_LIGHTNING_FILE = re.compile(r"(?:^|[-_])step=(\d+)\b[^/]*\.ckpt$")  # epoch=E-step=S.ckpt


def newest_in_any_layout(directory: str) -> int:
    """Node 0's view of a job's checkpoints, for a shrunk job's admission (a node that came
    back is seated once a newer checkpoint is complete): the step of the newest complete
    checkpoint in ``directory`` in any layout meshrun knows, -1 when there is none.

    - meshrun's recipes: ``step-N/`` with its ``.metadata``;
    - an HF Trainer script (``output_dir``): ``checkpoint-N/`` holding ``trainer_state.json``
      (written after the model, the optimizer and the scheduler; transformers >= 4.36 also
      writes the folder as ``tmp-checkpoint-N`` and renames it when it is whole);
    - a Lightning script (``ModelCheckpoint(dirpath=...)``, its default file names):
      ``...step=N....ckpt`` files (Lightning writes each in one piece).

    Raises OSError for a folder that cannot be listed (not for a missing one)."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return -1
    steps = [-1]
    for e in entries:
        name = e.name
        if e.is_dir():
            mine, hf = _STEP_DIR.match(name), _HF_DIR.match(name)
            if mine and os.path.exists(os.path.join(e.path, METADATA)):
                steps.append(int(mine.group(1)))
            elif hf and os.path.exists(os.path.join(e.path, _HF_COMPLETE)):
                steps.append(int(hf.group(1)))
        elif (lit := _LIGHTNING_FILE.search(name)) and e.is_file():
            steps.append(int(lit.group(1)))
    return max(steps)


# --- effects (torch imported lazily) ------------------------------------------------------

def _rank0_decides(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (all ranks must see the same checkpoint)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    box = [value if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _is_main() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def _rank0_does(action: Callable[[], Any], directory: str, doing: str) -> Any:
    """Run ``action`` (file work) on rank 0 only and return its result on every rank.

    Whatever it raises is raised on every rank: the others must hear of it, not wait for
    rank 0 in the next collective until the process-group timeout. A :class:`UsageError`
    as it is; an ``OSError`` as one line saying what rank 0 was ``doing``; any other
    exception (a ``say`` callback's, say) as one line naming its type and message, and on
    rank 0 chained to the original, whose traceback shows where it came from.
    """
    outcome: Any = None
    cause: BaseException | None = None
    if _is_main():
        try:
            outcome = (True, action())
        except UsageError as err:
            outcome = (False, err)
        except OSError as exc:
            outcome = (False, UsageError(
                f"checkpoint.dir {directory}: cannot {doing} "
                f"({exc.strerror or _one_line(exc)})",
                subject="checkpoint.dir", hint="check the folder's permissions and free "
                "space, or pass --checkpoint-dir on a writable filesystem every node mounts",
                code="checkpoint-dir-error"))
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it, whatever it is
            cause = exc
            outcome = (False, UsageError(
                f"checkpoint.dir {directory}: cannot {doing} ({_one_line(exc)})",
                subject="checkpoint.dir", hint="rank 0 failed while it tried to "
                f"{doing} and every rank stopped with it: fix what the message names "
                "(rank 0's traceback shows where it was raised) and run again",
                code="checkpoint-dir-error"))
    ok, value = _rank0_decides(outcome)
    if not ok:
        if cause is not None:
            raise value from cause
        raise value
    return value


def _one_line(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` on one line (``Type`` alone when it has no message)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_shared(directory: str, patience_s: float = 5.0) -> None:
    """Collective: stop every rank unless all of them see ``directory`` as rank 0 does.

    DCP writes each rank's shards where that rank is, and ``.metadata`` where rank 0
    is: on a folder that is not shared (the default ``checkpoints/<run id>`` on each
    node's local disk) a save "succeeds" and no node can load it. Rank 0 writes
    ``.meshrun-shared-<random>`` (a name no node has looked up, so no NFS negative
    cache hides it), every rank looks for it for up to ``patience_s``, rank 0 removes
    it. A node that cannot see it: a :class:`UsageError` on every rank naming it.
    """
    import secrets
    import socket
    import time

    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    token = _rank0_decides(secrets.token_hex(8) if _is_main() else None)
    marker = os.path.join(directory, f".meshrun-shared-{token}")

    def write_marker() -> None:
        os.makedirs(directory, exist_ok=True)
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(token)

    _rank0_does(write_marker, directory, "write there")
    deadline = time.monotonic() + patience_s
    while True:
        try:
            with open(marker, encoding="utf-8") as handle:
                seen = handle.read() == token
        except OSError:
            seen = False
        if seen or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    node = os.environ.get("GROUP_RANK") or os.environ.get("MESHRUN_NODE_RANK") or "?"
    views: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(views, (node, socket.gethostname(), seen))
    if _is_main():
        try:
            os.remove(marker)
        except OSError:
            pass
    blind = sorted({(n, host) for n, host, ok in views if not ok})
    if blind:
        who = ", ".join(f"node {n} ({host})" for n, host in blind)
        raise UsageError(
            f"checkpoint.dir {directory} is not one folder for all nodes: {who} cannot see "
            "the file node 0 wrote there, so no checkpoint saved there could be loaded",
            subject="checkpoint.dir", code="checkpoint-dir-not-shared",
            hint="a multi-node job needs its checkpoints on a filesystem every node mounts "
                 "(NFS, Lustre, a ReadWriteMany volume): pass --checkpoint-dir there, or set "
                 "checkpoint.interval=0")


def save(directory: str, step: int, model: Any, optimizer: Any, trainer: dict[str, Any], *,
         keep: int = 2, say: Callable[[str], None] = print) -> str:
    """Save ``model``, ``optimizer`` and ``trainer`` as ``<directory>/step-<step>``; prune.

    Collective: every rank calls it. Returns the checkpoint's path. ``say`` is
    called on rank 0 only. ``keep`` is checked on every rank before anything is written.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    plan_retention([], keep)  # keep < 2: a UsageError on every rank, before anything is saved
    path = os.path.join(directory, step_dir(step))

    def prepare() -> None:
        if check_target(parse_listing(listing(directory)), step, directory):
            say(f"removing incomplete {path} (no {METADATA}: an interrupted save) "
                f"before saving step {step} again")
            shutil.rmtree(path)
        os.makedirs(path, exist_ok=True)

    _rank0_does(prepare, directory, f"prepare {path}")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd, "trainer": dict(trainer)},
             checkpoint_id=path)

    def prune() -> None:
        for found, reason in plan_retention(parse_listing(listing(directory)), keep):
            say(f"removing checkpoint {os.path.join(directory, found.name)}: {reason}")
            _remove(os.path.join(directory, found.name))

    # rank 0 prunes; its outcome, broadcast to every rank, is also the barrier that keeps
    # the others from going on before the pruning is done
    _rank0_does(prune, directory, "remove old checkpoints")
    return path


def resume(directory: str, model: Any, optimizer: Any, trainer: dict[str, Any], *,
           check: Callable[[dict[str, Any], str], None] | None = None,
           say: Callable[[str], None] = print) -> tuple[int, dict[str, Any]] | None:
    """Load the newest complete checkpoint under ``directory`` into ``model``/``optimizer``.

    ``trainer`` is the template of the trainer dict (its keys are loaded). ``check``,
    if given, sees the loaded trainer dict and the path before the model is loaded
    and may raise (a checkpoint of another model, say). Returns ``(step, trainer)``,
    or None when there is no complete checkpoint. Collective: every rank calls it;
    ``say`` is called on rank 0 only.
    """
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    def choose() -> tuple[int, str] | None:
        best = newest_complete(parse_listing(listing(directory)))
        return None if best is None else (best.step, os.path.join(directory, best.name))

    chosen = _rank0_does(choose, directory, "read it")
    if chosen is None:
        if _is_main():
            say(f"no complete checkpoint in {directory}: starting fresh")
        return None
    step, path = chosen
    loaded = {"trainer": dict(trainer)}
    _load(loaded, path)
    if check is not None:
        check(loaded["trainer"], path)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    _load(state, path)
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    if _is_main():
        say(f"resumed from step {step} ({path})")
    return step, loaded["trainer"]


def _remove(path: str) -> None:
    """Remove a checkpoint folder, ``.metadata`` first: one cut short halfway is then an
    incomplete folder (never resumed from, removed later), not a complete-looking one
    with shards missing."""
    if os.path.islink(path):  # a link to a checkpoint kept elsewhere: drop the link only
        os.unlink(path)
        return
    try:
        os.remove(os.path.join(path, METADATA))
    except FileNotFoundError:
        pass
    except OSError:
        return  # cannot even unmark it: leave it whole rather than half-deleted
    shutil.rmtree(path, ignore_errors=True)


def _load(state: dict[str, Any], path: str) -> None:
    """``dcp.load`` into ``state``; a checkpoint that does not fit is one line, not N tracebacks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    try:
        dcp.load(state, checkpoint_id=path)
    except (CheckpointException, RuntimeError, ValueError, OSError) as exc:
        # DCP gathers every rank's failure into one exception; keep its root cause's last line
        cause = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise UsageError(f"checkpoint {path} could not be loaded into this run "
                         f"({cause[-1] if cause else type(exc).__name__})",
                         subject="checkpoint.dir", code="checkpoint-unloadable",
                         hint="resume with the settings it was saved with; if it is damaged, "
                              "move it out of the folder and the next newest one is used") from None
