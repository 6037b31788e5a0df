"""The engine: every line of every file against the catalog, then suppression, the
``unknown`` failures no signature explains, one diagnosis per code and rank, root cause
first. :func:`diagnose_files` (the only function that reads files) and
:func:`diagnose_text`."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..redact import redact_text
from .catalog import ANY, CATALOG, UNKNOWN_CODE
from .lines import (
    STRONG,
    TB_START,
    File,
    Line,
    Said,
    first_error_line,
    learn_hosts,
    load,
    parse_entries,
    peel,
)
from .records import (
    ADVICE,
    EFFECT,
    MAX_LINE,
    UNKNOWN,
    Diagnosis,
    Hit,
    Signature,
    WorkerFailure,
    text_of,
)

# --- diagnosing ---------------------------------------------------------------------------------

@dataclass
class _Found:
    diagnosis: Diagnosis
    order: tuple[int, int]
    suppresses: tuple[str, ...]


def _confirmed(sig: Signature, found: re.Match, text: str,
               job_text: Callable[[], str]) -> bool:
    if sig.confirm is None:
        return True
    if callable(sig.confirm):
        return sig.confirm(found, job_text())
    values = {k: re.escape(v) for k, v in found.groupdict().items() if v is not None}
    try:
        pattern = sig.confirm.format(**values)
    except KeyError:  # this pattern does not capture what the check needs: nothing to confirm
        return True
    return re.search(pattern, text) is not None


def diagnose_text(text: str, *, name: str = "<text>", job: Any = None,
                  device: str | None = None) -> list[Diagnosis]:
    """Diagnose one log text already in memory (see :func:`diagnose_files`)."""
    return _diagnose([(name, text)], job, device)


def diagnose_files(paths: Iterable[str | os.PathLike], *, job: Any = None,
                   device: str | None = None) -> list[Diagnosis]:
    """Diagnose the logs of one run: files, or folders (their ``*.log`` files, not ``raw/``,
    nor an earlier run's with the same id: ``earlier/<n>/``, or a file kept aside as
    ``<name>.<time>.log``).

    ``device`` is what meshrun planned for the run ("cpu" or "cuda"); without it, a run
    folder's ``plan.node<k>.json`` says. Some causes depend on it (a script forcing CUDA
    on a CPU run is the script's fault, not the torch build's).

    Returns the diagnoses root cause first (see the module docstring). A path that does
    not exist or cannot be read raises :class:`~meshrun.errors.UsageError`.
    """
    named: list[tuple[str, str]] = []
    for path in paths:
        path = os.fspath(path)
        if os.path.isdir(path):
            device = device or _planned_device(path)
            # this run's logs only: not those an earlier run with the same id left behind,
            # kept as <name>.<its time>[-n].log (meshrun.runtime.logs.keep_previous)
            inner = sorted(p for p in os.listdir(path)
                           if p.endswith(".log") and not _KEPT_ASIDE.search(p))
            if not inner:
                raise UsageError(f"log folder {path} holds no *.log files", subject="LOGFILE",
                                 hint="pass a run's folder (<log-dir>/<run-id>) or its log files",
                                 code="log-folder-empty")
            named.extend((os.path.join(path, p), _read(os.path.join(path, p))) for p in inner)
        else:
            named.append((path, _read(path)))
    return _diagnose(named, job, device)


def _planned_device(folder: str) -> str | None:
    """The device a run folder's plan names (``plan.node<k>.json``), if any."""
    import json

    for name in sorted(os.listdir(folder)):
        if name.startswith("plan.node") and name.endswith(".json") and \
                not _KEPT_ASIDE_JSON.search(name):
            try:
                with open(os.path.join(folder, name)) as handle:
                    device = json.load(handle).get("device")
            except (OSError, ValueError, AttributeError):
                continue
            if device in ("cpu", "cuda"):
                return device
    return None


