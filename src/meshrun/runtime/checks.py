"""What can be checked before anything starts, beyond the plan: the worker's script or
module exists here, the log folder can be written, the variables the workers read are sane.
Each failure is one line and exit 2 (:class:`~meshrun.errors.UsageError`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from ..errors import UsageError


def check_log_dir(path: str) -> None:
    """The run's log folder can be made and written: else one line and exit 2, not a
    traceback from the log router."""
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(13, "permission denied")
    except OSError as exc:
        raise UsageError(f"the log folder {path} cannot be written ({exc.strerror})",
                         subject="--log-dir", hint="pass --log-dir on a writable filesystem "
                         "(or set MESHRUN_LOG_DIR)", code="log-dir-unwritable") from None


def check_checkpoint_dir(plan) -> None:
    """The job config's checkpoint folder (``--checkpoint-dir``, ``checkpoint.dir``) is a
    folder, or can become one: a file in its place (or on its path) is one line and exit 2
    before anything starts, not a failure of every worker at its first save. Nothing is
    made here (``meshrun plan`` has no side effects)."""
    job = getattr(plan, "job", None)
    path = getattr(getattr(job, "checkpoint", None), "dir", None)
    if path:
        check_checkpoint_path(path, (getattr(job, "source", None) or {}).get(
            "checkpoint.dir", "checkpoint.dir"))


def not_a_folder(path: str, probe: str | None = None) -> str | None:
    """Why ``path`` cannot be (or become) a folder — "is a file", "is under a file, X" — or
    None: the nearest part of it that exists is a folder. Nothing is made. ``probe``: that
    nearest part, when the caller has it (:func:`nearest_existing`)."""
    probe = probe or nearest_existing(path)
    if os.path.isdir(probe):
        return None
    return "is a file" if probe == os.path.abspath(path) else f"is under a file, {probe}"


def nearest_existing(path: str) -> str:
    """``path`` itself, or the nearest folder above it that exists."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return probe


def check_checkpoint_path(path: str, where: str) -> None:
    """:func:`check_checkpoint_dir` for one path; ``where`` says where it was given."""
    probe = nearest_existing(path)
    what = not_a_folder(path, probe)
    if what:
        raise UsageError(f"the checkpoint folder {path} ({where}) {what}, not a folder",
                         subject="--checkpoint-dir", hint="pass --checkpoint-dir a folder "
                         "(it is made if missing), or set checkpoint.dir",
                         code="checkpoint-dir-not-a-folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"the checkpoint folder {path} ({where}) cannot be written "
                         f"({probe} is not writable)", subject="--checkpoint-dir",
                         hint="pass --checkpoint-dir on a writable filesystem",
                         code="checkpoint-dir-unwritable")


def check_worker_env(env: Mapping[str, str]) -> None:
    """Variables the workers read that meshrun can check before starting them."""
    from ..recipes import parse_peak_flops

    parse_peak_flops(env.get("MESHRUN_PEAK_FLOPS", ""))


def check_command(cmd) -> None:
    """The workers' script must exist here (relative to this directory), and a module's
    top-level package must be importable: else one line and exit 2 before anything starts.
    (A module's parent package is not imported here: only its top level is looked up.)"""
    import importlib.util

    if cmd.module:
        import importlib.machinery

        top = cmd.target.split(".")[0]
        try:  # the workers run with this folder first on sys.path (meshrun.worker.bootstrap)
            found = bool(top) and (
                importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path])
                is not None or importlib.util.find_spec(top) is not None)
        except (ImportError, ValueError):
            found = False
        if not found:
            raise UsageError(f"-m {cmd.target}: no module named {top!r} for {sys.executable}",
                             subject="-m", hint="install the package into this Python "
                             "environment, or start meshrun from the folder that holds it",
                             code="module-not-found")
        return
    if os.path.isdir(cmd.target) and os.path.isfile(os.path.join(cmd.target, "__main__.py")):
        return  # a folder with __main__.py runs as python runs it
    if not os.path.isfile(cmd.target):
        where = os.getcwd()
        what = ("is a folder without __main__.py, not a script" if os.path.isdir(cmd.target)
                else "does not exist")
        raise UsageError(f"the training script {cmd.target} {what} (relative to {where})",
                         subject="SCRIPT", hint="check the path; every node runs it from its "
                         "own working directory, so it must exist there on every node",
                         code="script-not-found")
