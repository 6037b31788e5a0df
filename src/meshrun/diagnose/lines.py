"""Reading log lines: the prefixes that say who wrote a line (``[rank3]:``, ``[node 1]``,
``[1,3]<stdout>:``, NCCL's ``host:pid:tid [dev]``), torchrun's ChildFailedError block, the
first line of a rank that reads like an error, and what a set of files says about hosts and
failed ranks. Pure."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .causes import (
    BANNER_BRIEF,
    BANNER_NODE,
    BANNER_RANKS,
    MESHRUN_DETAIL,
    MESHRUN_FAILED,
    MESHRUN_FIRST_ERROR,
)
from .records import WorkerFailure

# --- reading lines ----------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# [node K] (simulate) | [rankN]: (meshrun, torch) | [1,N]<stdout>: (Open MPI) | [roleN]: (torchrun)
_PREFIX = re.compile(r"\[(?:node (?P<node>\d+)\] |rank(?P<rank>\d+)\]: ?|\d+,(?P<mpi>\d+)\]"
                     r"<std(?:out|err)>: ?|(?!rank\d)[A-Za-z][A-Za-z_]*?(?P<local>\d+)\]: ?)")
_NCCL_PREFIX = re.compile(r"^(?P<host>[A-Za-z0-9][\w.\-]*):\d+:\d+ \[\d+\] ")
# a time before the line: meshrun's own lines in node<k>.log, `kubectl logs --timestamps`
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? ")
_FILE_RANK = re.compile(r"(?:^|[^a-z])rank(\d+)(?:\D|$)", re.IGNORECASE)
_FILE_NODE = re.compile(r"(?:^|[^a-z])node(\d+)(?:\D|$)", re.IGNORECASE)


@dataclass
class Line:
    no: int
    raw: str
    body: str
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    node: int | None = None
    skip: bool = False  # an entry under "Failures:" (a rank the agent stopped afterwards)
    idx: int = 0        # position in its file's line list
    quoted: bool = False  # source code quoted inside a Python traceback (never matched)
    in_block: bool = False  # inside torchrun's ChildFailedError block


def peel(raw: str) -> tuple[str, int | None, int | None, str | None, int | None]:
    """(text, rank, local_rank, host, node) of a line with its prefixes removed."""
    body = _ANSI.sub("", raw) if "\x1b" in raw else raw
    if body[:1].isdigit() and (m := _STAMP.match(body)):
        body = body[m.end():]
    rank = local = node = None
    host = None
    while body.startswith("[") and (m := _PREFIX.match(body)):
        if m.group("node"):
            node = int(m.group("node"))
        elif m.group("rank") or m.group("mpi"):
            rank = int(m.group("rank") or m.group("mpi"))
        else:
            local = int(m.group("local"))
        body = body[m.end():]
    if ":" in body[:80] and (m := _NCCL_PREFIX.match(body)):
        host = m.group("host")
        body = body[m.end():]
    return body.rstrip(), rank, local, host, node


# --- torchrun's ChildFailedError block ---------------------------------------------------------

_ENTRY_START = re.compile(r"^\s*\[(\d+)\]:\s*$")
_ENTRY_KEY = re.compile(r"^\s{0,4}(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_SECTION_ROOT = re.compile(r"Root Cause \(first observed failure\):")
_SECTION_OTHERS = re.compile(r"^\s*Failures:\s*$")
_SEPARATOR = re.compile(r"^\s*(?:={5,}|-{5,})\s*$")


def parse_entries(lines: Sequence[Line]) -> list[tuple[WorkerFailure, int, int]]:
    """(failure, first index, last index) for every entry of every ChildFailedError block."""
    out: list[tuple[WorkerFailure, int, int]] = []
    section: str | None = None
    i = 0
    while i < len(lines):
        text = lines[i].body
        if _SECTION_ROOT.search(text):
            section = "root"
        elif _SECTION_OTHERS.match(text):
            section = "others"
        elif section and _ENTRY_START.match(text):
            start, fields, key = i, {}, None
            i += 1
            while i < len(lines):
                t = lines[i].body
                if _SEPARATOR.match(t) or _ENTRY_START.match(t) or _SECTION_ROOT.search(t):
                    break
                km = _ENTRY_KEY.match(t)
                if km and (km.group(1) not in fields):
                    key = km.group(1)
                    fields[key] = km.group(2).strip()
                elif key == "traceback":
                    fields["traceback"] += "\n" + (t[2:] if t.startswith("  ") else t.strip())
                i += 1
            failure = _entry(fields, section == "root", lines[start].no)
            if failure is not None:
                out.append((failure, start, i - 1))
            if i < len(lines) and lines[i].body.strip().startswith("====="):
                section = None
            continue
        elif _SEPARATOR.match(text) and text.strip().startswith("=") and section == "root":
            section = None
        i += 1
    return out


def _entry(fields: Mapping[str, str], root: bool, line_no: int) -> WorkerFailure | None:
    rank_m = re.match(r"(\d+)(?: \(local_rank: (\d+)\))?", fields.get("rank", ""))
    if not rank_m:
        return None
    exit_m = re.match(r"(-?\d+)(?: \(pid: (\d+)\))?(?:\s*\((SIG\w+)\))?",
                      fields.get("exitcode", ""))
    error_file = fields.get("error_file") or None
    return WorkerFailure(
        rank=int(rank_m.group(1)),
        local_rank=int(rank_m.group(2)) if rank_m.group(2) else None,
        host=fields.get("host") or None,
        exitcode=int(exit_m.group(1)) if exit_m else None,
        pid=int(exit_m.group(2)) if exit_m and exit_m.group(2) else None,
        signal=exit_m.group(3) if exit_m and exit_m.group(3) else None,
        error_file=None if error_file in (None, "<N/A>") else error_file,
        time=fields.get("time") or None,
        traceback=fields.get("traceback", "").rstrip(),
        root=root, line_no=line_no)


def parse_worker_failures(text: str) -> list[WorkerFailure]:
    """Every entry of torchrun's ChildFailedError blocks in ``text`` (root cause and others)."""
    lines = [Line(no, raw, peel(raw)[0]) for no, raw in enumerate(text.splitlines(), 1)]
    return [failure for failure, _, _ in parse_entries(lines)]


