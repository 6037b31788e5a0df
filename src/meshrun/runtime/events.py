"""What the watchdog finds and says, as values: the event kinds and goodbyes (enums), the
one-line messages ``meshrun diagnose`` recognises, and the pure decisions of a hang (who is
stuck, whether to restart). Pure, apart from :func:`process_state` (reads ``/proc``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum


class EventKind(str, Enum):
    """What the watchdog found (compares equal to its string: ``EventKind.HANG == "hang"``)."""

    NODE_LOST = "node-lost"      # a node's heartbeat went silent
    STORE_LOST = "store-lost"    # node 0, which hosts the store, went silent
    HANG = "hang"                # no rank progressed for --hang-timeout
    PEER_FAILED = "peer-failed"  # another node's workers failed: the job ends

    __str__ = str.__str__


class Goodbye(str, Enum):
    """How a node left the job, as it writes it under ``meshrun/done/<node>``."""

    DONE = "done"        # its workers finished
    FAILED = "failed"    # its own workers failed: the others stop theirs for it
    STOPPED = "stopped"  # stopped by an event every node sees, or by a signal

    __str__ = str.__str__

    @classmethod
    def read(cls, raw: bytes) -> Goodbye | str:
        """A goodbye as read from the store (kept as text if unknown: another version's)."""
        text = raw.decode(errors="replace")
        try:
            return cls(text)
        except ValueError:
            return text


def node_lost_line(node: int, host: str, age_s: float, *, store_host: bool = False,
                   closed: bool = False) -> str:
    """``closed``: its agent's liveness link closed without a goodbye (the process died)."""
    what = (f"node {node} ({host}), which hosts the job's store, is lost"
            if store_host else f"node {node} ({host}) is lost")
    how = "; its agent's connection closed without a goodbye (the process died)" if closed else ""
    return f"meshrun: {what}: last heartbeat {age_s:.1f} s ago{how}"


def peer_failed_line(node: int, host: str, me: int, *, store_closed: bool = False) -> str:
    closed = " (its store closed with it)" if store_closed else ""
    return (f"meshrun: node {node} ({host}) failed and ends the job{closed}: stopping node "
            f"{me}'s workers; the cause is in node {node}'s output")


def hang_line(stuck: Sequence[tuple[int, int, str]], seconds: float) -> str:
    """``stuck``: (rank, node, host) of each stuck rank."""
    who = ", ".join(f"rank {r} on node {n} ({h})" for r, n, h in stuck) or "no rank identified"
    return f"meshrun: job hung: no progress for {seconds:.0f} s; stuck: {who}"


@dataclass
class Event:
    """What the watchdog found. ``restart``: a hang handled by restarting the workers
    (``pids``: this node's workers of the hung attempt, to be killed)."""

    kind: EventKind
    line: str
    node: int | None = None
    stuck: list = field(default_factory=list)
    restart: bool = False
    pids: tuple[int, ...] = ()


def in_collective(stack_dump: str) -> bool:
    """Pure: does a faulthandler dump show the rank waiting inside torch.distributed?"""
    return bool(re.search(r"distributed_c10d\.py|torch/distributed/.*\b(wait|barrier)\b",
                          stack_dump))


def process_state(pid: int) -> str:
    """The state letter from /proc/<pid>/stat (R, S, D, T, Z, ...), or "" if gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def restart_verdict(restarts_left: Mapping[int, int], nnodes: int) -> bool:
    """Pure: restart after a hang only when every node answered the probe with a restart left
    (a node without one would stop instead, and the others would wait for it in vain)."""
    return all(restarts_left.get(node, 0) > 0 for node in range(nnodes))


def stuck_ranks(progress: Mapping[int, int], stopped: Sequence[int] = (),
                silent: Sequence[int] = ()) -> list[int]:
    """Pure: the ranks to blame for a hang.

    ``progress``: rank -> last reported step. Ranks behind the furthest are stuck;
    if all are level, the ones whose process is stopped (``stopped``) or did not
    answer the stack dump (``silent``)."""
    if not progress:
        return sorted(set(stopped) | set(silent))
    best = max(progress.values())
    behind = sorted(r for r, step in progress.items() if step < best)
    return behind or sorted(set(stopped) | set(silent))
