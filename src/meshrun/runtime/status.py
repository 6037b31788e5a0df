"""Node 0's status line while the job runs: where it is, how fast, who is slowest, when it
last saved, when it ends. Pure: node 0's watchdog hands it each beat's progress values,
its clock, the straggler check's summary and the recipe's newest checkpoint; it says when a
line is due (every ``every`` seconds, ``--status-every``) and what it reads:

    meshrun: status: step 120 of 600, 3.10 steps/s, ETA 2 min 35 s; slowest node 1 at
    1.05x; last checkpoint step 100, 40 s ago

- the step is the furthest step any rank reported (:func:`meshrun.progress`, which the
  recipes and ``meshrun.log`` call); a script that reports none is counted in collectives
  (the worker shim's count, rank 0's): ``collectives 5210, 812/s``;
- the rate is over the time since the previous line; the ETA, where the step count is known
  (a recipe's ``train.steps``), is the steps left at that rate;
- the slowest node is the straggler check's (the node whose ratio to the others is highest,
  as ``node_steps.json`` gives it), left out when the check is off or has no figure;
- the checkpoint is a recipe's newest complete one (when it was first seen), left out for a
  script meshrun cannot see the checkpoints of.

The same figures (``figures``: steps/s or collectives/s, the ETA, the slowest ratio, the
checkpoint's age) go to TensorBoard when it is installed, under ``<log dir>/tensorboard/
meshrun`` (a run of its own beside the recipes' scalars), at the step they were read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import protocol

PREFIX = "meshrun: status: "   # how the line begins (a terminal keeps it in place: logs.py)


def duration(seconds: float, *, below: float = 90, digits: int = 0) -> str:
    """``42 s`` under ``below`` seconds (``digits`` after the point), then ``3 min 05 s``,
    then ``2 h 07 min`` (the status line; ``meshrun report`` with 120 and 1)."""
    if seconds < below:
        return f"{seconds:.{digits}f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


@dataclass
class Status:
    every: float                      # seconds between lines (0: none)
    total_steps: int | None = None    # a recipe's train.steps, for the ETA
    _last: tuple[float, int, str] | None = None       # (time, position, unit) of the last line
    _checkpoint: tuple[int, float] | None = None       # (newest step, when first seen)
    _started: float | None = None
    history: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)   # the last line's numbers (TensorBoard)

    def due(self, now: float) -> bool:
        """Whether a line may be due at ``now`` (the values are read only then)."""
        if self.every <= 0:
            return False
        if self._started is None:
            self._started = now
        since = self._last[0] if self._last is not None else self._started
        return now - since >= self.every

    def checkpoint(self, now: float, step: int | None) -> None:
        """The recipe's newest complete checkpoint this beat (None or -1: none / unknown)."""
        if step is not None and step >= 0 and (self._checkpoint is None
                                               or step != self._checkpoint[0]):
            self._checkpoint = (step, now)

    def beat(self, now: float, values: Mapping[int, str],
             summary: Mapping | None = None) -> str | None:
        """The line when one is due, else None."""
        if not self.due(now):
            return None
        position, unit = _position(values)
        if position is None:
            return None            # nobody reported yet
        parts = []
        rate = None
        figures: dict = {"position": position}
        if self._last is not None and self._last[2] == unit and now > self._last[0]:
            rate = (position - self._last[1]) / (now - self._last[0])
        if unit == "step":
            where = f"step {position}" + (f" of {self.total_steps}" if self.total_steps else "")
            if rate is not None:
                where += f", {rate:.2f} steps/s"
                figures["steps_per_s"] = rate
                if self.total_steps and rate > 0 and position < self.total_steps:
                    figures["eta_s"] = (self.total_steps - position) / rate
                    where += f", ETA {duration(figures['eta_s'])}"
        else:
            where = f"collectives {position}" + (f", {rate:.0f}/s" if rate is not None else "")
            if rate is not None:
                figures["collectives_per_s"] = rate
        parts.append(where)
        slowest = _slowest(summary)
        if slowest is not None:
            parts.append(f"slowest node {slowest[0]} at {slowest[1]:.2f}x")
            figures["slowest_ratio"] = slowest[1]
        if self._checkpoint is not None:
            step, seen = self._checkpoint
            parts.append(f"last checkpoint step {step}, {duration(now - seen)} ago")
            figures["checkpoint_age_s"] = now - seen
        self._last = (now, position, unit)
        self.figures = figures
        line = PREFIX + "; ".join(parts)
        self.history.append(line)
        return line


def _position(values: Mapping[int, str]) -> tuple[int | None, str]:
    """(the furthest step any rank reported, "step"), else (rank 0's collectives,
    "collectives"), else (None, "")."""
    steps, colls = [], []
    for rank, raw in values.items():
        if not raw:
            continue
        try:
            p = protocol.Progress.decode(raw)
        except ValueError:
            continue
        if p.step >= 0:
            steps.append(p.step)
        if p.coll >= 0 and rank == 0:
            colls.append(p.coll)
    if steps:
        return max(steps), "step"
    if colls:
        return colls[0], "collectives"
    return None, ""


def _slowest(summary: Mapping | None) -> tuple[int, float] | None:
    rows = [r for r in (summary or {}).get("nodes", []) if isinstance(r.get("ratio"), float)]
    if len(rows) < 2:
        return None
    top = max(rows, key=lambda r: r["ratio"])
    return int(top["node"]), float(top["ratio"])