def parse_root_cause(text: str) -> WorkerFailure | None:
    """The "Root Cause (first observed failure)" entry of torchrun's block, or None."""
    return next((f for f in parse_worker_failures(text) if f.root), None)


# --- first real error line (the unknown path) --------------------------------------------------

_NOISE = re.compile(
    r"^\s*(?:frame #\d+|#\d+ |0x[0-9a-f]+ in |Exception raised from |C\+\+ CapturedTraceback|"
    r"<omitting python frames>)"
    r"|^\[?[WI]\d{4} |site-packages/torch/distributed/elastic/|ChildFailedError|\bFAILED$|"
    r"To enable traceback see|^\s*(?:error_file|traceback|exitcode|time|host|rank)\s*:|"
    r"^meshrun:\s+(?:logs|also failed):|Sending process \d+ closing signal")
# A line that reads like an error (also the launcher's "first error" of a failed rank).
ERRORISH = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b|\berror:|\bFAILED\b|terminate called|"
                      r"Fatal Python error|Segmentation fault|core dumped|(?-i:\bFATAL\b|^Killed$)",
                      re.IGNORECASE)
STRONG = re.compile(r"terminate called after throwing|Fatal Python error|meshrun: error:|"
                     r"core dumped")
TB_START = "Traceback (most recent call last):"
_TB_LINK = re.compile(r"^(?:During handling of the above exception|The above exception was the "
                      r"direct cause)")


def reads_like_error(text: str, loose: bool = True) -> bool:
    """Whether ``text`` reads like an error and is not launcher noise (a C++ frame, torch's
    own elastic lines); not ``loose``: only an unmistakable one (an uncaught C++ exception,
    a fatal Python error, meshrun's own error line)."""
    if not loose:
        return STRONG.search(text) is not None
    return ERRORISH.search(text) is not None and _NOISE.search(text) is None


def first_error_line(lines: Sequence[Line], *, loose: bool = True) -> tuple[Line | None, bool]:
    """(the first real error line, whether it ends a Python traceback).

    Without a traceback, ``loose`` also accepts the first line that reads like an error.
    """
    fallback: Line | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.skip:
            i += 1
            continue
        if line.body.strip() == TB_START:
            j = i + 1
            while j < len(lines) and (not lines[j].body.strip() or lines[j].body[:1] in " \t"):
                j += 1
            if j < len(lines) and not _TB_LINK.match(lines[j].body):
                end = lines[j]
                if "ChildFailedError" not in end.body:  # the launcher's own, not an error
                    return end, True
            i = j + 1
            continue
        if fallback is None and reads_like_error(line.body, loose):
            fallback = line
        i += 1
    return fallback, False