_KEPT_ASIDE_JSON = re.compile(r"\.\d{8}-\d{6}(?:-\d+)?\.json$")
_KEPT_ASIDE = re.compile(r"\.\d{8}-\d{6}(?:-\d+)?\.log$")


# A log larger than WHOLE_BYTES is read in part, in bounded memory and time whatever its
# size: its first HEAD_BYTES and last TAIL_BYTES whole, and from the part between only the
# lines with an error word (_MIDDLE), each Traceback with the TRACEBACK_LINES after it, at
# most MIDDLE_LINES of them. A failure's cause is almost always in the last lines (the run
# stops soon after it); the middle's lines keep an earlier first error (a rank that failed
# an hour before its peers timed out). Line numbers stay those of the file.
WHOLE_BYTES = 16 << 20
HEAD_BYTES = 256 << 10
TAIL_BYTES = 1 << 20
MIDDLE_LINES = 2_000
TRACEBACK_LINES = 40
_CHUNK = 8 << 20
# Few words, most starting with a capital, so that the scan runs at about 300 MB/s here.
_MIDDLE = re.compile(rb"Error|Exception|Traceback|NCCL|CUDA|Killed|FAIL|Errno|ERROR|SIG[A-Z]|"
                     rb"meshrun: |No space|No module|Xid|OOM|imed out|imeout")


class Kept(str):
    """A log's text read in part; ``numbers[i]``: the file's line number of its line i."""

    numbers: list[int]


def _read_big(path: str, size: int) -> Kept:
    keep: list[tuple[int, bytes]] = []     # (line number, line), in file order
    with open(path, "rb") as handle:
        head = handle.read(HEAD_BYTES)
        head = head[:head.rfind(b"\n") + 1] or head
        lines = head.splitlines()
        keep.extend(enumerate(lines, 1))
        number = len(lines)                 # lines before ``pos``
        pos = len(head)
        tail_at = max(pos, size - TAIL_BYTES)
        handle.seek(tail_at)
        newline = handle.read(1 << 16).find(b"\n")   # the tail starts at a line's start
        tail_at = tail_at + newline + 1 if newline >= 0 else tail_at
        middle, full = 0, False
        while pos < tail_at:
            handle.seek(pos)
            block = handle.read(min(_CHUNK, tail_at - pos))
            end = block.rfind(b"\n") + 1
            if end == 0:                    # one line longer than a chunk: take it whole
                end = len(block)
            chunk = block[:end]
            at, counted = 0, 0
            for found in () if full else _MIDDLE.finditer(chunk):
                start = chunk.rfind(b"\n", 0, found.start()) + 1
                if start < at:
                    continue                # this line was kept already
                stop = chunk.find(b"\n", found.start())
                stop = len(chunk) if stop < 0 else stop
                if b"Traceback" in chunk[start:stop]:
                    for _ in range(TRACEBACK_LINES):   # its frames and its last line
                        nxt = chunk.find(b"\n", stop + 1)
                        if nxt < 0:
                            break
                        stop = nxt
                number += chunk.count(b"\n", counted, start)
                counted = start
                for offset, line in enumerate(chunk[start:stop].split(b"\n")):
                    keep.append((number + 1 + offset, line))
                    middle += 1
                at = stop + 1
                if middle >= MIDDLE_LINES:  # enough: the rest of the middle is only counted
                    full = True
                    break
            number += chunk.count(b"\n", counted)
            pos += end
        handle.seek(pos)
        tail = handle.read()
    tail_lines = tail.splitlines()
    note = (f"meshrun diagnose: {path} is {size / 2**20:.0f} MB: read its first "
            f"{HEAD_BYTES >> 10} KB and last {TAIL_BYTES >> 10} KB whole, and between them "
            f"the lines with an error word ({middle} kept"
            + (", the first of them: the rest of the middle was not read" if full else "")
            + ")")
    keep.append((number, note.encode()))
    keep.extend(enumerate(tail_lines, number + 1))
    text = Kept("\n".join(line.decode("utf-8", "replace") for _, line in keep))
    text.numbers = [n for n, _ in keep]
    return text


