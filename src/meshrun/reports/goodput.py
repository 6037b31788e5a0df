"""Goodput: where a run's wall time went. Pure and torch-free.

The run's wall time (its first node's first line to the last line any node wrote,
:mod:`meshrun.reports.run_info`) is split into six parts that add up to it exactly:

- **start-up**: from the start to the first step's record (the launch, the join, the
  preflight, the workers' imports and the first step, which includes lazy initialisation);
- **productive**: the intervals between consecutive step records whose steps count, that
  is, were not trained again later, less the checkpoint saving inside them;
- **checkpoints**: the time the script spent saving checkpoints (the recipes record it in
  each record, ``checkpoint_s``: the saving since the record before);
- **lost work**: the intervals of steps that were trained again after a restart (a step
  whose record is followed, later in the run, by a record of the same step or an earlier
  one);
- **recovery**: from the last record before a restart to the first step's record after it
  (the failure, its detection, the restart, the workers' imports, the resume);
- **end**: from the last record to the run's end (the final teardown).

A restart shows in the records as a first step (``first_step``: the recipes mark the
first step of every start) or as a step that does not follow the one before. The figures
come from step records with a time: the recipes' ``metrics.jsonl`` (``at``) and
``meshrun.log``'s (``time``); a run without them has no goodput, and says why. The
records' granularity is the logging interval: an interval between two records is
classified as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

PARTS = ("startup_s", "productive_s", "checkpoint_s", "lost_s", "recovery_s", "end_s")


@dataclass(frozen=True)
class Goodput:
    wall_s: float
    startup_s: float
    productive_s: float
    checkpoint_s: float
    lost_s: float
    recovery_s: float
    end_s: float
    restarts: int          # restarts seen in the records
    steps_again: int       # step records superseded by a later run of the same step

    @property
    def productive_share(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        data = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        data["productive_share"] = round(self.productive_share, 4)
        return data


def record_time(record: dict[str, Any]) -> float | None:
    """When a step record was written: the recipes' ``at``, ``meshrun.log``'s ``time``."""
    for key in ("at", "time"):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def compute(started: float | None, ended: float | None,
            records: Sequence[dict[str, Any]]) -> tuple[Goodput | None, str]:
    """(the goodput of a run from ``started`` to ``ended`` (Unix times) with step
    ``records`` in the order written, ""), or (None, why not)."""
    if started is None or ended is None or ended <= started:
        return None, "the run's start and end are not in its node logs"
    # a rerun under one run id continues metrics.jsonl: an earlier run's records are not this
    # run's (they come before its start)
    marks = [(t, r["step"], float(r.get("checkpoint_s") or 0.0), bool(r.get("first_step")))
             for r in records if (t := record_time(r)) is not None and t >= started
             and isinstance(r.get("step"), int)]
    if not marks:
        return None, ("no step records with a time (a recipe's metrics.jsonl, or "
                      "meshrun.log({...}) from a script)")
    marks.sort(key=lambda m: m[0])
    # a record counts unless a later one has its step or an earlier one (trained again)
    kept = [True] * len(marks)
    lowest = None
    for i in range(len(marks) - 1, -1, -1):
        step = marks[i][1]
        if lowest is not None and lowest <= step:
            kept[i] = False
        lowest = step if lowest is None else min(lowest, step)
    parts = dict.fromkeys(PARTS, 0.0)
    restarts = 0
    previous_t, previous_step = started, None
    for i, (t, step, saving, first) in enumerate(marks):
        span = max(0.0, min(t, ended) - max(previous_t, started))
        if i == 0:
            parts["startup_s"] += span
        elif first or step <= previous_step:
            restarts += 1
            parts["recovery_s"] += span
        else:
            saving = min(saving, span)
            parts["checkpoint_s"] += saving
            parts["productive_s" if kept[i] else "lost_s"] += span - saving
        previous_t, previous_step = max(previous_t, t), step
    wall = ended - started
    parts["end_s"] = max(0.0, wall - sum(parts.values()))
    return Goodput(wall_s=wall, restarts=restarts, steps_again=kept.count(False),
                   **parts), ""


def line(g: Goodput) -> str:
    """``87.3% productive of 10 min 2 s: start-up 25 s, ...`` for ``meshrun report``."""
    def s(x: float) -> str:
        return f"{x:.0f} s" if x >= 10 else f"{x:.1f} s"

    return (f"{g.productive_share:.1%} productive of {s(g.wall_s)}: start-up "
            f"{s(g.startup_s)}, training {s(g.productive_s)}, checkpoints {s(g.checkpoint_s)}, "
            f"recovery {s(g.recovery_s)}, lost work {s(g.lost_s)}, end {s(g.end_s)}"
            + (f" ({g.restarts} restart{'s' if g.restarts != 1 else ''})" if g.restarts else ""))
