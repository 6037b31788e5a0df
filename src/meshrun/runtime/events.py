"""What the watchdog finds and says, as values: the event kinds and goodbyes (enums), the
one-line messages ``meshrun diagnose`` recognises, and the pure decisions of a hang (who is
stuck, whether to restart). Pure, apart from :func:`process_state` (reads ``/proc``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..errors import one_line


class EventKind(str, Enum):
    """What the watchdog found (compares equal to its string: ``EventKind.HANG == "hang"``)."""

    NODE_LOST = "node-lost"      # a node's heartbeat went silent
    STORE_LOST = "store-lost"    # node 0, which hosts the store, went silent
    HANG = "hang"                # no rank progressed for --hang-timeout
    PEER_FAILED = "peer-failed"  # another node's workers failed: the job ends
    PEER_STOPPED = "peer-stopped"  # this node's workers finished; another was stopped first
    TAKEOVER = "takeover"        # a spare took a lost node's seat: every seat restarts
    REPLACED = "replaced"        # this node was found lost and its seat given away

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
                   closed: bool = False, bad: str = "", key: str = "heartbeat key",
                   kind: str = "heartbeat") -> str:
    """``closed``: its agent's liveness link closed without a goodbye (the process died);
    ``bad``: a value in its ``key`` (its heartbeat key; node 0's watch) that does not decode
    as a meshrun ``kind`` (not counted as a sign of life)."""
    what = (f"node {node} ({host}), which hosts the job's store, is lost"
            if store_host else f"node {node} ({host}) is lost")
    how = "; its agent's connection closed without a goodbye (the process died)" if closed else ""
    if bad:
        shown = one_line(bad[:60]) + ("..." if len(bad) > 60 else "")
        how += (f"; its {key} last held '{shown}', which is no meshrun {kind} "
                "(something else writes to this job's store)")
    return f"meshrun: {what}: last heartbeat {age_s:.1f} s ago{how}"


def takeover_line(lost: int, host: str, age_s: float, spare: int, ranks: Sequence[int],
                  epoch: int, *, closed: bool = False, spares_left: int = 0) -> str:
    """A spare takes a lost node's seat (:mod:`meshrun.runtime.membership`)."""
    how = ("its agent's connection closed without a goodbye (the process died)" if closed
           else f"last heartbeat {age_s:.1f} s ago")
    span = f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else (str(ranks[0]) if ranks else "")
    left = f"{spares_left} spare{'s' if spares_left != 1 else ''} left"
    return (f"meshrun: node {lost} ({host}) is lost ({how}); spare node {spare} takes its "
            f"seat (rank{'s' if len(ranks) != 1 else ''} {span}); every node's workers restart "
            f"from the newest checkpoint (membership epoch {epoch}; {left})")


def shrink_line(lost: int, host: str, age_s: float, seats: int, nproc: int, min_seats: int,
                epoch: int, *, closed: bool = False) -> str:
    """No spare left: the job goes on with one node fewer (``--nnodes MIN:MAX``)."""
    how = ("its agent's connection closed without a goodbye (the process died)" if closed
           else f"last heartbeat {age_s:.1f} s ago")
    return (f"meshrun: node {lost} ({host}) is lost ({how}); no spare left: the job goes on "
            f"with {seats} node{'s' if seats != 1 else ''} (world size {seats * nproc}, the "
            f"same effective batch; at least {min_seats}); every node's workers restart from "
            f"the newest checkpoint (membership epoch {epoch})")


def grow_line(node: int, host: str, seats: int, nproc: int, epoch: int,
              step: int | None) -> str:
    """A shrunk job takes a node that came back into a new last seat."""
    when = (f"from the newest checkpoint (step {step} or newer)" if step is not None
            and step >= 0 else "from the newest checkpoint")
    return (f"meshrun: node {node} ({host}) is back: the job grows to {seats} node"
            f"{'s' if seats != 1 else ''} (world size {seats * nproc}, the same effective "
            f"batch); every node's workers restart {when} (membership epoch {epoch})")


def spare_lost_line(node: int, host: str, age_s: float, spares_left: int, *,
                    closed: bool = False) -> str:
    how = ("its agent's connection closed without a goodbye (the process died)" if closed
           else f"last heartbeat {age_s:.1f} s ago")
    return (f"meshrun: spare node {node} ({host}) is lost ({how}); training goes on; "
            f"{spares_left} spare{'s' if spares_left != 1 else ''} left")


def returned_line(node: int, host: str, spares: int) -> str:
    return (f"meshrun: node {node} ({host}) is back and waits as a spare "
            f"({spares} spare{'s' if spares != 1 else ''} now)")


def kept_out_line(node: int, host: str, losses: int) -> str:
    return (f"meshrun: node {node} ({host}) is back but was lost {losses} times in this job: "
            "kept out (not taken back as a spare); check that machine")


def replaced_line(node: int, reason: str) -> str:
    return (f"meshrun: node {node} was found lost and its seat was given away ({reason}); "
            "stopping this node: start it again and it rejoins as a spare")


def peer_stopped_line(node: int, host: str, me: int) -> str:
    return (f"meshrun: node {node} ({host}) was stopped before its workers finished; node "
            f"{me}'s workers had finished: not waiting for it in torch's exit barrier")


def peer_failed_line(node: int, host: str, me: int, *, store_closed: bool = False) -> str:
    closed = " (its store closed with it)" if store_closed else ""
    return (f"meshrun: node {node} ({host}) failed and ends the job{closed}: stopping node "
            f"{me}'s workers; the cause is in node {node}'s output")


def hang_line(stuck: Sequence[tuple[int, int, str]], seconds: float,
              collectives_only: bool = False) -> str:
    """``stuck``: (rank, node, host) of each stuck rank. ``collectives_only``: no rank
    reports steps (:func:`meshrun.progress`), so the judgement rests on the collectives the
    worker shim observes; the line says what that means for a long phase without any."""
    who = ", ".join(f"rank {r} on node {n} ({h})" for r, n, h in stuck) or "no rank identified"
    line = f"meshrun: job hung: no progress for {seconds:.0f} s; stuck: {who}"
    if collectives_only:
        line += (" (no collective completed on any rank; if a phase of the script has none"
                 " for this long, raise --hang-timeout)")
    return line


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


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (``SigCgt`` in /proc/<pid>/status):
    a worker still starting has not registered its stack-dump handler yet, and SIGUSR1
    would kill it. True where /proc cannot say (the signal is then sent as before)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return True


def restart_verdict(restarts_left: Mapping[int, int], nodes: int | Sequence[int]) -> bool:
    """Pure: restart after a hang only when every seated node (``nodes``: their node ranks,
    or a count for nodes 0..n-1) answered the probe with a restart left (a node without one
    would stop instead, and the others would wait for it in vain). Spares run no workers."""
    seated = range(nodes) if isinstance(nodes, int) else nodes
    return all(restarts_left.get(node, 0) > 0 for node in seated)


PROBE_REASONS = ("stopped", "no stack dump", "not in a collective")  # strongest first


def hang_suspects(positions: Mapping[int, Any], reasons: Mapping[int, str],
                  silent: Sequence[int] = ()) -> list[int]:
    """Pure: the ranks a hang verdict names.

    ``positions``: rank -> how far it got (step, collectives issued); the ranks behind the
    furthest are the ones the others wait for. When all are level, the probes' reasons
    decide (``reasons``: rank -> why its node's probe flagged it), the strongest first: a
    stopped process, then one that could not dump its stack, then one outside any
    collective (a rank waiting for a stopped peer inside DDP's backward shows no collective
    in its Python stack, so it must not be named beside the stopped one). Else the ranks
    that never reported (``silent``). A stopped process (state T) is named before all of
    that: it cannot be anything but stuck, and the others, whatever their positions, wait
    for it (one sampled a second before the others' last collective is only behind on
    paper)."""
    stopped = sorted(r for r, why in reasons.items() if why == PROBE_REASONS[0])
    if stopped:
        return stopped
    if positions:
        furthest = max(positions.values())
        behind = sorted(r for r, at in positions.items() if at < furthest)
        if behind:
            return behind
    for strongest in PROBE_REASONS:
        flagged = sorted(r for r, why in reasons.items() if why == strongest)
        if flagged:
            return flagged
    if reasons:
        return sorted(reasons)
    return stuck_ranks(positions, silent=silent)


def stuck_ranks(progress: Mapping[int, Any], stopped: Sequence[int] = (),
                silent: Sequence[int] = ()) -> list[int]:
    """Pure: the ranks to blame for a hang.

    ``progress``: rank -> its position (a step, or (step, collectives issued): anything
    ordered). Ranks behind the furthest are stuck;
    if all are level, the ones whose process is stopped (``stopped``) or did not
    answer the stack dump (``silent``)."""
    if not progress:
        return sorted(set(stopped) | set(silent))
    best = max(progress.values())
    behind = sorted(r for r, step in progress.items() if step < best)
    return behind or sorted(set(stopped) | set(silent))