def _read(path: str) -> str:
    if not os.path.exists(path):
        raise UsageError(f"log file {path} does not exist", subject="LOGFILE",
                         hint="pass the files under <log-dir>/<run-id>/, e.g. "
                              "logs/<run-id>/node0.log", code="log-not-found")
    try:
        if not os.path.isfile(path):    # a FIFO would block, a device never end
            raise UsageError(f"log file {path} is not a regular file (a FIFO, a device or a "
                             "socket)", subject="LOGFILE", hint="pass a log file",
                             code="log-unreadable")
        size = os.path.getsize(path)
        if size > WHOLE_BYTES:
            return _read_big(path, size)
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read log file {path} ({exc.strerror or exc})",
                         subject="LOGFILE", hint="check the path and its permissions",
                         code="log-unreadable") from None


def _diagnose(named: Sequence[tuple[str, str]], job: Any,
              device: str | None = None) -> list[Diagnosis]:
    files = [load(name, text) for name, text in named]
    rank_host, node_host, failed, first_error = learn_hosts(files)

    def host_of(line: Line, rank: int | None) -> str | None:
        if line.host:
            return line.host
        if rank is not None and rank in rank_host:
            return rank_host[rank]
        return node_host.get(line.node) if line.node is not None else None

    found: list[_Found] = []
    job_text = functools.cache(lambda: "\n".join(f.text for f in files))  # only if asked
    for fi, f in enumerate(files):
        for li, line in enumerate(f.lines):
            if line.skip or line.quoted or not line.body or not ANY.search(line.body):
                continue
            for sig in CATALOG:
                if sig.worker_only and line.rank is None:
                    continue
                match = sig.find(line.body)
                if match is None or not _confirmed(sig, match, f.text, job_text):
                    continue
                named_rank = match.groupdict().get("rank")
                rank = int(named_rank) if named_rank else line.rank
                following = tuple(x.body for x in f.lines[li + 1:li + 6])
                hit = Hit(match, line.body, rank, host_of(line, rank), following, job, device,
                          f.text, job_text() if callable(sig.confirm) else "",
                          tuple(x.body for x in f.lines[max(0, li - 30):li]
                                if line.rank is None or x.rank in (None, line.rank)))
                if sig.near is not None and not any(map(sig.near.search, hit.preceding)):
                    continue
                pairs = sig.expand(hit) if sig.expand else [(rank, None)]
                for r, h in pairs:
                    named_host = match.groupdict().get("host")
                    host = h or named_host or host_of(line, r)
                    cause = redact_text(text_of(sig.cause, hit))
                    priority = sig.priority(hit) if callable(sig.priority) else sig.priority
                    found.append(_Found(Diagnosis(
                        code=sig.code, cause=cause, fix=text_of(sig.fix, hit), rank=r, host=host,
                        line=redact_text(line.raw.rstrip())[:MAX_LINE], file=f.name,
                        line_no=line.no, local_rank=line.local_rank if r is None else None,
                        summary=sig.summary, priority=priority,
                        names_cause=sig.names_cause and priority < EFFECT),
                        (fi, li), sig.suppresses))

    found = _drop_suppressed(found)
    found.extend(_unknowns(files, found, failed, first_error, rank_host, node_host))
    return _order(_dedupe(found), failed)


def _same_place(a: Diagnosis, b: Diagnosis) -> bool:
    if a.rank is not None and b.rank is not None:
        return a.rank == b.rank
    return a.host == b.host or a.host is None or b.host is None


