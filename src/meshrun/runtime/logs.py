"""Where a run's output goes: ``<log-dir>/<run-id>/``.

* ``node<k>.log``: everything this node's meshrun printed: the banner, join
  progress, the workers' output with ``[rank<r>]:`` prefixes, the outcome.
* ``rank<r>.log``: one worker's stdout and stderr, interleaved as they came.
* ``events.node<k>.jsonl``: the node's timeline, one record per event line of meshrun's
  own (:mod:`meshrun.runtime.timeline`), written with the line; node 0's straggler
  notices and status lines too.
* ``raw/node<k>-<time>/attempt<n>/rank<r>.{stdout,stderr,error.json}``: the
  elastic agent's own redirect files and error reports, per restart attempt
  (``attempt<n>-2``, ...: a restart torch does not count, for a membership change).

Nothing is overwritten: a rerun with the same run id (the default for an identical
rerun: the id is a hash) first moves the earlier run's files of this node into one
folder, ``earlier/<n>/`` (:func:`meshrun.runtime.rundir.set_aside`: n = 1 for the first run, 2 for the next,
...; the same n on every node that ran it), so the plain names are always this run's
and ``meshrun report RUN-DIR`` reads the newest run, ``RUN-DIR/earlier/<n>`` an earlier
one. Each node touches only its own files, so a log folder on a shared filesystem is
safe. The script's own files stay: ``metrics.jsonl`` and ``tensorboard/`` (a run resumed
under its run id appends to its history).

This module is longer than the others because the console and the logs are one stream: the
router, its stand-in for sys.std*, and the reader of the workers' files share its lock and
must agree on every line's order (splitting them would make that agreement cross modules).
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import time
from typing import Any, TextIO

from ..redact import redact_text
from ..topology.base import in_spans
from . import status, timeline

_RANK_LINE = re.compile(r"^\[rank(\d+)\]: ?(.*)$", re.S)
# torch prefixes a worker's own traceback lines with "[rankN]:" too; say it once.
_DOUBLE_PREFIX = re.compile(r"^(\[rank(\d+)\]: )\[rank\2\]: ?", re.M)


def keep_previous(path: str) -> str | None:
    """Rename an existing ``path`` aside (``name.<mtime>.log``); return the new name."""
    if not os.path.exists(path):
        return None
    stem, ext = os.path.splitext(path)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(os.path.getmtime(path)))
    target, n = f"{stem}.{stamp}{ext}", 1
    while os.path.exists(target):
        target, n = f"{stem}.{stamp}-{n}{ext}", n + 1
    os.replace(path, target)
    return target


_CHUNK_HEADER = re.compile(r"^\[rank(\d+)\]: ")
_CLEAR = "\r\x1b[K"                   # a terminal's line: back to its start, cleared


def _is_terminal(console: TextIO) -> bool:
    try:
        return console.isatty()
    except (ValueError, OSError):   # closed
        return False
_MAX_PARTIAL = 64 * 1024  # a worker's unfinished line held back at most this long
_PROGRESS_EVERY = 1.0     # seconds between console echoes of one rank's redrawn progress line


def stamp(now: float | None = None) -> str:
    """The time put before meshrun's own lines in the node log (and, with ``--timestamps``,
    on the console): UTC, to the millisecond, as RFC 3339 (``kubectl logs --timestamps``
    writes the same shape), so that nodes in other time zones line up."""
    now = time.time() if now is None else now
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def settle(line: str) -> str:
    """What a terminal finally shows of ``line``: the text after its last carriage return
    (progress bars redraw themselves with ``\r``); a trailing ``\r`` (CRLF) is dropped."""
    line = line.rstrip("\r")
    if "\r" in line:
        line = next((seg for seg in reversed(line.split("\r")) if seg.strip()), "")
    return line


class _Tee(io.TextIOBase):
    """A stand-in for sys.stdout/sys.stderr: console + node log + per-rank logs.

    torch's log tailer writes each worker's output as ``[rankN]: `` + what it read, and it
    reads partial lines as they come (a progress bar without its newline): every piece gets
    the prefix, so one line would become ``[rank0]: 10%[rank0]: 20% ...``. The pieces of
    each rank are joined here and only whole lines go on, redrawn progress settled to what
    a terminal would finally show; while a progress bar is being redrawn, the console gets
    its latest state once a second (the logs only the last one). meshrun's own text goes on
    line by line too, so a worker's line never lands inside one of meshrun's."""

    def __init__(self, console: TextIO, router: "LogRouter") -> None:
        self._console = console
        self._router = router
        self._pending = ""
        self._partial: dict[int, str] = {}  # rank -> its unfinished line
        self._echoed: dict[int, tuple[float, str]] = {}  # rank -> (when, what) shown live

    def write(self, text: str) -> int:
        with self._router.lock:
            found = _CHUNK_HEADER.match(text)  # only WorkerTail writes "[rankN]: " first
            if found:
                self._worker_chunk(int(found.group(1)), text[found.end():])
            else:
                self._own_text(text)
        return len(text)

    def _own_text(self, text: str) -> None:
        self._pending += text
        if "\n" in self._pending:
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                line = redact_text(_DOUBLE_PREFIX.sub(r"\1", line))  # no secret shown or kept
                self._own_line(line, "\n")

    def _own_line(self, line: str, end: str) -> None:
        """One of meshrun's own lines: stamped in the node log, on the console with
        ``--timestamps``, and on the console of a job of several nodes after its node
        (``[node k] ``: one SLURM output file holds every node's console)."""
        now = time.time()
        shown = f"{self._router.prefix}{line}" if line else line
        self._router.show(self._console, (f"{stamp(now)} {shown}" if self._router.timestamps
                                          and line else shown) + end,
                          is_status=line.startswith(status.PREFIX))
        self._router.route(line, at=now)

    def _worker_chunk(self, rank: int, body: str) -> None:
        held = self._partial.pop(rank, "") + body
        if "\n" not in held and (redraw := held.rfind("\r", 0, len(held) - 1)) > 0:
            held = held[redraw:]  # a bar redrawn for hours: only its latest state is kept
        if "\n" not in held and len(held) < _MAX_PARTIAL:
            self._partial[rank] = held
            if "\r" in held:
                self._echo_progress(rank, held)
            return
        *lines, rest = held.split("\n")
        if len(rest) >= _MAX_PARTIAL:
            lines.append(rest)
            rest = ""
        if rest:
            self._partial[rank] = rest
        for line in lines:
            self._emit(rank, line)

    def _echo_progress(self, rank: int, held: str) -> None:
        """The console only: a redrawn line's latest state, at most once a second."""
        now = time.monotonic()
        when, shown = self._echoed.get(rank, (0.0, ""))
        state = settle(held)
        if state and state != shown and now - when >= _PROGRESS_EVERY \
                and self._router.shows(rank):
            self._router.show(self._console, redact_text(f"[rank{rank}]: {state}") + "\n")
            self._echoed[rank] = (now, state)

    def _emit(self, rank: int, line: str) -> None:
        whole = redact_text(_DOUBLE_PREFIX.sub(r"\1", f"[rank{rank}]: {settle(line)}"))
        if self._router.shows(rank):
            self._router.show(self._console, whole + "\n")
        self._router.route(whole)

    def finish(self) -> None:
        """Pass on what is still held (a worker's last line without a newline)."""
        with self._router.lock:
            for rank in sorted(self._partial):
                self._emit(rank, self._partial.pop(rank))
            if self._pending:
                self._own_line(redact_text(self._pending), "")
                self._pending = ""

    def flush(self) -> None:
        self._console.flush()
        self._router.flush()

    def fileno(self) -> int:
        return self._console.fileno()

    def isatty(self) -> bool:
        return self._console.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._console, "encoding", "utf-8")


