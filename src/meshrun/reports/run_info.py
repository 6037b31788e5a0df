"""What meshrun itself knows of a run, for any script: read from the files every node left in
the run folder, never from the script's own records. Pure and torch-free.

* ``node<k>.log``: meshrun's own lines carry their time (UTC, RFC 3339): the first is the
  node's start, the last its end; ``starting N workers ... (X s after start ...)`` once per
  membership epoch; ``... finished successfully``;
* ``raw/node<k>-<time>/attempt<n>``: one folder per attempt of torch's agent (a restart
  after a failure with ``--max-restarts``, or a hang restart);
* ``cause.node<k>.json``: the job's first cause, as the nodes agreed on it;
* ``diagnosis.node<k>.json``: a node's diagnosis of its own logs.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import time
from dataclasses import dataclass, field

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z ")
_NODE_LOG = re.compile(r"^node(\d+)\.log$")
_STARTED = re.compile(r"meshrun: starting \d+ workers?: .*\((\d+(?:\.\d+)?) s after start")
_EPOCH = re.compile(r"membership epoch (\d+)")
_DONE = "finished successfully"
_FAILED = re.compile(r"meshrun: (?:rank \d+ on node \d+ .*(?:exited with code|was killed by)|"
                     r"the job failed because|node \d+ (?:failed|stopped)|error: )")
_HANG_RESTART = "meshrun: restarting node"


@dataclass
class RunInfo:
    """The run as meshrun saw it; None where the folder does not say."""

    nodes_seen: int = 0                  # nodes that left a log here
    started: float | None = None         # Unix time of the first node's first line
    ended: float | None = None           # of the last line any node wrote
    startup_s: float | None = None       # node 0's start to its first workers' start
    outcome: str = "unknown"             # succeeded | failed | unfinished | unknown
    attempts: int = 0                    # the most attempts any node's agent made
    epochs: int = 0                      # membership epochs (a spare took a seat)
    hang_restarts: int = 0
    cause: str = ""                      # the job's first cause, one line
    diagnosis: list[str] = field(default_factory=list)   # codes, root cause first

    @property
    def wall_s(self) -> float | None:
        if self.started is None or self.ended is None:
            return None
        return max(0.0, self.ended - self.started)

    @property
    def restarts(self) -> int:
        return max(self.attempts - 1, 0) + self.epochs


def stamp_time(line: str) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    try:
        seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:   # the shape of a stamp, not a date (month 13): no time
        return None
    return seconds + (float("0." + m.group(2)) if m.group(2) else 0.0)


def read(path: str) -> RunInfo:
    """The :class:`RunInfo` of run folder ``path`` (what is missing stays unknown)."""
    info = RunInfo()
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return info
    logs = sorted((int(m.group(1)), n) for n in names if (m := _NODE_LOG.match(n)))
    info.nodes_seen = len(logs)
    done = failed = 0
    for node, name in logs:
        first = last = None
        node_done = node_failed = False
        try:
            with open(os.path.join(path, name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    when = stamp_time(line)
                    if when is None:
                        continue
                    first = when if first is None else first
                    last = when
                    body = line.split(" ", 1)[1] if " " in line else line
                    if node == 0 and info.startup_s is None and (m := _STARTED.search(body)):
                        info.startup_s = float(m.group(1))
                    if (m := _EPOCH.search(body)) and body.startswith("meshrun: starting"):
                        info.epochs = max(info.epochs, int(m.group(1)))
                    if body.startswith(_HANG_RESTART):
                        info.hang_restarts += node == 0
                    node_done = node_done or _DONE in body
                    node_failed = node_failed or _FAILED.search(body) is not None
        except OSError:
            continue
        if first is not None:
            info.started = first if info.started is None else min(info.started, first)
            info.ended = last if info.ended is None else max(info.ended, last)
        done += node_done and not node_failed
        failed += node_failed
    info.attempts = _attempts(path)
    info.cause = _cause(path, names)
    info.diagnosis = _diagnosis(path, names)
    if failed or info.cause:
        info.outcome = "failed"
    elif logs and done == len(logs):
        info.outcome = "succeeded"
    elif logs:
        info.outcome = "unfinished"   # no end recorded: still running, or killed outright
    return info


def _attempts(path: str) -> int:
    raw = os.path.join(path, "raw")
    most = 0
    try:
        for node in os.listdir(raw):
            try:
                seen = {d.split("-")[0] for d in os.listdir(os.path.join(raw, node))
                        if d.startswith("attempt")}
            except OSError:
                continue
            most = max(most, len(seen))
    except OSError:
        pass
    return most


def _cause(path: str, names: list[str]) -> str:
    found = []
    for name in names:
        if name.startswith("cause.node") and name.endswith(".json"):
            try:
                with open(os.path.join(path, name), encoding="utf-8") as f:
                    data = json.load(f)
                found.append((float(data.get("time", 0)), data))
            except (OSError, ValueError, TypeError, AttributeError):
                continue
    if not found:
        return ""
    data = min(found, key=lambda pair: pair[0])[1]
    try:
        said = f": {data['line']}" if data.get("line") else ""
        return f"rank {data['rank']} on node {data['node']} ({data['host']}) {data['how']}{said}"
    except (KeyError, TypeError):
        return ""


def _diagnosis(path: str, names: list[str]) -> list[str]:
    codes: list[str] = []
    for name in names:
        if name.startswith("diagnosis.node") and name.endswith(".json"):
            try:
                with open(os.path.join(path, name), encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            rows = data.get("diagnoses", data) if isinstance(data, dict) else data
            for row in rows if isinstance(rows, list) else []:
                code = row.get("code") if isinstance(row, dict) else None
                if isinstance(code, str) and code not in codes:
                    codes.append(code)
    return codes