@dataclass
class File:
    name: str
    text: str
    lines: list[Line] = field(default_factory=list)
    rank: int | None = None
    node: int | None = None

_OWN_SUMMARY = ("meshrun: diagnosis: ", "meshrun diagnose: ")


def load(name: str, text: str) -> File:
    base = os.path.basename(name)
    rank_m, node_m = _FILE_RANK.search(base), _FILE_NODE.search(base)
    handle = File(name, text, rank=int(rank_m.group(1)) if rank_m else None,
                   node=int(node_m.group(1)) if node_m else None)
    in_traceback: dict[tuple, bool] = {}  # per writer: inside "Traceback (most recent ...)"
    numbers = getattr(text, "numbers", None)  # a large log read in part (engine.Kept)
    for idx, raw in enumerate(text.splitlines()):
        no = numbers[idx] if numbers is not None and idx < len(numbers) else idx + 1
        body, rank, local, host, node = peel(raw)
        line = Line(no, raw, body, rank if rank is not None else handle.rank, local, host,
                     node if node is not None else handle.node, idx=idx)
        writer = (line.rank, line.local_rank, line.node)
        if body.startswith(_OWN_SUMMARY):
            line.skip = True  # an earlier diagnosis, printed into the log: not evidence
        if body.strip() == TB_START:
            in_traceback[writer] = True
        elif in_traceback.get(writer):
            if body[:1] in (" ", "\t"):
                line.quoted = True
            else:
                in_traceback[writer] = False
        handle.lines.append(line)
    return handle


Said = dict[int, tuple[str, int, "Line"]]  # rank -> (text, file index, line)


def learn_hosts(files: Sequence[File]) -> tuple[dict[int, str], dict[int, str], set[int],
                                                  Said]:
    """(rank -> host, node -> host, failed ranks, what meshrun said about each failed rank:
    its "first error:" line, else its "rank R ... exited with code N" line)."""
    rank_host: dict[int, str] = {}
    node_host: dict[int, str] = {}
    failed: set[int] = set()
    first_error: Said = {}
    for fi, f in enumerate(files):
        node_of_file: int | None = f.node
        last_failed: int | None = None
        for line in f.lines:
            brief = BANNER_BRIEF.match(line.body)
            if m := brief or BANNER_NODE.match(line.body):
                node_of_file = int(m.group("node"))
            if line.node is None and node_of_file is not None:
                line.node = node_of_file  # a node log without [node K] prefixes
            if m := brief or BANNER_RANKS.match(line.body):
                first = int(m.group("first"))
                last = int(m.group("last") or first)
                for r in range(first, last + 1):
                    rank_host.setdefault(r, m.group("host"))
                node = line.node if line.node is not None else node_of_file
                if node is not None:
                    node_host.setdefault(node, m.group("host"))
            if m := MESHRUN_FAILED.search(line.body):
                rank, host = int(m.group("rank")), m.group("host")
                rank_host.setdefault(rank, host)
                node_host.setdefault(int(m.group("node")), host)
                failed.add(rank)
                last_failed = rank
                line.rank = rank
                first_error.setdefault(rank, (m.group(0).removeprefix("meshrun: "), fi, line))
            elif last_failed is not None and MESHRUN_DETAIL.match(line.body):
                line.rank = last_failed  # "meshrun:   first error: ..." belongs to that rank
                if m := MESHRUN_FIRST_ERROR.search(line.body):
                    first_error[last_failed] = (m.group("line"), fi, line)
            else:
                last_failed = None
        for failure, start, end in parse_entries(f.lines):
            if failure.host:
                rank_host.setdefault(failure.rank, failure.host)
            if failure.root:
                failed.add(failure.rank)
            for line in f.lines[start:end + 1]:
                line.rank, line.host = failure.rank, failure.host or line.host
                line.local_rank = failure.local_rank
                line.skip = not failure.root
                line.in_block = True
    return rank_host, node_host, failed, first_error