class WorkerTail(threading.Thread):
    """Every worker's redirect files (torch's agent writes them under ``raw/``), read as bytes
    as they grow and handed on as ``[rankN]: `` + text chunks to this process's stdout or
    stderr (the node's :class:`_Tee`), which joins them into whole lines.

    torch's own tailer reads them with ``readline`` in text mode, whose universal newlines
    turn a progress bar's ``\r`` into a line end: every redraw of a tqdm bar became a line
    of its own on the console and in the rank's log. Read as bytes, a redraw stays a
    redraw, and the rank log keeps only the bar's last state."""

    _INTERVAL = 0.1     # seconds between looks at the files (torch's tailer: the same)
    _CHUNK = 1 << 20    # bytes read from one file per look (10 MB/s a file, at most)

    def __init__(self) -> None:
        super().__init__(name="meshrun-tail", daemon=True)
        self._files: list[dict[str, Any]] = []
        self._lock = threading.Lock()     # one reader at a time (this thread, or a drain)
        self._done = threading.Event()   # (not _stop: Thread has a method of that name)
        self._failed = False             # a write failed (said once)

    def add(self, path: str, rank: int, stream: str) -> None:
        """Tail ``path`` (it may not exist yet) as rank ``rank``'s ``stream`` ("stdout" or
        "stderr")."""
        import codecs

        with self._lock:
            if any(tail["path"] == path for tail in self._files):
                return  # read once: a second reader would hand its lines on twice
            self._files.append({"path": path, "rank": rank, "stream": stream, "fd": None,
                                "decoder": codecs.getincrementaldecoder("utf-8")("replace")})

    def run(self) -> None:
        while not self._done.wait(self._INTERVAL):
            try:
                self.drain(limit=self._CHUNK)
            except Exception as exc:  # noqa: BLE001 - keep tailing whatever one look met
                self._said(exc)

    def drain(self, limit: int | None = None) -> None:
        """Hand on what every file holds now (``limit``: at most that many bytes of each)."""
        with self._lock:
            for tail in self._files:
                self._read(tail, limit)

    def _read(self, tail: dict[str, Any], limit: int | None) -> None:
        if tail["fd"] is None:
            try:
                tail["fd"] = os.open(tail["path"], os.O_RDONLY)
            except OSError:
                return   # not written yet
        while True:
            try:
                data = os.read(tail["fd"], limit or self._CHUNK)
            except OSError:
                return
            self._hand_on(tail, tail["decoder"].decode(data, final=False))
            if not data or limit is not None:
                return

    def _hand_on(self, tail: dict[str, Any], text: str) -> None:
        if text:
            try:
                getattr(sys, tail["stream"]).write(f"[rank{tail['rank']}]: {text}")
            except Exception as exc:  # noqa: BLE001 - a console that cannot take it (a
                self._said(exc)       # closed pipe, an encoding): the run goes on

    def _said(self, exc: Exception) -> None:
        """A write of the workers' output failed: said once, on the original stderr."""
        if self._failed:
            return
        self._failed = True
        try:
            sys.__stderr__.write(f"meshrun: warning: the workers' output could not be shown "
                                 f"({type(exc).__name__}: {exc}); it is still in raw/ of the "
                                 "log folder\n")
        except Exception:  # noqa: BLE001, S110 - nowhere left to say it
            pass

    def finished(self) -> None:
        """The workers of every file added so far have ended: hand on the rest, then close
        the files and forget them (a restart's or a new epoch's files come with ``add``)."""
        with self._lock:
            for tail in self._files:
                self._read(tail, None)
                self._hand_on(tail, tail["decoder"].decode(b"", final=True))  # a cut character
                if tail["fd"] is not None:
                    os.close(tail["fd"])
            self._files = []

    def stop(self) -> None:
        """Stop looking, and hand on what is left."""
        self._done.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)
        self.finished()


