"""The records of a diagnosis: :class:`Diagnosis` (what one failure is, why, what to do,
where it was seen), :class:`WorkerFailure` (an entry of torchrun's ChildFailedError block),
:class:`Signature` (a known failure: its regexes, cause and fix) and the tiers that order them,
root cause first. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

SETUP, FAULT, LOST, UNKNOWN, EFFECT, ADVICE = 10, 20, 30, 40, 50, 60
TIERS = {SETUP: "setup", FAULT: "fault", LOST: "lost", UNKNOWN: "unknown", EFFECT: "effect",
         ADVICE: "advice"}
MAX_LINE = 400  # characters of a log line kept in a diagnosis

_CODE_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# --- records ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Diagnosis:
    """One recognised failure: what, why, what to do, and where it was seen."""

    code: str
    cause: str
    fix: str
    rank: int | None = None
    host: str | None = None
    line: str = ""
    file: str | None = None
    line_no: int | None = None
    local_rank: int | None = None  # when only a local rank is known ([default3]: prefixes)
    summary: str = ""              # a few words: "CUDA out of memory"
    priority: int = UNKNOWN        # the code's tier (see TIERS); lower is reported first
    #: the code names a cause (False: only an error class or a victim's view; see Signature)
    names_cause: bool = True

    def __post_init__(self) -> None:
        if not _CODE_RE.match(self.code):
            raise ValueError(f"diagnosis code {self.code!r} is not kebab-case")
        for name in ("rank", "local_rank"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ValueError(f"diagnosis {name} {value!r} is not a whole number >= 0")
        if self.line_no is not None and (not isinstance(self.line_no, int) or self.line_no < 1):
            raise ValueError(f"diagnosis line_no {self.line_no!r} is not a line number")
        if not self.cause or not self.fix:
            raise ValueError(f"diagnosis {self.code} needs a cause and a fix")

    # meshrun's one diagnostic shape (meshrun.errors.Diagnostic): code, severity, subject,
    # message, fix. A diagnosis adds where it was seen (rank, host, the log line) and prints
    # grouped by code (one sentence for ranks 0-7: meshrun.diagnose.text.render_text).

    @property
    def severity(self) -> str:
        return "error" if self.priority < EFFECT else "warning" if self.priority < ADVICE \
            else "info"

    @property
    def subject(self) -> str:
        where = f"rank {self.rank}" if self.rank is not None else (
            f"local rank {self.local_rank}" if self.local_rank is not None else "")
        if self.host:
            where = f"{where} on {self.host}" if where else self.host
        return where

    @property
    def message(self) -> str:
        return self.cause

    def to_dict(self) -> dict:
        """The JSON object of :func:`to_json` (the diagnostic shape's keys, then where)."""
        return {"code": self.code, "severity": self.severity, "subject": self.subject,
                "message": self.message, "cause": self.cause, "fix": self.fix,
                "rank": self.rank, "host": self.host, "line": self.line, "file": self.file,
                "line_no": self.line_no, "local_rank": self.local_rank,
                "summary": self.summary, "names_cause": self.names_cause}


@dataclass(frozen=True)
class WorkerFailure:
    """One entry of torchrun's ``ChildFailedError`` block (``[0]:`` with its key lines)."""

    rank: int
    local_rank: int | None = None
    host: str | None = None
    exitcode: int | None = None
    pid: int | None = None
    signal: str | None = None      # "SIGKILL", from "exitcode : -9 (pid: 12) (SIGKILL)"
    error_file: str | None = None  # None for "<N/A>"
    time: str | None = None
    traceback: str = ""            # the entry's traceback/message text, lines joined
    root: bool = False             # listed under "Root Cause (first observed failure):"
    line_no: int = 1               # where the entry starts in its file

    @property
    def error_line(self) -> str:
        """The line that names the error: a traceback's last line, else its first line."""
        lines = [ln.strip() for ln in self.traceback.splitlines() if ln.strip()]
        if not lines:
            return ""
        if lines[0].startswith("Traceback (most recent call last)"):
            return lines[-1]
        return lines[0]


@dataclass(frozen=True)
class Hit:
    """What a cause/fix function of a :class:`Signature` sees."""

    match: re.Match
    line: str                      # the line's text without prefixes
    rank: int | None
    host: str | None
    following: tuple[str, ...]     # the next lines' texts (multi-line NCCL/CUDA messages)
    job: Any = None
    device: str | None = None      # what meshrun planned for the run: "cpu", "cuda" or unknown
    text: str = ""                 # the whole file the line is in (for causes that read more)
    job_text: str = ""             # every file diagnosed together (causes across nodes)
    preceding: tuple[str, ...] = ()   # the 30 lines above it (its rank's, unprefixed ones)

    def group(self, name: str, default: str | None = None) -> str | None:
        try:
            value = self.match.group(name)
        except IndexError:
            return default
        return default if value is None else value


Text = str | Callable[[Hit], str]


@dataclass(frozen=True)
class Signature:
    """A known failure: regexes that recognise it, and what it means.

    ``cause``/``fix`` are strings or functions of the :class:`Hit`; ``priority`` is a
    tier of :data:`TIERS` (or a function of the hit, for a message whose meaning
    depends on its numbers). ``confirm`` is a regex that must also occur in the same
    file, with ``{group}`` replaced by that named group of the match (escaped); or a
    function of the match and every file's text together (a check across nodes' logs).
    ``exclude`` rejects lines that match it; ``near`` must match one of the 30 lines
    above the hit (its own traceback: another rank's lines left out); ``worker_only``
    matches only lines a rank printed. ``suppresses`` names codes this one
    explains when both are found for the same rank. ``expand`` turns one hit into
    several (rank, host) pairs (a hang line naming several stuck ranks).
    """

    code: str
    summary: str
    patterns: tuple[re.Pattern, ...]
    cause: Text
    fix: Text
    priority: int | Callable[[Hit], int]
    matches: str  # what it matches, in words, for the docs table
    confirm: str | Callable[[re.Match, str], bool] | None = None
    exclude: re.Pattern | None = None
    near: re.Pattern | None = None
    suppresses: tuple[str, ...] = ()
    expand: Callable[[Hit], list[tuple[int | None, str | None]]] | None = None
    worker_only: bool = False  # only lines a worker printed (a rank's), not meshrun's own
    #: False for a code that names only the class of an error (NCCL's own error codes) or
    #: what a victim sees (effects, advice): it says where to look, not what went wrong
    names_cause: bool = True
    #: codes whose cause this one's text names too, as the other possibility (port-in-use:
    #: a port taken, or a second node started with node 0's rank)
    also: tuple[str, ...] = ()
    #: per pattern, a literal every match contains (see :func:`needle`); derived
    needles: tuple[str | None, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "needles", tuple(needle(p) for p in self.patterns))
        if not _CODE_RE.match(self.code):
            raise ValueError(f"signature code {self.code!r} is not kebab-case")
        if not self.patterns:
            raise ValueError(f"signature {self.code} has no pattern")
        if isinstance(self.priority, int) and self.priority not in TIERS:
            raise ValueError(f"signature {self.code}: priority {self.priority} is not a tier")
        if not self.summary or not self.matches:
            raise ValueError(f"signature {self.code} needs a summary and a description")

    def find(self, body: str) -> re.Match | None:
        """The first pattern's match in ``body`` (a line without prefixes), or None."""
        if self.exclude is not None and self.exclude.search(body):
            return None
        for pattern, literal in zip(self.patterns, self.needles):
            if literal is not None and literal not in body:
                continue
            found = pattern.search(body)
            if found:
                return found
        return None


def needle(pattern: re.Pattern) -> str | None:
    """The longest literal that every match of ``pattern`` contains, or None.

    Read from the top level of the regex source: text inside groups, classes and
    quantified characters is skipped; a top-level ``|`` or a case-insensitive pattern
    gives None. Used to skip the regexes quickly on the many lines they cannot match.
    """
    if pattern.flags & re.IGNORECASE:
        return None
    src, runs, cur, depth, i = pattern.pattern, [], "", 0, 0
    while i < len(src):
        c = src[i]
        if c == "\\":
            nxt = src[i + 1:i + 2]
            if depth == 0 and nxt and not nxt.isalnum():
                cur += nxt
            elif depth == 0:
                runs.append(cur)
                cur = ""
            i += 2
        elif c == "[":
            j = i + 1 + (src[i + 1:i + 2] == "^")
            j += src[j:j + 1] == "]"
            while j < len(src) and src[j] != "]":
                j += 2 if src[j] == "\\" else 1
            if depth == 0:
                runs.append(cur)
                cur = ""
            i = j + 1
        elif c in "()":
            if depth == 0:
                runs.append(cur)
                cur = ""
            depth += 1 if c == "(" else -1
            i += 1
        elif c == "|" and depth == 0:
            return None
        elif depth == 0 and c in "*+?{":
            runs.append(cur[:-1])  # the quantified character is not certain
            cur = ""
            if c == "{":
                i = src.index("}", i)
            i += 1
        elif depth == 0 and c in ".^$":
            runs.append(cur)
            cur = ""
            i += 1
        else:
            if depth == 0:
                cur += c
            i += 1
    runs.append(cur)
    best = max(runs, key=len)
    return best if len(best) >= 3 else None


def sig(code: str, summary: str, patterns: Sequence[str], cause: Text, fix: Text,
         priority: int | Callable[[Hit], int], matches: str, **extra: Any) -> Signature:
    for key in ("exclude", "near"):
        if isinstance(extra.get(key), str):
            extra[key] = re.compile(extra[key])
    return Signature(code, summary, tuple(re.compile(p) for p in patterns), cause, fix,
                     priority, matches, **extra)


def text_of(value: Text, hit: Hit) -> str:
    return value(hit) if callable(value) else value
