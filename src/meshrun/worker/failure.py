"""A failing worker's own account of its failure: when (to the microsecond) and its error line.

torch's elastic agent orders a node's failed ranks by a timestamp in whole seconds (the
error file's, else the second the agent noticed the exit), and ties go to the lowest rank.
When rank 1 raises and rank 0 then fails in its collective ("Connection closed by peer")
within the same second, the agent calls rank 0 the first failure: the victim is reported
as the cause. So the bootstrap (and a recipe that leaves with ``os._exit``) writes
``<MESHRUN_LOG_DIR>/failures/rank<R>.json`` the moment the script fails: the wall time,
the pid, the exit code and the error's last line. The node's agent reads them back
(:func:`read`) to name the first cause. Nothing here imports torch; writing never raises.
"""

from __future__ import annotations

import json
import os
import time
import traceback

FOLDER = "failures"


def _path(folder: str, rank: int | str) -> str:
    return os.path.join(folder, FOLDER, f"rank{rank}.json")


def line_of(exc: BaseException) -> str:
    """The line Python prints last for ``exc`` ("ValueError: bad"); for ``SystemExit``
    what Python prints for it (its message; nothing for a number)."""
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, str) else ""
    text = traceback.format_exception_only(type(exc), exc)
    return text[-1].strip() if text else type(exc).__name__


def exit_code(exc: BaseException) -> int:
    """The exit status Python gives for ``exc`` escaping the script."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 1


def clear() -> None:
    """At a worker's start: its rank's record of an earlier attempt is not this one's."""
    folder, rank = os.environ.get("MESHRUN_LOG_DIR"), os.environ.get("RANK")
    if folder and rank is not None:
        try:
            os.unlink(_path(folder, rank))
        except OSError:
            pass


def record(line: str, code: int) -> None:
    """Write this rank's failure record (at most once per process; errors are ignored: the
    failure itself must go on as it would have)."""
    folder, rank = os.environ.get("MESHRUN_LOG_DIR"), os.environ.get("RANK")
    if not folder or rank is None or _DONE:
        return
    _DONE.append(True)
    node = os.environ.get("MESHRUN_NODE_RANK", "")
    data = {"rank": int(rank), "pid": os.getpid(), "time": time.time(), "exit": code,
            "line": line.strip()[:1000], "node": int(node) if node.isdigit() else None}
    path = _path(folder, rank)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(temp, path)
    except OSError:
        pass


_DONE: list = []


def read(folder: str, rank: int, *, since: float = 0.0) -> dict | None:
    """Rank ``rank``'s record in run folder ``folder`` if written at or after ``since`` (wall
    time) and well formed, else None."""
    try:
        with open(_path(folder, rank), encoding="utf-8") as handle:
            data = json.loads(handle.read(65536))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    stamp, pid, who = data.get("time"), data.get("pid"), data.get("rank")
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or stamp < since \
            or not isinstance(pid, int) or isinstance(pid, bool) \
            or not isinstance(who, int) or isinstance(who, bool) \
            or not isinstance(data.get("line", ""), str):
        return None
    data.setdefault("line", "")
    return data