class LogRouter:
    """Owns the node log and the per-rank logs of one node; installs itself on sys.std*."""

    def __init__(self, run_dir: str, node_rank: int, ranks: tuple[int, ...],
                 shown: tuple[tuple[int, int], ...] | None = None,
                 timestamps: bool = False, prefix: str = "") -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.prefix = prefix  # before meshrun's own console lines ("[node 1] "); not in the log
        self.shown = shown   # the global ranks whose output reaches the console (None: all)
        self.timestamps = timestamps  # meshrun's own console lines carry the time too
        self.run_dir = run_dir
        self.lock = threading.RLock()
        self.node_log_path = os.path.join(run_dir, f"node{node_rank}.log")
        self.events_path = os.path.join(run_dir, f"events.node{node_rank}.jsonl")
        self.moved = [m for m in (keep_previous(self.node_log_path),
                                  keep_previous(self.events_path),
                                  *(keep_previous(self.rank_log_path(r)) for r in ranks)) if m]
        self._node = open(self.node_log_path, "a", encoding="utf-8", buffering=1)
        self.node_rank = node_rank
        self._ranks: dict[int, TextIO] = {}
        self._ran: set[int] = set(ranks)     # the plan's ranks and any run since (a seat)
        self._header: str | None = None      # a membership epoch's first line, per rank
        self._headed: set[int] = set()
        self._saved: tuple[Any, Any] | None = None
        self.lost: str | None = None          # why the log folder cannot be written, once
        self._tail: WorkerTail | None = None  # the workers' redirect files (see WorkerTail)
        self._events: TextIO | None | bool = None  # opened at the first event; False: failed
        self._last_own: tuple[float, str, bool] | None = None  # (time, line, an event)
        self._sticky: tuple[TextIO, str] | None = None  # the status line a terminal shows
        self._quiet = False   # the workers are being stopped: their lines to the logs only

    def show(self, console: TextIO, text: str, is_status: bool = False) -> None:
        """``text`` on the console. On a terminal node 0's status line stays the last line,
        rewritten in place: each other line clears it first and draws it again after
        (elsewhere, a log or a pipe, every status line is a plain line of its own)."""
        if is_status and _is_terminal(console):
            if self._sticky is not None:
                self._sticky[0].write(_CLEAR)
            console.write(text.rstrip("\n"))
            console.flush()
            self._sticky = (console, text.rstrip("\n"))
            return
        sticky = self._sticky
        if sticky is not None:
            sticky[0].write(_CLEAR)
            sticky[0].flush()
        console.write(text)
        if sticky is not None:
            console.flush()
            sticky[0].write(sticky[1])
            sticky[0].flush()

    def shows(self, rank: int) -> bool:
        """Rank ``rank``'s output goes to the console (``--show-ranks``), until torch's agent
        is stopped by a signal (:meth:`quiet_workers`)."""
        return not self._quiet and (self.shown is None or in_spans(rank, self.shown))

    def quiet_workers(self) -> None:
        """torch's agent was stopped by a signal (from outside: SIGTERM, Ctrl-C; or meshrun's
        watchdog's own, when the job ends or a node is lost) and is about to stop the workers:
        what they wrote until now goes on first, then one line says where the rest goes, and
        from then on their lines (a rank whose peer was stopped first raises 'Connection reset
        by peer') go to the rank logs only (until :meth:`show_workers`). Never raises: it
        runs inside torch's logging."""
        try:
            if self._tail is not None:
                self._tail.drain()
            print(f"meshrun: node {self.node_rank}'s workers are being stopped; what they print "
                  f"from now on is in the rank logs only ({self.run_dir})",
                  file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001, S110 - the stop matters more than its last lines
            pass
        self._quiet = True

    def show_workers(self) -> None:
        """New workers start (a membership epoch's): their lines reach the console again."""
        self._quiet = False

    def rank_log_path(self, rank: int) -> str:
        return os.path.join(self.run_dir, f"rank{rank}.log")

    def begin_epoch(self, epoch: int, ranks: tuple[int, ...]) -> None:
        """A membership epoch (a spare took a lost node's seat) starts with this node running
        ``ranks``: each rank's log gets one line saying so before its next output, so a rank
        log that now continues on another node (the spare's, or a shared log folder) reads
        as two parts, never as one run."""
        with self.lock:
            self._ran.update(ranks)
            self._header = (f"--- meshrun: membership epoch {epoch}: this rank runs on node "
                            f"{self.node_rank} from here on ---")
            self._headed = set()

    def ranks_run(self) -> tuple[int, ...]:
        """Every rank this node's workers ran (the plan's, and those of a seat taken over)."""
        with self.lock:
            return tuple(sorted(self._ran))

    def route(self, line: str, at: float | None = None) -> None:
        """One line into the node log (and a worker's into its rank log); ``at``: the time
        of one of meshrun's own lines, stamped before it (a worker's lines are the script's,
        unchanged), and recorded in ``events.node<k>.jsonl`` when it is an event of the
        run's timeline (:mod:`meshrun.runtime.timeline`)."""
        if self._node.closed or self.lost is not None:  # closed: a late writer (a torch
            return                                      # thread's logger) after close()
        try:
            self._node.write(f"{stamp(at)} {line}\n" if at is not None and line
                             else line + "\n")
            if at is not None and line:
                self._timeline(line, at)
            match = _RANK_LINE.match(line)
            if match:
                rank = int(match.group(1))
                handle = self._ranks.get(rank)
                if handle is None:
                    handle = open(self.rank_log_path(rank), "a", encoding="utf-8", buffering=1)
                    self._ranks[rank] = handle
                if self._header is not None and rank not in self._headed:
                    self._headed.add(rank)
                    handle.write(self._header + "\n")
                handle.write(match.group(2) + "\n")
        except OSError as exc:
            self._give_up(exc)

    def _timeline(self, line: str, at: float) -> None:
        """The node's first line is its ``start``, an event line its kind; the last line
        is kept for its ``end`` (:meth:`close`). The records are a copy of the node log's
        lines: a file that cannot be written loses them, never the node log."""
        kind = timeline.kind_of(line)
        records = []
        if self._last_own is None:
            records.append(timeline.record("start", self.node_rank, at, line))
        if kind is not None:
            records.append(timeline.record(kind, self.node_rank, at, line))
        self._last_own = (at, line, kind is not None)
        if records and self._events is not False:
            try:
                if self._events is None:
                    self._events = open(self.events_path, "a", encoding="utf-8", buffering=1)
                self._events.write("\n".join(records) + "\n")
            except OSError:
                self._events = False     # no more tries: the node log says it all

    def tail(self, path: str, rank: int, stream: str) -> None:
        """Pass on a worker's redirect file as it grows (its lines reach the console and
        the logs through this router's streams)."""
        with self.lock:
            if self._tail is None:
                self._tail = WorkerTail()
                self._tail.start()
        self._tail.add(path, rank, stream)

    def drain_workers(self) -> None:
        """The workers of this agent ended: everything they wrote, passed on now (their last
        lines come before meshrun's report of how they ended), and their files let go (the
        raw files are scrubbed later: nothing may read them again). Never raises."""
        try:
            if self._tail is not None:
                self._tail.finished()
        except Exception:  # noqa: BLE001, S110 - the outcome matters more than the last lines
            pass

    def log_only(self, text: str) -> None:
        """``text`` into the node log, not on the console (the whole plan, when the console
        gets the short banner); redacted like every line."""
        with self.lock:
            now = time.time()
            for line in text.splitlines():
                self.route(redact_text(line), at=now)

    def _give_up(self, exc: OSError) -> None:
        """The log folder cannot be written (a full disk, a lost mount): say so once on the
        console and write nothing more there; training goes on. The workers' output reaches
        the console only through torch's redirect files in that folder: it is lost too."""
        self.lost = exc.strerror or str(exc)
        console = self._saved[1] if self._saved is not None else sys.__stderr__
        try:
            console.write(f"meshrun: warning: the log folder {self.run_dir} cannot be written "
                          f"({self.lost}): the workers' later output is lost (it reaches the "
                          "console through files there) and meshrun's own goes to the console "
                          "only; training goes on; fix: free space there, or give the next "
                          "run a --log-dir on another disk\n")
            console.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def flush(self) -> None:
        if self._node.closed or self.lost is not None:
            return
        try:
            self._node.flush()
            for handle in self._ranks.values():
                handle.flush()
        except OSError as exc:
            self._give_up(exc)

    def install(self) -> None:
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _Tee(sys.stdout, self)  # type: ignore[assignment]
        sys.stderr = _Tee(sys.stderr, self)  # type: ignore[assignment]

    def close(self) -> None:
        if self._tail is not None:
            self._tail.stop()
        with self.lock:
            if self._saved is not None:
                for stream in (sys.stdout, sys.stderr):
                    if isinstance(stream, _Tee):
                        stream.finish()
                if self._sticky is not None:   # the last status line stays on the screen
                    self._sticky[0].write("\n")
                    self._sticky = None
                sys.stdout.flush()
                sys.stderr.flush()
                sys.stdout, sys.stderr = self._saved
                self._saved = None
            last = self._last_own
            if last is not None and not last[2] and self._events not in (None, False) \
                    and self.lost is None:   # the node's last line, unless an event already
                try:
                    self._events.write(timeline.record("end", self.node_rank, last[0],
                                                       last[1]) + "\n")
                except OSError:
                    pass
            for handle in (self._node, *self._ranks.values(),
                           *([self._events] if self._events not in (None, False) else [])):
                try:
                    handle.close()
                except OSError:  # its last lines could not be written (a full disk)
                    pass


def drop_empty_stacks(run_dir: str, ranks: tuple[int, ...]) -> None:
    """Remove this node's ``stacks/rank<r>.txt`` files that stayed empty (every worker opens
    one for faulthandler; only a hang fills it), and ``stacks/`` once it is empty."""
    folder = os.path.join(run_dir, "stacks")
    for rank in ranks:
        path = os.path.join(folder, f"rank{rank}.txt")
        try:
            if os.path.getsize(path) == 0:
                os.remove(path)
        except OSError:
            continue
    try:
        os.rmdir(folder)  # only when empty: another node's or a hang's dumps stay
    except OSError:
        pass