def _drop_suppressed(found: list[_Found]) -> list[_Found]:
    found = [f for f in found
             if not any(f.diagnosis.code in g.suppresses and _same_place(f.diagnosis, g.diagnosis)
                        for g in found if g is not f)]
    # A code seen on a rank says more than the same code seen without one on that host (the
    # launcher's "failed (exitcode: -9) local_rank: 0" beside the rank's own report).
    ranked = {(f.diagnosis.code, f.diagnosis.host) for f in found if f.diagnosis.rank is not None}
    ranked_codes = {code for code, _ in ranked}
    return [f for f in found if f.diagnosis.rank is not None or f.diagnosis.local_rank is not None
            or f.diagnosis.code not in ranked_codes
            or (f.diagnosis.host is not None and (f.diagnosis.code, f.diagnosis.host) not in ranked
                and (f.diagnosis.code, None) not in ranked)]


def _unknowns(files: Sequence[File], found: Sequence[_Found], failed: set[int],
              first_error: Said, rank_host: Mapping[int, str],
              node_host: Mapping[int, str]) -> list[_Found]:
    """``unknown`` diagnoses: failed ranks that no signature explains, else one unexplained
    traceback (when nothing at all explains the failure)."""
    # advice (torch's import warning that numpy is missing, a retry warning) does not explain
    # why a rank failed: its own error still gets a diagnosis
    explained = {f.diagnosis.rank for f in found if f.diagnosis.priority < ADVICE}
    roots: dict[int, tuple[WorkerFailure, int, int, int]] = {}
    for fi, f in enumerate(files):
        for failure, first, last in parse_entries(f.lines):
            if failure.root:
                roots.setdefault(failure.rank, (failure, fi, first, last))
    out: list[_Found] = []
    for rank in sorted(failed - explained):
        host = rank_host.get(rank)
        # 1. the rank's own traceback; 2. the traceback in torchrun's block; 3. a line that
        # reads like an error; 4. meshrun's "first error:"; 5. how it exited.
        tb_line = loose = None
        for fi, f in enumerate(files):
            line, from_tb = first_error_line([ln for ln in f.lines
                                          if ln.rank == rank and not ln.in_block])
            if line is not None and from_tb:
                tb_line = (line, fi)
                break
            if line is not None and loose is None:
                loose = (line, fi)
        failure, fi, first, last = roots.get(rank, (None, 0, 0, 0))
        block_tb = (failure is not None and failure.traceback.startswith("Traceback")
                    and failure.error_line)
        if tb_line is not None:
            line, fi = tb_line
            out.append(_unknown(line.raw, rank, host, (files[fi].name, line.no, (fi, line.idx))))
        elif block_tb:
            where = next((ln for ln in files[fi].lines[first:last + 1]
                          if ln.body.strip() == failure.error_line), files[fi].lines[first])
            out.append(_unknown(failure.error_line, rank, failure.host or host,
                                (files[fi].name, where.no, (fi, where.idx))))
        elif loose is not None:
            line, fi = loose
            out.append(_unknown(line.raw, rank, host, (files[fi].name, line.no, (fi, line.idx))))
        elif rank in first_error:
            text, fi, line = first_error[rank]
            out.append(_unknown(text, rank, host, (files[fi].name, line.no, (fi, line.idx))))
        elif failure is not None:
            how = (f"was killed by {failure.signal}" if failure.signal else
                   f"exited with code {failure.exitcode}")
            out.append(_unknown(f"rank {rank} {how}", rank, failure.host or host,
                                (files[fi].name, failure.line_no, (fi, first))))
    if out or any(f.diagnosis.priority < UNKNOWN for f in found):
        return out
    # Nothing explains the failure: the earliest traceback (or fatal line) of a rank without
    # a diagnosis is the best guess at the root cause.
    candidates: list[tuple[tuple[int, int], Line, str]] = []
    for fi, f in enumerate(files):
        if TB_START not in f.text and not STRONG.search(f.text):
            continue
        by_rank: dict[int | None, list[Line]] = {}
        for line in f.lines:
            by_rank.setdefault(line.rank, []).append(line)
        for rank, lines in by_rank.items():
            if rank in explained:
                continue
            line, from_tb = first_error_line(lines, loose=False)
            if line is not None:
                candidates.append(((fi, line.idx), line, f.name))
    if candidates:
        order, line, name = min(candidates, key=lambda c: c[0])
        host = line.host or (rank_host.get(line.rank) if line.rank is not None else None)
        if host is None and line.node is not None:
            host = node_host.get(line.node)
        out.append(_unknown(line.raw, line.rank, host, (name, line.no, order)))
    else:
        out.extend(_cut_traceback(files, rank_host))
    return out


