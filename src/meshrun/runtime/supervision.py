"""How the watchdog judges a job: every supervision option declared once.

Each field of :class:`Supervision` is one option: its default is the field's default, and its
metadata says the flag's help, the smallest value it takes and whether ``--help`` shows it.
The CLI builds ``--node-timeout``, ``--hang-timeout``, ``--slow-window``, ``--slow-factor``
and the hidden ``--beat`` from these fields, reads each from its flag or its
``MESHRUN_<NAME>`` variable (a flag beats its variable), and docs/guide.md's flag table names
the same defaults (a test compares them).

``beat`` is the watchdog's period: one heartbeat, one read of node 0's watch, one judgement
per beat. It is hidden: at its default (1 s) a node is named within its timeout at 1/15 of
a core's second per beat; the tests that inject failures run at 0.2 s so that a node
timeout of 1 s means five missed beats, not one. Every other wait of the supervision is
counted in beats or seconds as its comment says.

Pure: no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


def _option(default: float, help_text: str, minimum: float = 0.0, *, kind: str = "seconds",
            hidden: bool = False, minimum_beats: float = 0.0) -> Any:
    """One option: ``minimum`` in its unit, or ``minimum_beats`` beats (whichever is more)."""
    return field(default=default, metadata={"help": help_text, "minimum": minimum,
                                            "minimum_beats": minimum_beats, "kind": kind,
                                            "hidden": hidden})


@dataclass(frozen=True)
class Supervision:
    """The watchdog's settings (see :mod:`meshrun.runtime.watchdog`)."""

    node_timeout: float = _option(15.0, "a node whose heartbeat is silent this long is lost",
                                  minimum_beats=2.0)
    hang_timeout: float = _option(300.0, "no rank progressing this long (no collective "
                                         "completed, no step reported) is a hang (0 = off)")
    slow_window: float = _option(30.0, "name a node whose ranks are slow this long (0 = off)")
    slow_factor: float = _option(1.25, "slow: at least X times the other nodes' median time "
                                       "working (not waiting for the others)", minimum=1.0,
                                 kind="factor")
    status_every: float = _option(60.0, "node 0 prints the job's status line (step, "
                                         "steps/s, ETA, slowest node, last checkpoint) this "
                                         "often (0 = off)")
    beat: float = _option(1.0, "the watchdog's period (heartbeat, judgement); tests only",
                          minimum=0.05, hidden=True)
    # not options: after a local worker failure, a node silent this many beats is lost
    suspicion_beats: float = 5.0

    @property
    def suspicion(self) -> float:
        """Seconds of silence that make a node lost once this node's workers failed: five
        beats (5 s at the default beat), never more than the node timeout."""
        return min(self.node_timeout, self.suspicion_beats * self.beat)

    def minimum(self, name: str) -> float:
        """The smallest value option ``name`` takes at this beat."""
        meta = next(f.metadata for f in fields(self) if f.name == name)
        return max(meta["minimum"], meta["minimum_beats"] * self.beat)


def options() -> list[tuple[str, Any]]:
    """(field name, its metadata and default) of every option; ``beat`` first, which the
    others' smallest values may be counted in."""
    found = [(f.name, {**f.metadata, "default": f.default}) for f in fields(Supervision)
             if f.metadata]
    return sorted(found, key=lambda item: item[0] != "beat")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    return "MESHRUN_" + name.upper()
