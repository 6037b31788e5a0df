"""The run's timeline: which of a node's own lines are events, recorded as they are written.

Every line meshrun writes on a node (its own, not the workers') goes through the node's
:class:`~meshrun.runtime.logs.LogRouter`, which stamps it in ``node<k>.log``; a line that is
an event of the run also becomes one record in ``events.node<k>.jsonl``, at the same time::

    {"event": "timeline", "kind": "restart", "node": 1, "time": 1764216000.123,
     "line": "meshrun: restarting node 1's workers after the hang (restart 1 of 1); ..."}

``kind`` is one of :data:`KINDS` (the first whose pattern matches the line after
``meshrun: ``), ``start`` for the node's first line and ``end`` for its last (written when
the node closes its logs, unless the last line was an event already). The run's page
(:mod:`meshrun.reports.page`) draws one lane per node from these records, so what the page
shows is what the file holds. The straggler notices and status lines in the same file are
records of their own (``node-slow``, ``status``): the timeline has the notice's console
line as its ``slow`` event.

Pure: no I/O, no torch.
"""

from __future__ import annotations

import json
import re

EVENT = "timeline"   # the records' "event" field
LINE_MAX = 500       # a record keeps this much of its line

KINDS: list[tuple[str, re.Pattern[str]]] = [  # (kind, pattern on the line after "meshrun: ")
    ("joined", re.compile(r"^all \d+ nodes joined")),
    ("preflight", re.compile(r"^preflight: ")),
    ("workers", re.compile(r"^starting \d+ workers?: ")),
    ("restart", re.compile(r"^restarting node |^torch's agent restarts node ")),
    ("lost", re.compile(r"is lost \(|^job stopped: node \d+ .* is lost")),
    ("hang", re.compile(r"^job hung")),
    ("slow", re.compile(r" is slow: ")),
    ("recovered", re.compile(r" is no longer slow")),
    ("membership", re.compile(r"takes its seat|goes on with|grows to|waits as a spare|is back")),
    ("done", re.compile(r"finished successfully")),
    ("failed", re.compile(r"^the job failed because|exited with code|was killed by|^error: ")),
]


def kind_of(line: str) -> str | None:
    """The event ``line`` (one of meshrun's own, as written to the node log) is, or None."""
    if not line.startswith("meshrun: "):
        return None
    said = line[len("meshrun: "):]
    return next((kind for kind, pattern in KINDS if pattern.search(said)), None)


def record(kind: str, node: int, at: float, line: str) -> str:
    """The JSON line of one timeline event."""
    return json.dumps({"event": EVENT, "kind": kind, "node": node, "time": round(at, 3),
                       "line": line[:LINE_MAX]})


def read(text: str) -> tuple[list[dict], int]:
    """The timeline records of an ``events.node<k>.jsonl`` text, and how many of its lines
    did not parse (a record cut by a full disk, a foreign line)."""
    found, bad = [], 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        if isinstance(rec, dict) and rec.get("event") == EVENT \
                and isinstance(rec.get("time"), (int, float)) and isinstance(rec.get("kind"), str):
            found.append(rec)
    return found, bad