def _cut_traceback(files: Sequence[File], rank_host: Mapping[int, str]) -> list[_Found]:
    """A Python traceback that runs to the end of its file: the error line that would name
    the failure is not there (a log cut, or pasted short). Its last frame is the lead."""
    for fi, f in enumerate(files):
        lines = [ln for ln in f.lines if not ln.skip]
        starts = [i for i, ln in enumerate(lines) if ln.body.strip() == TB_START]
        if not starts:
            continue
        tail = [ln for ln in lines[starts[-1] + 1:] if ln.body.strip()]
        if not tail or any(ln.body[:1] not in (" ", "\t") for ln in tail):
            continue                        # the traceback ends in its error line
        frame = next((ln for ln in reversed(tail) if ln.body.lstrip().startswith("File ")),
                     tail[-1])
        body = peel(redact_text(frame.raw.rstrip())[:MAX_LINE])[0].strip()
        return [_unknown(frame.raw, frame.rank, frame.host or rank_host.get(frame.rank),
                         (f.name, frame.no, (fi, frame.idx)),
                         cause="a Python traceback that stops before its error line (the log "
                               f"ends inside it); its last frame: {body}",
                         fix="find this traceback in the full log (the rank's own log, or the "
                             "job's output): the line after its last frame names the error")]
    return []


def _unknown(text: str, rank: int | None, host: str | None,
             where: tuple[str | None, int | None, tuple[int, int]], *,
             cause: str | None = None, fix: str | None = None) -> _Found:
    name, line_no, order = where
    shown = redact_text(text.rstrip())[:MAX_LINE]
    body = peel(shown)[0].strip() or shown
    log = f"rank{rank}.log" if rank is not None else "the rank's log"
    return _Found(Diagnosis(
        code=UNKNOWN_CODE, cause=cause or f"an error no signature knows: {body}",
        fix=fix or f"read the traceback around this line in {log}; if it is a launch or "
                   "cluster problem, attach the run's log folder to a bug report",
        rank=rank, host=host, line=shown, file=name, line_no=line_no, summary="unknown failure",
        priority=UNKNOWN, names_cause=False), order, ())


def _dedupe(found: Sequence[_Found]) -> list[_Found]:
    kept: dict[tuple, _Found] = {}
    # the weightiest sighting of a code on a rank wins (an error over an earlier warning of the
    # same kind), then the first
    for f in sorted(found, key=lambda x: (x.diagnosis.priority, x.order)):
        d = f.diagnosis
        key = (d.code, d.rank) if d.rank is not None else (d.code, None, d.host, d.local_rank)
        if key not in kept:
            kept[key] = f
        elif kept[key].diagnosis.host is None and d.host is not None:
            old = kept[key]
            kept[key] = _Found(_replace_host(old.diagnosis, d.host), old.order, old.suppresses)
    return list(kept.values())


def _replace_host(d: Diagnosis, host: str) -> Diagnosis:
    from dataclasses import replace

    return replace(d, host=host)


def _order(found: Sequence[_Found], failed: set[int]) -> list[Diagnosis]:
    return [f.diagnosis for f in sorted(
        found, key=lambda f: (f.diagnosis.priority,
                              0 if f.diagnosis.rank in failed else 1, f.order))]
