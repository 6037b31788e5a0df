"""Which of a node's failed ranks failed first, and which others failed on their own.

torch's elastic agent orders failures by whole seconds and gives ties to the lowest rank, so
a rank that failed *because* another did (its collective's peer closed the connection)
is often called the first failure. Here the order is:

1. a rank whose error names a cause before one whose error is only what a victim sees (the
   diagnose catalog's ``effect`` tier: Gloo's ``Connection closed by peer``, NCCL's remote
   error, a collective's timeout);
2. then the time of the failure: the worker's own record (:mod:`meshrun.worker.failure`, to
   the microsecond) where it wrote one, else torch's second (a rank killed by a signal
   writes none).

"Also failed" are the other ranks torch saw fail, and ranks whose record was written
before the agent began stopping the workers (they failed on their own in the same moment,
before the agent saw it, and were then stopped with the rest).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..worker import failure as records


@dataclass(frozen=True)
class Failed:
    rank: int
    exit: int          # its exit status (negative: the signal that killed it)
    at: float          # wall time of the failure
    line: str          # the worker's own error line ("" when it wrote none)
    precise: bool      # ``at`` comes from the worker's record
    victim: bool       # its error line is only a victim's view
    seen: bool         # torch's agent saw it fail (else: recorded, then stopped)


def is_victim(line: str) -> bool:
    """The line is what a rank sees when a peer failed (and names no cause itself)."""
    if not line:
        return False
    from ..diagnose.engine import diagnose_text
    from ..diagnose.records import EFFECT

    found = diagnose_text(line)
    return bool(found) and all(d.priority >= EFFECT for d in found)


class Stopping:
    """When this node's agent last began stopping its workers (torch logs ``Sending process
    N closing signal`` for each, in one burst; a restart's attempt ends with a burst of its
    own): a record written after it is a stopped rank's, not a failure's."""

    since: float | None = None
    _BURST_S = 5.0   # the lines of one stop come within this (a new burst: a later attempt)

    @classmethod
    def saw(cls) -> None:
        now = time.time()
        if cls.since is None or now - cls.since > cls._BURST_S:
            cls.since = now

    @classmethod
    def reset(cls) -> None:
        cls.since = None


def ordered(failures: Mapping[int, Any], folder: str, *, since: float,
            ranks: Iterable[int] = (), stopping: float | None = None,
            fallback: Callable[[int, Any], str] | None = None,
            victim: Callable[[str], bool] = is_victim) -> list[Failed]:
    """The node's failed ranks, first cause first. ``failures``: torch's ``rank ->
    ProcessFailure`` (``pid``, ``timestamp``, ``message``); ``folder``: the run's log folder;
    ``since``: wall time this launch began (older records are another launch's); ``ranks``:
    this node's ranks, whose records count though torch did not see them fail (written
    before ``stopping``); ``fallback(rank, failure)``: the error line of a rank that wrote
    no record (default: none)."""
    out = []
    for rank, f in failures.items():
        mine = records.read(folder, rank, since=since)
        if mine is not None and mine["pid"] != getattr(f, "pid", None):
            mine = None   # another process of that rank (an earlier attempt's)
        line = mine["line"] if mine and mine["line"] else (fallback(rank, f) if fallback else "")
        # torch's time is the whole second it noticed the exit (rounded down): a record of
        # the same second is taken as earlier
        out.append(Failed(rank, int(f.exitcode),
                          float(mine["time"]) if mine else float(f.timestamp) + 0.999, line,
                          mine is not None, victim(line), True))
    for rank in ranks:
        if rank in failures:
            continue
        mine = records.read(folder, rank, since=since)
        if mine is None or (stopping is not None and mine["time"] >= stopping):
            continue
        code = mine.get("exit")
        out.append(Failed(rank, code if isinstance(code, int) and code > 0 else 1,
                          float(mine["time"]), mine["line"], True, victim(mine["line"]), False))
    return sorted(out, key=lambda x: (x.victim, x.at, x.rank))


def first_recorded(folder: str, *, since: float,
                   victim: Callable[[str], bool] = is_victim) -> dict | None:
    """The first cause among every rank's record in run folder ``folder`` written at or
    after ``since`` (``meshrun simulate``: every simulated node's ranks share the folder):
    cause before victim, then the earliest; None when no rank wrote one."""
    import glob
    import os
    import re

    found = []
    for path in glob.glob(os.path.join(folder, records.FOLDER, "rank*.json")):
        name = re.fullmatch(r"rank(\d+)\.json", os.path.basename(path))
        mine = records.read(folder, int(name.group(1)), since=since) if name else None
        if mine is not None:
            found.append(mine)
    if not found:
        return None
    return min(found, key=lambda r: (victim(r["line"]), r["time"], r["rank"]))


def job_cause(folder: str, *, since: float) -> dict | None:
    """The job's first cause as a node wrote it (``cause.node<k>.json``, the store's record
    of the first node to fail) at or after ``since``; None when no node wrote one."""
    import glob
    import json
    import os

    found = []
    for path in sorted(glob.glob(os.path.join(folder, "cause.node*.json"))):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            if float(data.get("time", 0)) >= since and isinstance(data.get("node"), int):
                found.append(data)
        except (OSError, ValueError, TypeError):
            continue
    return min(found, key=lambda d: d["time"]) if found else None
