"""``meshrun diagnose``: read a failed run's logs, name cause and fix. Pure; never imports torch.

A multi-node failure leaves thousands of lines: NCCL warnings, C++ frames, one
Python traceback per rank, and torchrun's "Root Cause" block. Most of them are
consequences (the survivors time out waiting for the rank that died). This
module reads the logs, recognises known failures by their **signatures** and
returns one :class:`Diagnosis` per (failure, rank): a kebab-case ``code``, the
``cause``, the ``fix``, the ``rank`` and ``host`` that produced it and the
``line`` (with ``file`` and ``line_no``) it was found on. The root cause comes
first.

API
---
:func:`diagnose_files(paths, job=None) <diagnose_files>`
    The logs of one run (files, or a run folder: its ``*.log`` files) ->
    ``list[Diagnosis]``, root cause first. ``job`` is the run's job config
    (:class:`meshrun.job.JobConfig` or its ``to_dict()``/``MESHRUN_JOB_CONFIG``
    JSON): with it the CUDA out-of-memory fix names the numbers
    (:func:`fix_for_oom`).
:func:`diagnose_text(text, name=..., job=None) <diagnose_text>`
    The same for one text already in memory.
:func:`render_text`
    One sentence per diagnosis: ``rank 3 on host-b: CUDA out of memory — <cause>;
    fix: <fix>`` (the same code on several ranks is one sentence listing them).
:func:`to_json`
    ``{"diagnoses": [{"code", "cause", "fix", "rank", "host", "line", "file",
    "line_no", "local_rank", "summary"}]}``.
:func:`parse_worker_failures` / :func:`parse_root_cause`
    torchrun's ``ChildFailedError`` block ("Root Cause (first observed failure)")
    -> :class:`WorkerFailure` records: rank, local rank, host, exit code, pid,
    signal, error file, time, the error line.
:data:`CATALOG`
    Every :class:`Signature`; :func:`catalog_table` renders it (docs/diagnose.md).

Reading a line
--------------
Prefixes are peeled off before matching and tell who wrote the line:
``[node K]`` (``meshrun simulate``), ``[rankN]:`` (meshrun, and torch's own
traceback prefix), ``[<role>N]:`` such as ``[default3]:`` (torchrun's tee prefix:
a *local* rank), ``[1,N]<stdout>:`` (Open MPI ``--tag-output``: rank N) and
NCCL's ``host:pid:tid [dev]`` (the host). Lines without a rank prefix take the
rank from the file name (``rank3.log``, ``rank3.stderr``). Hosts come from the
Root Cause block (``host : ...``), meshrun's banner (``global ranks : 8-15 (on
worker-1)``), meshrun's failure line (``rank 3 on node 1 (host-b) exited with code
1``) and NCCL's prefix. A signature may name the rank itself (``Duplicate GPU
detected : rank 1 and rank 0 ...``, ``[Rank 3] Watchdog caught ...``).

Inside torchrun's block, the lines of the root-cause entry belong to its rank and
host (so ``Signal 9 (SIGKILL)`` there is that rank's); the entries under
``Failures:`` are ranks the agent stopped afterwards and are not matched.

Order: root cause first
-----------------------
Each code has a priority tier (:data:`TIERS`); diagnoses are sorted by tier, then
ranks named as the first failure (Root Cause block, meshrun's failure line)
before the others, then by where they appear:

====  ==========  ============================================================
10    setup       the job was started wrong: versions, drivers, devices, ports,
                  addresses, node ranks (nothing else can be trusted after it)
20    fault       one rank failed by itself: out of memory, killed, crashed,
                  a CUDA or NCCL error, the disk, the network
30    lost        meshrun's watchdog saw a node vanish or the job hang
40    unknown     a rank failed with an error no signature knows
50    effect      what the others report when a peer is gone: NCCL remote
                  errors, watchdog timeouts, rendezvous/barrier timeouts
60    advice      not a failure by itself (NCCL fell back to TCP sockets)
====  ==========  ============================================================

A signature may also *suppress* another code on the same rank (a DNS failure
also shows as a connect timeout: only the DNS failure is reported). Diagnoses
are unique per (code, rank) — per (code, host) for lines without a rank — so
``node0.log`` and ``rank0.log`` holding the same traceback give one.

Unknown failures
----------------
A rank that failed (named in a Root Cause block or by meshrun's failure line)
without any signature on it still gets a diagnosis, code ``unknown``, with its
first real error line: the last line of its first Python traceback, else the
first line that reads like an error — never a C++ frame (``frame #12: ...``,
``#4 std::...``, ``Exception raised from ...``) nor the launcher's own
``ChildFailedError``. The same happens for a log with a traceback and no known
signature at all. A clean run's log yields nothing.

meshrun's own lines
-------------------
``meshrun: error: ...; fix: ...`` lines (port in use, master unreachable, DNS,
join timeout, duplicate node rank, another job's store, preflight) are
recognised and their fix reused. The watchdog (:mod:`meshrun.watchdog`) prints
``meshrun: node 1 (host-b) is lost: last heartbeat 12.3 s ago`` (or ``node 0
(host-a), which hosts the job's store, is lost: ...``) and ``meshrun: job hung: no
progress for 300 s; stuck: rank 3 on node 1 (host-b), rank 5 on node 2
(host-c)``: :data:`NODE_LOST_RE` and :data:`HANG_RE` parse exactly those.

Every ``line`` and ``cause`` passes :func:`meshrun.redact.redact_text`, so a
diagnosis is safe to attach to a bug report.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..reports.redact import redact_text

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

    def to_dict(self) -> dict:
        """The JSON object of :func:`to_json` (the issue's keys first)."""
        return {"code": self.code, "cause": self.cause, "fix": self.fix, "rank": self.rank,
                "host": self.host, "line": self.line, "file": self.file,
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
    file, with ``{group}`` replaced by that named group of the match (escaped).
    ``exclude`` rejects lines that match it; ``worker_only`` matches only lines a rank
    printed. ``suppresses`` names codes this one
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
    confirm: str | None = None
    exclude: re.Pattern | None = None
    suppresses: tuple[str, ...] = ()
    expand: Callable[[Hit], list[tuple[int | None, str | None]]] | None = None
    worker_only: bool = False  # only lines a worker printed (a rank's), not meshrun's own
    #: False for a code that names only the class of an error (NCCL's own error codes) or
    #: what a victim sees (effects, advice): it says where to look, not what went wrong
    names_cause: bool = True
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


def _sig(code: str, summary: str, patterns: Sequence[str], cause: Text, fix: Text,
         priority: int | Callable[[Hit], int], matches: str, **extra: Any) -> Signature:
    if "exclude" in extra and isinstance(extra["exclude"], str):
        extra["exclude"] = re.compile(extra["exclude"])
    return Signature(code, summary, tuple(re.compile(p) for p in patterns), cause, fix,
                     priority, matches, **extra)


def _text(value: Text, hit: Hit) -> str:
    return value(hit) if callable(value) else value


# --- formats meshrun itself prints ------------------------------------------------------------

#: ``meshrun.watchdog.node_lost_line``:
#: "meshrun: node 1 (host-b) is lost: last heartbeat 12.3 s ago"
NODE_LOST_RE = (r"meshrun: node (?P<node>\d+) \((?P<host>[^)]*)\)(?P<store>, which hosts the "
                r"job's store,)? is lost: last heartbeat (?P<age>[\d.]+) s ago")
#: ``meshrun.watchdog.hang_line``:
#: "meshrun: job hung: no progress for 300 s; stuck: rank 3 on node 1 (host-b), ..."
HANG_RE = r"meshrun: job hung: no progress for (?P<secs>[\d.]+) s; stuck: (?P<stuck>.+)$"
_STUCK_RE = re.compile(r"rank (\d+) on node (\d+) \(([^)]*)\)")
# launch.py: "meshrun: rank 1 on node 1 (vm) was killed by SIGKILL" / "... exited with code 1"
_MESHRUN_FAILED = re.compile(r"meshrun: rank (?P<rank>\d+) on node (?P<node>\d+) "
                             r"\((?P<host>[^)]*)\)"
                             r" (?:exited with code (?P<code>-?\d+)|was killed by (?P<sig>SIG\w+))")
_MESHRUN_DETAIL = re.compile(r"meshrun:\s{2,}\S")  # the indented lines after the failure line
_MESHRUN_FIRST_ERROR = re.compile(r"meshrun:\s+first error: (?P<line>.+)$")
_BANNER_RANKS = re.compile(r"^\s*global ranks\s*:\s*(?P<first>\d+)(?:-(?P<last>\d+))?\s+"
                           r"\(on (?P<host>[^)\s]+)\)")
_BANNER_NODE = re.compile(r"^\s*node rank\s*:\s*(?P<node>\d+)\b")
_HINT = re.compile(r"; fix: (?P<hint>.+)$")


def _killed_by(signal: str) -> str:
    """launch.py's line for a worker killed by ``signal``, naming its rank and host."""
    return (r"meshrun: rank (?P<rank>\d+) on node \d+ \((?P<host>[^)]*)\) was killed by "
            + signal + r"\b")


def _meshrun_fix(default: str) -> Callable[[Hit], str]:
    """The hint meshrun printed after '; fix:' on its own error line, else ``default``."""
    def fix(hit: Hit) -> str:
        found = _HINT.search(hit.line)
        return found.group("hint").strip() if found else default
    return fix


# --- fixes with numbers -----------------------------------------------------------------------

def fix_for_oom(per_device_batch: int | None, grad_accum: int | None = None,
                effective_batch: int | None = None) -> str:
    """The CUDA out-of-memory fix: a smaller micro-batch, more accumulation, same effective batch.

    ``fix_for_oom(8, 1, 256)`` is "halve train.per_device_batch (8 -> 4) and double
    train.grad_accum (1 -> 2): same effective batch 256". The batch is divided by its
    smallest factor (3 -> 1 and accumulation x3 for an odd prime), so the product stays
    exact. Without the per-device batch the advice is given in words; at a per-device
    batch of 1 the memory has to come from elsewhere (sharding, checkpointing).
    """
    rest = ("; if it still does not fit, shard parameters and optimizer state (DeepSpeed ZeRO-3 "
            "or FSDP) or enable activation checkpointing")
    if per_device_batch is None:
        return ("halve the per-device batch (train.per_device_batch) and double the gradient "
                "accumulation (train.grad_accum): the effective batch stays the same" + rest)
    if per_device_batch <= 1:
        return ("train.per_device_batch is already 1, so the batch cannot shrink: shard "
                "parameters and optimizer state (DeepSpeed ZeRO-3 or FSDP), enable activation "
                "checkpointing, use a shorter sequence/clip, or GPUs with more memory")
    accum = grad_accum if grad_accum and grad_accum > 0 else 1
    smaller = max(d for d in range(1, per_device_batch // 2 + 1) if per_device_batch % d == 0)
    factor = per_device_batch // smaller
    same = f"same effective batch {effective_batch}" if effective_batch else "same effective batch"
    batch = f"train.per_device_batch ({per_device_batch} -> {smaller})"
    steps = f"train.grad_accum ({accum} -> {accum * factor})"
    if factor == 2:
        return f"halve {batch} and double {steps}: {same}"
    return (f"lower {batch} and multiply {steps.replace(' (', f' by {factor} (', 1)}: "
            f"{same}")


def _job_numbers(job: Any) -> tuple[int | None, int | None, int | None]:
    """(per_device_batch, grad_accum, effective_batch) from a JobConfig or its dict, if any."""
    if job is None:
        return None, None, None
    if isinstance(job, Mapping):
        train = job.get("train") if isinstance(job.get("train"), Mapping) else {}
        values = (train.get("per_device_batch"), job.get("grad_accum", train.get("grad_accum")),
                  job.get("effective_batch"))
    else:
        train = getattr(job, "train", None)
        values = (getattr(train, "per_device_batch", None),
                  getattr(job, "grad_accum", getattr(train, "grad_accum", None)),
                  getattr(job, "effective_batch", None))
    return tuple(v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
                 for v in values)  # type: ignore[return-value]


def _oom_cause(hit: Hit) -> str:
    size, gpu = hit.group("size"), hit.group("gpu") or hit.group("gpu_old")
    free = hit.group("free") or hit.group("free_old")
    total = hit.group("total") or hit.group("total_old")
    where = f" on GPU {gpu}" if gpu else ""
    room = f" ({free} free of {total})" if free and total else ""
    need = f"needed {size} more{where}{room}" if size else f"ran out of memory{where}"
    return (f"this rank {need}: its batch, activations and optimizer state do not fit on the "
            "GPU (another process on the same GPU, or two ranks sharing one, can also cause it)")


def _oom_fix(hit: Hit) -> str:
    return fix_for_oom(*_job_numbers(hit.job))


def _nccl_last_error(hit: Hit) -> str:
    """NCCL's 'Last error:' detail, which torch prints on the lines after the error."""
    for i, text in enumerate(hit.following):
        if text.strip() == "Last error:" and i + 1 < len(hit.following):
            detail = hit.following[i + 1].strip()
            return f" (NCCL's last error: {detail})" if detail else ""
        if text.strip().startswith("Last error:") and len(text.strip()) > len("Last error:"):
            return f" (NCCL's {text.strip()[0].lower()}{text.strip()[1:]})"
    return ""


def _nccl_detail(hit: Hit) -> str:
    """NCCL's last error after the exception, or the text of the NCCL WARN line itself."""
    last = _nccl_last_error(hit)
    if last:
        return last
    _, warn, text = hit.line.partition("NCCL WARN ")
    return f" (NCCL WARN {text.strip()})" if warn and text.strip() else ""


def _barrier_counts(hit: Hit) -> tuple[int, int]:
    return int(hit.group("joined") or 0), int(hit.group("expected") or 0)


def _barrier_cause(hit: Hit) -> str:
    joined, expected = _barrier_counts(hit)
    secs = hit.group("secs")
    within = f" within {secs} s" if secs else ""
    if joined > expected:
        return (f"{joined} processes joined a store that expected {expected}: two jobs share "
                "this master address and port, or the world size differs between nodes")
    if joined < expected:
        return (f"only {joined} of {expected} processes reached the store{within}: "
                f"{expected - joined} never started, failed before joining, or cannot reach "
                "node 0")
    return (f"all {expected} processes joined but the barrier still timed out{within}: the "
            "store was too slow or a process left early")


def _barrier_fix(hit: Hit) -> str:
    joined, expected = _barrier_counts(hit)
    if joined > expected:
        return ("give every job its own --master-port and check that --nnodes and "
                "--nproc-per-node are the same on every node")
    return ("find the missing ranks: their own logs show why they did not join (start-up "
            "errors, a node not started); check every node uses the same node count and master "
            "address:port")


def _barrier_priority(hit: Hit) -> int:
    joined, expected = _barrier_counts(hit)
    return SETUP if joined > expected else EFFECT


def _driver_cause(hit: Hit) -> str:
    found = hit.group("ver")
    if found and found.isdigit():
        number = int(found)
        return (f"the NVIDIA driver supports CUDA up to {number // 1000}.{(number % 1000) // 10}, "
                "older than the CUDA this torch build needs")
    return "the NVIDIA driver is older than the CUDA runtime this torch build needs"


def _watchdog_cause(hit: Hit) -> str:
    op, seq = hit.group("op", "a collective"), hit.group("seq")
    timeout = hit.group("timeout")
    waited = f" for {int(timeout) // 1000} s" if timeout and timeout.isdigit() else ""
    which = f"{op} #{seq}" if seq else op
    return (f"this rank waited{waited} in {which} for ranks that never joined it: another rank "
            "crashed, hung or took a different code path (uneven data, a collective inside "
            "'if rank == 0')")


def _hang_expand(hit: Hit) -> list[tuple[int | None, str | None]]:
    stuck = [(int(r), h) for r, _n, h in _STUCK_RE.findall(hit.group("stuck", ""))]
    return stuck or [(None, None)]


def _node_lost_cause(hit: Hit) -> str:
    who = f"node {hit.group('node')} ({hit.group('host')})"
    store = " — it hosts the job's store, so every node stops" if hit.group("store") else ""
    return (f"{who} sent no heartbeat for {hit.group('age')} s: it was killed, lost power or "
            f"network, or froze{store}")


def _module_cause(hit: Hit) -> str:
    binary = re.search(r"of binary: (\S+)", hit.text)
    ran = f" ({binary.group(1)})" if binary else ""
    return (f"Python module '{hit.group('mod')}' is not installed in the environment this "
            f"rank runs in{ran}: a different virtualenv, image or node than the one that has "
            "it, or a launcher (torchrun, deepspeed) found on PATH that belongs to another "
            "Python")


def _abi_cause(hit: Hit) -> str:
    so = hit.group("so")
    which = f"{os.path.basename(so)} was" if so else "a compiled extension was"
    return (f"{which} built against a different torch (or CUDA) than the one installed: its "
            f"symbol {hit.group('sym', '?')} does not exist here")


def _space_cause(hit: Hit) -> str:
    path = hit.group("path")
    where = f" writing {path}" if path else ""
    kind = "the quota is used up" if "quota" in hit.match.group(0).lower() else "the disk is full"
    return f"{kind}{where}: checkpoints, logs or caches filled the filesystem"


def _dns_cause(hit: Hit) -> str:
    target = hit.group("target")
    name = f"'{target}'" if target else "the master address"
    return (f"{name} does not resolve on this node: a typo, a DNS record not created yet "
            "(Kubernetes creates pod records late), or a name only other nodes know")


def _dup_gpu_cause(hit: Hit) -> str:
    other = hit.group("other")
    pair = f"ranks {hit.group('rank')} and {other}" if other else "two ranks"
    return (f"{pair} use the same GPU: the script never called torch.cuda.set_device(LOCAL_RANK) "
            "(every rank on cuda:0), or CUDA_VISIBLE_DEVICES gives every process the same GPU")


_RAISED = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b")


def _only_when_raised(tier: int) -> Callable[[Hit], int]:
    """``tier`` on the line of an exception (``OSError: ...``, ``urllib3.exceptions.
    NameResolutionError: ...``); advice on anything else: libraries log their retries
    (``... thrown while requesting HEAD``) and go on from a cache."""
    def priority(hit: Hit) -> int:
        return tier if _RAISED.match(hit.line) else ADVICE

    priority.label = f"{TIERS[tier]} (advice in a retry warning)"  # type: ignore[attr-defined]
    return priority


def _unless_warning(tier: int) -> Callable[[Hit], int]:
    """``tier``, or advice when the line is only a warning (torch warns at import that it
    could not load numpy, and may run on without ever needing it)."""
    def priority(hit: Hit) -> int:
        return ADVICE if "Warning:" in hit.line else tier

    priority.label = f"{TIERS[tier]} (advice in a warning)"  # type: ignore[attr-defined]
    return priority


def _ifname_cause(hit: Hit) -> str:
    named = re.search(r"NCCL_SOCKET_IFNAME(?: set (?:by environment )?to |=)(\S+)", hit.text)
    which = f"NCCL_SOCKET_IFNAME={named.group(1)}" if named else "NCCL_SOCKET_IFNAME"
    return (f"NCCL found no network interface to bootstrap with: {which} names an interface "
            "this node does not have (names differ between machines and images), or no "
            "interface is up")


def _bootstrap_cause(hit: Hit) -> str:
    used = re.search(r"(?:Bootstrap : Using|OOB) (\w[\w.-]*):(\S+?)<", hit.text)
    via = f" over {used.group(1)} ({used.group(2)})" if used else ""
    warn = re.search(r"NCCL WARN (\S*(?:[Cc]onnect|socket|[Rr]ecv|[Ss]end)\S*.*)", hit.text)
    said = (f" (NCCL WARN {warn.group(1).strip()})" if warn else
            f" (NCCL: {hit.line.strip()})" if "Connect to" in hit.line else "")
    return (f"NCCL's bootstrap could not connect its ranks{via}: the interface NCCL chose does "
            "not connect the nodes (an IPoIB, docker, VPN or other virtual interface), or a "
            f"firewall blocks the ports{said}")


def _nccl_not_built_cause(hit: Hit) -> str:
    if hit.device == "cpu":
        return ("the script asks for the nccl backend, but meshrun planned a CPU run and this "
                "torch has no NCCL (CPU-only builds, Windows and macOS never do)")
    return ("the script asks for the nccl backend and this torch has no NCCL: a CPU-only "
            "build, or a Windows or macOS build (NCCL exists only for Linux CUDA builds)")


def _arch_cause(hit: Hit) -> str:
    sm = hit.group("sm")
    gpu = f"this GPU ({sm})" if sm else "this GPU"
    return (f"{gpu} is not among the architectures this torch or a compiled extension was "
            "built for: a newer GPU with an older build, or an extension compiled on another "
            "GPU model")


def _toolkit_cause(hit: Hit) -> str:
    return (f"the CUDA toolkit on this node ({hit.group('sys')}) is not the one torch was built "
            f"with ({hit.group('torch')}): extensions compiled here (DeepSpeed's ops, apex, "
            "flash-attn) fail to build or load")


def _download_cause(hit: Hit) -> str:
    site = hit.group("site") or "the download host"
    return (f"this node cannot reach {site}: compute nodes often have no internet access or "
            "no DNS for outside names; the script tried to download a model, tokenizer or "
            "dataset at start")


def _cpu_torch_cause(hit: Hit) -> str:
    if hit.device == "cpu":
        return ("the script forces CUDA (torch.cuda.set_device, .cuda(), device='cuda' or "
                "backend='nccl') but meshrun planned a CPU run: no GPU is visible on this node, "
                "and this torch is a CPU-only build; the torch build is not the problem")
    if hit.device == "cuda":
        return ("this torch is a CPU-only build, on a node where meshrun found GPUs: the "
                "environment the workers run in has the wrong torch")
    return ("the script asked for CUDA and this torch is a CPU-only build: either the node has "
            "no GPU and the script forces CUDA, or the node has GPUs and the wrong torch")


def _cpu_torch_fix(hit: Hit) -> str:
    follow = ("make the script follow the plan: device = torch.device('cuda', local_rank) if "
              "torch.cuda.is_available() else torch.device('cpu'), backend = "
              "os.environ['MESHRUN_BACKEND'] (gloo on CPU), or meshrun.init_distributed()")
    build = ("install a CUDA build of torch in the environment meshrun runs from (pip install "
             "torch --index-url https://download.pytorch.org/whl/cu124, or your platform's "
             "image)")
    if hit.device == "cpu":
        return follow
    if hit.device == "cuda":
        return build
    return f"{follow}; on a GPU node, {build}"


def _port_cause(hit: Hit) -> str:
    port = hit.group("port")
    which = f"port {port}" if port else "the port"
    return (f"{which} is already taken on this host: another job (or a previous run that has "
            "not exited) listens there")


# --- the catalog ------------------------------------------------------------------------------

_NCCL_DEBUG = "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read the first 'NCCL WARN'"
_PEERS_FIRST = ("this rank is a victim: look for the first failure on the other ranks "
                "(meshrun diagnose over every node's and rank's log)")

CATALOG: tuple[Signature, ...] = (
    # -- setup ------------------------------------------------------------------------------
    _sig("preflight-mismatch", "nodes differ (preflight)",
         [r"meshrun: error: preflight: (?P<summary>[^;]+)",
          r"meshrun: error: required path (?P<path>\S+) does not exist on this node"],
         lambda h: (f"meshrun's preflight found that {h.group('summary').strip()}; no worker was "
                    "started" if h.group("summary") else
                    f"the required path {h.group('path')} is missing on this node"),
         _meshrun_fix("make the nodes identical (same image, same code), or --no-preflight"),
         SETUP, "meshrun's `meshrun: error: preflight: ...` and missing `--require-path` lines"),
    _sig("torch-missing", "torch is not installed",
         [r"No module named '?torch'?(?:\s|$)"],
         "the Python that runs this rank has no torch: a different interpreter, virtualenv or "
         "image than the one meshrun was installed in",
         "install torch in the environment meshrun runs from (python -m pip install torch), or "
         "activate the same environment on every node; workers use meshrun's own interpreter",
         SETUP, "`ModuleNotFoundError: No module named 'torch'`",
         suppresses=("python-module-missing",)),
    _sig("numpy-version-mismatch", "numpy too new for this torch",
         [r"compiled using NumPy 1\.x cannot be run in",
          r"_ARRAY_API not found"],
         "numpy 2 is installed but this torch (or another extension) was built against numpy "
         "1.x: torch cannot use numpy (\"Numpy is not available\", \"Failed to initialize "
         "NumPy\"), and torch.distributed's object collectives fail",
         "install a numpy the build supports (python -m pip install 'numpy<2'), or a torch "
         "built for numpy 2 (torch >= 2.3); the same on every node",
         _unless_warning(SETUP), "`A module that was compiled using NumPy 1.x cannot be run "
         "in NumPy 2`, `_ARRAY_API not found` (advice only in a warning)",
         suppresses=("numpy-missing",)),
    _sig("numpy-missing", "numpy is not installed",
         [r"RuntimeError: Numpy is not available", r"Failed to initialize NumPy",
          r"No module named '?numpy'?(?:\s|$)"],
         "torch cannot use numpy on this rank: numpy is not installed in the environment the "
         "workers run in (torch's wheel does not depend on it), and torch.distributed's object "
         "collectives (broadcast_object_list, all_gather_object), DataLoader collation of numpy "
         "arrays and tensor.numpy() need it",
         "install numpy in the environment meshrun runs from (python -m pip install numpy), on "
         "every node; a package that needs it should declare it",
         _unless_warning(SETUP), "`RuntimeError: Numpy is not available`, `Failed to "
         "initialize NumPy`, `No module named 'numpy'` (advice only in torch's import "
         "warning: the run may have failed of something else)",
         suppresses=("python-module-missing",)),
    _sig("cuda-on-cpu-torch", "CUDA asked of a CPU-only torch",
         [r"module 'torch\._C' has no attribute '_cuda_\w+'",
          r"Torch not compiled with CUDA enabled"],
         _cpu_torch_cause, _cpu_torch_fix,
         SETUP, "`module 'torch._C' has no attribute '_cuda_setDevice'` (and other `_cuda_*`), "
         "`Torch not compiled with CUDA enabled`; the cause and fix follow meshrun's plan (a "
         "CPU run: the script forces CUDA; a GPU node: the torch build)",
         suppresses=("cuda-init-failed",)),
    _sig("nccl-not-built", "torch without NCCL",
         [r"Distributed package doesn't have NCCL built in"],
         _nccl_not_built_cause,
         "use the gloo backend where there is no NCCL: backend=os.environ['MESHRUN_BACKEND'] "
         "(meshrun sets gloo on CPU runs) or meshrun.init_distributed(); for GPUs, run on Linux "
         "with a CUDA build of torch",
         SETUP, "`Distributed package doesn't have NCCL built in`"),
    _sig("gpu-arch-unsupported", "GPU too new (or old) for the build",
         [r"with CUDA capability (?P<sm>sm_\d+) is not compatible with the current PyTorch",
          r"no kernel image is available for execution on the device"],
         _arch_cause,
         "install a torch built for this GPU (Blackwell sm_120 needs the CUDA 12.8 wheels or "
         "newer), and rebuild compiled extensions with TORCH_CUDA_ARCH_LIST naming every GPU "
         "model the job runs on (e.g. 8.0;9.0)",
         SETUP, "`with CUDA capability sm_N is not compatible with the current PyTorch "
         "installation`, `no kernel image is available for execution on the device`",
         suppresses=("nccl-unhandled-cuda-error", "cuda-illegal-memory-access")),
    _sig("cuda-toolkit-mismatch", "CUDA toolkit differs from torch's",
         [(r"Installed CUDA version (?P<sys>\S+) does not match the version torch was compiled "
           r"with (?P<torch>[\d.]+)")],
         _toolkit_cause,
         "install the CUDA toolkit of torch's version and point CUDA_HOME at it (nvcc --version "
         "must agree with torch.version.cuda), or use prebuilt ops/wheels (DeepSpeed: "
         "DS_BUILD_OPS=0 and its JIT, or an image that has them)",
         SETUP, "`Installed CUDA version X does not match the version torch was compiled with Y` "
         "(DeepSpeed's and torch's extension builders)"),
    _sig("fabric-manager-fault", "NVSwitch fabric manager fault",
         [(r"transport/nvls\.cc:\d+ NCCL WARN Cuda failure (?:\d+ )?'(?:invalid argument|"
           r"system not yet initialized|operation not supported)'"),
          r"CUDA error: system not yet initialized"],
         "the GPUs' NVSwitch fabric is not ready: on HGX/DGX systems (H100, H200, A100 with "
         "NVSwitch) the fabric manager (nvidia-fabricmanager) is not running, or was restarted "
         "without resetting the GPUs, so NCCL's NVLink SHARP set-up (or CUDA itself) fails",
         "check systemctl status nvidia-fabricmanager on the node; start it, reset the GPUs "
         "(nvidia-smi -r) or reboot the node; NCCL_NVLS_ENABLE=0 avoids NVLS meanwhile",
         SETUP, "NCCL's `transport/nvls.cc: NCCL WARN Cuda failure ...`, `CUDA error: system not "
         "yet initialized`",
         suppresses=("nccl-unhandled-cuda-error", "nccl-internal-error", "cuda-init-failed")),
    _sig("nccl-interface-not-found", "NCCL has no usable interface",
         [r"no socket interface found",
          r"with family \d+ is neither AF_INET\(2\) nor AF_INET6\(10\)"],
         _ifname_cause,
         "set NCCL_SOCKET_IFNAME to an interface this node has (ip -br addr), or unset it and "
         "let meshrun choose per node (it names the interface holding the route to the master); "
         "a leading '^' excludes names, '=' matches one exactly",
         SETUP, "NCCL's `Bootstrap : no socket interface found`, `... is neither AF_INET(2) nor "
         "AF_INET6(10)`", suppresses=("nccl-internal-error", "nccl-system-error")),
    _sig("launcher-env-missing", "started without a launcher",
         [r"environment variable (?P<var>[A-Z_]+) expected, but not set",
          (r"KeyError: '(?P<var>RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|MASTER_ADDR|"
           r"MASTER_PORT)'")],
         lambda h: (f"the script reads {h.group('var')}, which a launcher sets for every process "
                    "(torchrun, meshrun run), but it was started without one (python train.py), "
                    "or the launcher's environment did not reach it"),
         "start it through a launcher: meshrun run -- train.py (it sets RANK, LOCAL_RANK, "
         "WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every worker), or meshrun simulate to try "
         "several nodes on one machine",
         SETUP, "`environment variable MASTER_ADDR expected, but not set`, `KeyError: 'RANK'` "
         "(and LOCAL_RANK, WORLD_SIZE, MASTER_PORT)"),
    _sig("local-rank-argument", "--local-rank not accepted",
         [r"unrecognized arguments: .*--local[-_]rank(?:[= ]\d+|\s|$)"],
         "the launcher passed --local-rank=N (torch.distributed.launch since torch 2.0 writes it "
         "with a dash) but the script's argparse only knows --local_rank, so every worker exits "
         "with code 2",
         "read the local rank from the environment (int(os.environ['LOCAL_RANK'])): meshrun and "
         "torchrun set it and pass no argument; or declare both spellings: "
         "parser.add_argument('--local-rank', '--local_rank', type=int)",
         SETUP, "`error: unrecognized arguments: --local-rank=0`"),
    _sig("script-crlf", "shell script with Windows line endings",
         [r"\$'\\r': command not found", r"'\\r'\] exits with return code",
          r"bad interpreter: .*\^M", r"\.sh: line \d+: --[\w-]+: command not found"],
         "the launch script has Windows (CRLF) line endings, or a space after a line-ending "
         "backslash: each continued line became its own command, so the launcher got a stray "
         "'\\r' and the training flags never reached the script",
         "convert the script to Unix line endings (dos2unix script.sh, or sed -i 's/\\r$//' "
         "script.sh) and keep nothing after a line-ending backslash",
         SETUP, "`$'\\r': command not found`, `'\\r'] exits with return code`, `script.sh: line "
         "N: --flag: command not found`", suppresses=("python-module-missing",)),
    _sig("hostname-lookup-failed", "`hostname -I` unsupported",
         [r"Command '\['hostname -I'\]' returned non-zero exit status",
          r"hostname: invalid option -- 'I'"],
         "the launcher asked `hostname -I` for this node's address (DeepSpeed's MPI discovery "
         "does) and this host's hostname command (GNU inetutils) has no -I option",
         "give the master address yourself (MASTER_ADDR / --master_addr, meshrun's "
         "--master-addr) so no discovery runs, or install the Debian/Ubuntu 'hostname' package "
         "whose hostname knows -I",
         SETUP, "`Command '['hostname -I']' returned non-zero exit status`, `hostname: invalid "
         "option -- 'I'`"),
    _sig("network-download-failed", "cannot reach the download host",
         [r"Failed to resolve '(?P<site>[^']+)'",
          r"HTTPSConnectionPool\(host='(?P<site>[^']+)', port=\d+\): Max retries exceeded",
          r"We couldn't connect to '(?P<site>https?://[^']+)'"],
         _download_cause,
         "download the files beforehand to storage every node sees (huggingface-cli download "
         "..., HF_HOME on a shared volume) and set HF_HUB_OFFLINE=1 (HF_DATASETS_OFFLINE=1) in "
         "the job, or give the compute nodes a proxy",
         _only_when_raised(SETUP), "`Failed to resolve 'huggingface.co'`, "
         "`HTTPSConnectionPool(...): Max retries exceeded`, `We couldn't connect to "
         "'https://huggingface.co'`, on the exception that ended the rank (a retry warning "
         "is advice)",
         suppresses=("master-dns-failure",)),
    _sig("worker-bad-input", "the job's input refused",
         [r"^meshrun: error: (?P<msg>.+?); fix: (?P<hint>.+)$"],
         lambda h: h.match["msg"], lambda h: h.match["hint"],
         SETUP, "`meshrun: error: ...; fix: ...` printed by a worker: a job config, "
         "MESHRUN_* variable or checkpoint the training side refused",
         worker_only=True),
    _sig("python-module-missing", "a Python module is missing",
         [r"ModuleNotFoundError: No module named '(?P<mod>[\w.]+)'"],
         _module_cause,
         "start the launcher from the environment that has the module (python -m "
         "torch.distributed.run, or meshrun from that environment: workers use meshrun's own "
         "interpreter), or install it there; one image or lock file for every node (meshrun's "
         "preflight compares installed packages across nodes)",
         SETUP, "`ModuleNotFoundError: No module named 'X'` for any other module"),
    _sig("torch-abi-mismatch", "extension built for another torch",
         [r"(?P<so>/\S+\.so)[^:]*: undefined symbol: (?P<sym>\S+)",
          r"undefined symbol: (?P<sym>\S+)"],
         _abi_cause,
         "reinstall that package against this torch (pip install --force-reinstall "
         "--no-build-isolation PACKAGE), or install the torch it was built for; use one image "
         "on every node",
         SETUP, "`ImportError: ...so: undefined symbol: ...`"),
    _sig("cuda-driver-too-old", "NVIDIA driver too old",
         [r"The NVIDIA driver on your system is too old \(found version (?P<ver>\d+)\)",
          r"CUDA driver version is insufficient for CUDA runtime version"],
         _driver_cause,
         "update the NVIDIA driver on this node, or install a torch built for an older CUDA "
         "(e.g. pip install torch --index-url https://download.pytorch.org/whl/cu118)",
         SETUP, "`The NVIDIA driver on your system is too old (found version N)`, "
         "`CUDA driver version is insufficient`", suppresses=("cuda-init-failed",)),
    _sig("cuda-init-failed", "CUDA unavailable",
         [r"No CUDA GPUs are available", r"no CUDA-capable device is detected",
          r"Found no NVIDIA driver on your system", r"CUDA driver initialization failed",
          r"CUDA-capable device\(s\) is/are busy or unavailable",
          r"all CUDA-capable devices are busy or unavailable"],
         "CUDA could not start on this node: no GPU visible to the process "
         "(CUDA_VISIBLE_DEVICES empty or wrong, a container without --gpus), no "
         "driver, or GPUs held in exclusive mode by another process",
         "check nvidia-smi on the node and CUDA_VISIBLE_DEVICES in the rank's "
         "environment; in Docker pass --gpus all; let meshrun set the devices",
         SETUP, "`No CUDA GPUs are available`, `no CUDA-capable device is detected`, `Found no "
         "NVIDIA driver`, `busy or unavailable`"),
    _sig("gpu-not-visible", "torch sees no GPU",
         [r"But your machine only has: \[\]",
          r"ProcessGroupNCCL is only supported with GPUs, no GPUs found"],
         "the script asks for GPUs but torch sees none: this torch is a CPU-only build, or "
         "CUDA cannot start here (no driver, a container without --gpus, "
         "CUDA_VISIBLE_DEVICES empty); the message alone does not say which",
         "python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())' in the "
         "workers' environment: None means a CPU-only torch (install a CUDA build), False "
         "with a version means the driver or the container (nvidia-smi, --gpus all); on a CPU "
         "run make the script follow the plan (meshrun.init_distributed().device)",
         SETUP, "Lightning's `You requested GPUs: [0] But your machine only has: []`, "
         "`ProcessGroupNCCL is only supported with GPUs, no GPUs found`", names_cause=False),
    _sig("gpu-hardware-error", "GPU hardware error",
         [r"uncorrectable ECC error encountered", r"GPU has fallen off the bus",
          r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)", r"uncorrectable NVLink error"],
         "the GPU reported a hardware fault (ECC, NVLink, Xid, fell off the bus); the software "
         "is not at fault",
         "take the node out of the pool (SLURM: --exclude, Kubernetes: cordon), check "
         "nvidia-smi -q -d ECC and the kernel log (dmesg | grep Xid), and reset or replace the GPU",
         SETUP, "`uncorrectable ECC error`, `GPU has fallen off the bus`, `NVRM: Xid`"),
    _sig("invalid-device-ordinal", "invalid GPU index",
         [r"invalid device ordinal"],
         "this rank asked for a GPU index this node does not have: more processes than "
         "visible GPUs, or the script used the global RANK (or a fixed cuda:N) where it needs "
         "LOCAL_RANK",
         "call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (or meshrun.init_distributed"
         "()), and let meshrun choose the processes per node from the visible GPUs",
         SETUP, "`CUDA error: invalid device ordinal`"),
    _sig("duplicate-gpu", "two ranks on one GPU",
         [(r"Duplicate GPU detected : rank (?P<rank>\d+) and rank (?P<other>\d+) both on CUDA "
          r"device (?P<bus>\w+)")],
         _dup_gpu_cause,
         "call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before creating the process "
         "group (meshrun.init_distributed() does), and do not pin CUDA_VISIBLE_DEVICES to one GPU "
         "per node",
         SETUP, "NCCL's `Duplicate GPU detected : rank A and rank B both on CUDA device X`",
         suppresses=("nccl-invalid-usage",)),
    _sig("port-in-use", "port already in use",
         [r"meshrun: error: port (?P<port>\d+) on this host \(node 0\) is already in use",
          r"port: (?P<port>\d+), useIpv6: \w+, code: -98, name: EADDRINUSE",
          r"EADDRINUSE", r"[Aa]ddress already in use", r"\[Errno 98\]"],
         _port_cause,
         _meshrun_fix("choose another --master-port (or let meshrun pick one), or find the "
                      "process holding it with 'ss -ltnp'"),
         SETUP, "`EADDRINUSE`, `Address already in use`, `[Errno 98]`, meshrun's `port N ... is "
         "already in use`", exclude=r"ignoring the error"),
    _sig("master-dns-failure", "master address does not resolve",
         [r"meshrun: error: the master address (?P<target>\S+) does not resolve",
          (r"network addresses of \((?P<target>[^,()]+), (?P<port>\d+)\) cannot be retrieved "
          r"\(gai error: -?\d+ - (?:Name or service not known|Temporary failure in name "
          r"resolution|No address associated with hostname)\)"),
          (r"socket\.gaierror: \[Errno -?\d+\] (?:Name or service not known|Temporary failure "
          r"in name resolution|nodename nor servname provided)"),
          r"getaddrinfo failed",
          r"host not found: (?:Name or service not known|Temporary failure in name resolution)",
          r"TCPStore.*(?:Name or service not known|Temporary failure in name resolution)",
          r"rendezvous.*(?:Name or service not known|Temporary failure in name resolution)",
          r"MASTER_ADDR.*(?:Name or service not known|Temporary failure in name resolution)"],
         _dns_cause,
         _meshrun_fix("check the name on this node (getent hosts NAME); on Kubernetes check the "
                      "headless Service and the pod's subdomain; or pass node 0's IP address "
                      "as --master-addr"),
         SETUP, "torch's `cannot be retrieved (gai error: ... Name or service not known)` "
         "together with a failed connect to the same host, `socket.gaierror`, meshrun's `does "
         "not resolve`",
         confirm=r"(?:trying to connect to \(|failed to connect to \(?|to host |master address )"
                 r"\[?{target}\b",
         suppresses=("rendezvous-connection-error", "master-unreachable")),
    _sig("address-family-mismatch", "IPv4/IPv6 mismatch",
         [r"gaierror: \[Errno -9\] Address family for hostname not supported",
          r"(?:OSError|socket\.error): \[Errno 97\] Address family not supported by protocol",
          r"ss1\.ss_family == ss2\.ss_family\. \d+ vs \d+"],
         "the master address resolves only to IPv6 (or only IPv4) while the socket was opened "
         "for the other family",
         "pass an IPv4 address as --master-addr (or a name with an A record); for NCCL/Gloo set "
         "NCCL_SOCKET_FAMILY=AF_INET or the interface with NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME",
         SETUP, "`socket.gaierror: [Errno -9] Address family for hostname not supported`, "
         "`OSError: [Errno 97] Address family not supported by protocol` (not torch's warning "
         "with the same words, printed whenever it tries IPv6 first)"),
    _sig("duplicate-rank", "two processes with one rank",
         [r"initializing ddp: GLOBAL_RANK: (?P<rank>\d+), MEMBER: \d+/(?P<world>\d+)"],
         lambda h: (f"two processes started as global rank {h.group('rank')} of "
                    f"{h.group('world')}: the launcher started more processes than the script's "
                    "world (SLURM --nodes/--ntasks-per-node not matching the Trainer's num_nodes "
                    "x devices, or srun around a launcher that starts its own processes), so "
                    "the ranks collide and the job hangs or fails"),
         "start one task per device with SLURM (--nodes=N --ntasks-per-node=devices) and the "
         "same num_nodes/devices in the Trainer, or one meshrun per node (meshrun render slurm "
         "writes it)",
         SETUP, "Lightning's `initializing ddp: GLOBAL_RANK: r, MEMBER: k/N` printed twice for "
         "one rank with no failure between (a restart announces it again)",
         confirm=(r"GLOBAL_RANK: {rank}, MEMBER: (?:(?!Traceback|Error|restart|Restart)"
                  r"[\s\S])*?GLOBAL_RANK: {rank}, MEMBER: ")),
    _sig("duplicate-node-rank", "two nodes with one rank",
         [(r"meshrun: error: node rank (?P<node>\d+) is already taken by (?P<holder>.+?): two "
          r"nodes were given the same rank")],
         lambda h: (f"two nodes were started as node {h.group('node')}; the other one is "
                    f"{h.group('holder')}"),
         _meshrun_fix("give every node its own rank 0..N-1 (check NODE_RANK/RANK on each node)"),
         SETUP, "meshrun's `node rank N is already taken by ...`"),
    _sig("store-other-job", "another job's store",
         [(r"meshrun: error: the store at (?P<where>\S+) belongs to run '(?P<theirs>[^']*)', not "
          r"to this run '(?P<ours>[^']*)'")],
         lambda h: (f"the store at {h.group('where')} belongs to run {h.group('theirs')!r}: two "
                    "jobs use the same master address and port, or the nodes of one job got "
                    "different run ids"),
         _meshrun_fix("give each job its own --master-port, and the same --run-id on all nodes "
                      "of one job"),
         SETUP, "meshrun's `the store at ... belongs to run 'A', not to this run 'B'`"),
    _sig("too-many-nodes", "more nodes than expected",
         [(r"meshrun: error: (?P<joined>\d+) nodes joined the store at (?P<where>\S+) but the job "
          r"has (?P<nnodes>\d+)")],
         lambda h: (f"{h.group('joined')} nodes joined a job of {h.group('nnodes')}: two jobs "
                    "share the master address and port, or the node count differs between nodes"),
         _meshrun_fix("give every job its own --master-port and check --nnodes on every node"),
         SETUP, "meshrun's `N nodes joined the store at ... but the job has M`"),
    # -- fault ------------------------------------------------------------------------------
    _sig("cuda-oom", "CUDA out of memory",
         [(r"CUDA out of memory\.(?: Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B)\.?)?"
          r"(?: GPU (?P<gpu>\d+) has a total capac?i?ty of (?P<total>[\d.]+ [KMGT]?i?B) of which "
          r"(?P<free>[\d.]+ [KMGT]?i?B|0 bytes) is free)?"
          r"(?: \(GPU (?P<gpu_old>\d+); (?P<total_old>[\d.]+ [KMGT]?i?B) total capacity; "
          r"[^;]*; (?P<free_old>[\d.]+ [KMGT]?i?B) free)?"),
          r"CUDA error: out of memory", r"CUBLAS_STATUS_ALLOC_FAILED"],
         _oom_cause, _oom_fix,
         FAULT, "`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate X`, `CUDA error: "
         "out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`"),
    _sig("host-oom-killed", "killed (host out of memory)",
         [r"Signal 9 \(SIGKILL\) received by PID", r"^\s*exitcode\s*:\s*-9 \(pid",
          r"failed \(exitcode: -9\) local_rank", r"exits with return code = -9\b",
          _killed_by("SIGKILL"), r"Out of memory: Kill(?:ed)? process (?P<pid>\d+)",
          r"Memory cgroup out of memory", r"\boom-kill(?:er)?\b", r"^Killed$",
          r"is killed by signal: Killed"],
         "the process was killed with SIGKILL and left no Python traceback: almost always the "
         "kernel's out-of-memory killer (host RAM or the container's memory limit), sometimes "
         "the scheduler",
         "check the node's kernel log (dmesg -T | grep -i -e oom -e killed) or the pod's "
         "OOMKilled status; use fewer DataLoader workers, load data lazily, or raise the memory "
         "limit",
         FAULT, "`exitcode : -9` / `Signal 9 (SIGKILL)` in the root cause, meshrun's `was killed "
         "by SIGKILL`, the kernel's `Out of memory: Killed process`, a bare `Killed`"),
    _sig("shm-too-small", "shared memory too small",
         [r"unable to write to file </torch_\w+>", r"insufficient shared memory \(shm\)",
          r"No space left on device: '/dev/shm/",
          r"out of shared memory", r"Signal 7 \(SIGBUS\) received by PID",
          r"^\s*exitcode\s*:\s*-7 \(pid", _killed_by("SIGBUS"), r"^Bus error\b",
          r"failed \(exitcode: -7\) local_rank", r"exits with return code = -7\b",

          r"Error while creating shared memory segment", (r"unable to (?:open|allocate) shared "
          r"memory")],
         "/dev/shm is too small for the DataLoader workers, their semaphores, or NCCL's "
         "shared-memory transport: "
         "containers get 64 MB by default",
         "run the container with --ipc=host or --shm-size=16g (Kubernetes: an emptyDir with "
         "medium: Memory mounted at /dev/shm), or use fewer DataLoader workers",
         FAULT, "`unable to write to file </torch_...>`, `insufficient shared memory (shm)`, "
         "SIGBUS / `Bus error`, NCCL's `Error while creating shared memory segment`",
         suppresses=("disk-full", "nccl-system-error")),
    # Semaphores and shared tensors live in /dev/shm: "No space left on device" from a
    # multiprocessing lock or a /dev/shm path is the container's shm, not the disk.
    _sig("shm-too-small", "shared memory too small",
         [r"No space left on device(?!: '(?!/dev/shm))"],
         "/dev/shm is full: the DataLoader workers' semaphores and shared tensors live there, "
         "and containers get 64 MB by default (the disk itself may have room)",
         "run the container with --ipc=host or --shm-size=16g (Kubernetes: an emptyDir with "
         "medium: Memory mounted at /dev/shm), or use fewer DataLoader workers",
         FAULT, "`No space left on device` from a multiprocessing semaphore (`SemLock` in the "
         "traceback), not naming a path outside /dev/shm",
         confirm=r"_multiprocessing\.SemLock|SemLock\.__init__", suppresses=("disk-full",)),
    _sig("disk-full", "disk full",
         [r"\[Errno 28\] No space left on device: '(?P<path>[^']+)'", r"No space left on device",
          r"Disk quota exceeded", r"\[Errno 122\]",
          r"write\(\): fd \d+ failed with (?:Input/output error|No space left)"],
         _space_cause,
         "free space or write checkpoints elsewhere (--checkpoint-dir on a larger filesystem); "
         "keep fewer checkpoints; check df -h and quotas on every node",
         FAULT, "`No space left on device`, `Disk quota exceeded`"),
    _sig("too-many-open-files", "too many open files",
         [r"Too many open files", r"\[Errno 24\]", r"received \d+ items of ancdata"],
         "the process hit its open-file limit: DataLoader workers pass tensors through file "
         "descriptors, one per shared tensor",
         "raise the limit (ulimit -n 1048576 in the job script, LimitNOFILE for services), or "
         "torch.multiprocessing.set_sharing_strategy('file_system')",
         FAULT, "`Too many open files`, `[Errno 24]`, `received 0 items of ancdata`"),
    _sig("segfault", "segmentation fault",
         [r"Signal 11 \(SIGSEGV\) received by PID", r"^\s*exitcode\s*:\s*-11 \(pid",
          r"failed \(exitcode: -11\) local_rank", r"exits with return code = -11\b",
          _killed_by("SIGSEGV"), r"Segmentation fault", r"Fatal Python error: Segmentation"],
         "the process crashed in native code (a CUDA/C++ extension, a driver, or mismatched "
         "library versions)",
         "rerun with PYTHONFAULTHANDLER=1 to get the Python stack of the crash; check that "
         "compiled extensions match this torch and that every node runs the same image",
         FAULT, "`exitcode : -11` / SIGSEGV, `Segmentation fault`"),
    _sig("cuda-device-assert", "CUDA device-side assert",
         [r"device-side assert triggered", r"\.cu:\d+: .*Assertion `[^`]+` failed"],
         "a CUDA kernel's bounds check failed: usually a class label or index out of range "
         "(labels >= number of classes, negative indices, an embedding index >= vocabulary)",
         "check label and index ranges on CPU for the failing batch; rerun with "
         "CUDA_LAUNCH_BLOCKING=1 to see the operation that failed",
         FAULT, "`device-side assert triggered`, a kernel's `Assertion ... failed`"),
    _sig("cuda-illegal-memory-access", "illegal memory access on the GPU",
         [r"an illegal memory access was encountered"],
         "a CUDA kernel read or wrote outside its memory: a bug in a custom/compiled kernel, a "
         "version mismatch of an extension, or (rarely) faulty hardware",
         "rerun with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to find the kernel; update or "
         "rebuild custom extensions for this torch",
         FAULT, "`CUDA error: an illegal memory access was encountered`"),
    _sig("device-mismatch", "tensors on different devices",
         [r"Expected all tensors to be on the same device",
          r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.\w+\) should be the same",
          r"Tensor on device \S+ is not on the expected device \S+"],
         "an operation mixed tensors on different devices (the model on GPU and the batch on "
         "CPU, or on another rank's GPU)",
         "move the model and every batch to the rank's device (model.to(device), "
         "batch.to(device)) with device = cuda:LOCAL_RANK (meshrun.init_distributed().device)",
         FAULT, "`Expected all tensors to be on the same device`"),
    _sig("pg-not-initialized", "process group not initialized",
         [r"Default process group (?:has not been|is not) initialized"],
         "the script used torch.distributed (a collective, DDP, a distributed sampler) before "
         "creating the process group",
         "call meshrun.init_distributed() (or torch.distributed.init_process_group("
         "backend=os.environ['MESHRUN_BACKEND'])) at the start of the script",
         FAULT, "`Default process group has not been initialized`"),
    _sig("nccl-unhandled-cuda-error", "NCCL: CUDA call failed",
         [r"ncclUnhandledCudaError\b", r"unhandled cuda error"],
         lambda h: ("a CUDA call inside NCCL failed on this rank (out of memory, a driver/"
                    "CUDA mismatch, a GPU fault)" + _nccl_last_error(h)),
         "read NCCL's last error: 'out of memory' means the GPU was full (see cuda-oom), "
         "'invalid argument'/'unknown error' point to the driver or a GPU fault; " + _NCCL_DEBUG,
         FAULT, "`ncclUnhandledCudaError`, `unhandled cuda error`", names_cause=False),
    _sig("nccl-bootstrap-failed", "NCCL bootstrap could not connect",
         [r"NCCL INFO bootstrap\.cc:\d+ -> 2\b",
          r"socketStartConnect: Connect to (?P<peer>\S+) failed"],
         _bootstrap_cause,
         "set NCCL_SOCKET_IFNAME to the interface that connects the nodes (meshrun sets it per "
         "node from the route to the master; check the plan's env rows), and open the ports "
         "between the nodes; " + _NCCL_DEBUG,
         FAULT, "NCCL's `bootstrap.cc:N -> 2` (a system error in its TCP bootstrap), "
         "`socketStartConnect: Connect to ADDR failed`",
         suppresses=("nccl-system-error", "nccl-internal-error")),
    _sig("nccl-system-error", "NCCL system error",
         [r"ncclSystemError\b", r"unhandled system error",
          (r"NCCL WARN (?:Net|socket\w*|Call to connect)\b.*(?:Connection refused|No route to "
          r"host|Connection timed out|Software caused connection abort)")],
         lambda h: ("a system call NCCL made failed on this rank — nearly always the network "
                    "between nodes (wrong interface, firewall, IB/RoCE setup) or a too small "
                    "/dev/shm in a container" + _nccl_detail(h)),
         "set NCCL_SOCKET_IFNAME to the interface that connects the nodes (e.g. ib0, eth0), "
         "open the ports between the nodes, use --ipc=host in Docker; " + _NCCL_DEBUG,
         FAULT, "`ncclSystemError`, `unhandled system error`, NCCL WARN socket connect failures",
         names_cause=False),
    _sig("nccl-internal-error", "NCCL internal error",
         [r"ncclInternalError\b", r"internal error - please report this issue to the NCCL"],
         lambda h: ("NCCL failed internally on this rank: usually a peer that disappeared in "
                    "the middle of set-up, or different NCCL versions on the nodes"
                    + _nccl_last_error(h)),
         "check the other ranks' logs for a failure first, and that every node has the same "
         "torch/NCCL (meshrun's preflight compares them); " + _NCCL_DEBUG,
         FAULT, "`ncclInternalError`", names_cause=False),
    _sig("nccl-invalid-usage", "NCCL invalid usage",
         [r"ncclInvalidUsage\b", r"invalid usage \(run with NCCL_DEBUG",
          r"NCCL error in: \S+, invalid usage"],
         lambda h: ("NCCL rejected how it was called: mismatched collectives between ranks, a "
                    "wrong device, or ranks on the same GPU" + _nccl_last_error(h)),
         "make every rank call the same collectives in the same order on its own GPU; "
         + _NCCL_DEBUG,
         FAULT, "`ncclInvalidUsage`", names_cause=False),
    _sig("ib-transport-error", "InfiniBand transport error",
         [r"NET/IB ?: Got completion from peer (?P<peer>\S+) with (?:status=|error )(?P<err>\d+)",
          r"\bIBV_WC_\w+_ERR\b"],
         lambda h: ("an InfiniBand/RoCE transfer to "
                    f"{h.group('peer') or 'a peer'} failed (work completion error"
                    f"{' ' + h.group('err') if h.group('err') else ''}): a flaky link, switch "
                    "or HCA, or the peer process died"),
         "check the peer's log first; then the links (ibstat, ibv_devinfo, port error "
         "counters); exclude the node if one HCA keeps failing",
         FAULT, "NCCL's `NET/IB : Got completion from peer ... with error N`, `IBV_WC_*_ERR`",
         suppresses=("nccl-remote-error",)),
    _sig("gloo-connect-failed", "Gloo could not connect",
         [r"Gloo connectFullMesh failed with (?P<detail>.+)",
          r"gloo/transport/tcp/\w+\.cc:\d+\] Connect timeout",
          r"gloo/transport/tcp/\w+\.cc:\d+\].*Connection refused"],
         "the ranks could not open Gloo connections to each other: Gloo picked an interface the "
         "other nodes cannot reach (often the hostname resolving to 127.0.1.1), or a firewall",
         "set GLOO_SOCKET_IFNAME to the interface that connects the nodes (e.g. eth0), open the "
         "ports between the nodes, and make the host name resolve to a reachable address",
         FAULT, "`Gloo connectFullMesh failed`, Gloo `Connect timeout` / `Connection refused`"),
    _sig("master-unreachable", "node 0 unreachable",
         [r"meshrun: error: node 0's store at (?P<where>\S+) did not answer within (?P<secs>\d+) s",
          r"\[c10d\].*\(errno: 11[13] - (?:Connection refused|No route to host)\)",
          r"ConnectionRefusedError: \[Errno 111\]",
          r"\[c10d\].*failed to connect.*(?:Connection refused|No route to host)"],
         lambda h: (f"nothing answered at node 0's store {h.group('where') or ''}".rstrip()
                    + ": node 0 is not running (yet, or any more), listens on another port, or a "
                    "firewall blocks the port"),
         _meshrun_fix("start node 0 first with the same --master-addr/--master-port, and open "
                      "the port between the nodes (test with nc -zv ADDR PORT)"),
         FAULT, "meshrun's `node 0's store at ... did not answer`, torch's c10d `Connection "
         "refused` / `No route to host`", suppresses=("rendezvous-connection-error",)),
    # -- lost -------------------------------------------------------------------------------
    _sig("node-lost", "node lost",
         [NODE_LOST_RE],
         _node_lost_cause,
         "look at that node: its node log, the kernel log (dmesg: OOM killer, Xid GPU errors), "
         "its network link; the other nodes' errors after this time are consequences",
         LOST, "meshrun's watchdog: `meshrun: node K (host) is lost: last heartbeat N s ago`"),
    _sig("rank-hang", "rank hung",
         [HANG_RE],
         lambda h: (f"no rank made progress for {h.group('secs')} s; the stuck rank is inside "
                    "a collective the others never reached, or blocked in data loading or I/O"),
         "read the stack dumps meshrun wrote (stacks/rank<R>.txt in the run's log folder) to see "
         "where the stuck rank waits; raise --hang-timeout if steps are really that long",
         LOST, "meshrun's watchdog: `meshrun: job hung: no progress for N s; stuck: rank R on "
         "node K (host), ...`", expand=_hang_expand),
    # -- effect -----------------------------------------------------------------------------
    _sig("nccl-remote-error", "NCCL peer gone",
         [r"ncclRemoteError\b", r"remote process exited or there was a network error"],
         lambda h: ("a peer of this rank exited or the network to it failed during a "
                    "collective" + _nccl_last_error(h)),
         _PEERS_FIRST + "; if no rank crashed, check the network between the nodes",
         EFFECT, "`ncclRemoteError`, `remote process exited or there was a network error`"),
    _sig("gloo-connection-lost", "Gloo peer gone",
         [(r"gloo/transport/tcp/\w+\.cc:\d+\] (?:Connection closed by peer|Read error|Write "
          r"error)")],
         "a peer of this rank closed its Gloo connection: that rank crashed or was stopped",
         _PEERS_FIRST,
         EFFECT, "Gloo's `Connection closed by peer`, `Read error ... Connection reset by peer`"),
    _sig("nccl-watchdog-timeout", "NCCL collective timed out",
         [(r"(?:\[Rank (?P<rank>\d+)\] )?Watchdog caught collective operation timeout: "
          r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)[^)]*?(?:Timeout\(ms\)=(?P<timeout>"
          r"\d+))?\) ran for (?P<ran>\d+) milliseconds"),
          (r"(?:\[Rank (?P<rank>\d+)\] )?Work WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
          r"[^)]*?(?:Timeout\(ms\)=(?P<timeout>\d+))?\) timed out in blocking wait"),
          r"Some NCCL operations have failed or timed out"],
         _watchdog_cause,
         _PEERS_FIRST + "; if a long step is expected (a checkpoint save, an evaluation on rank "
         "0 only), raise the process-group timeout (MESHRUN_PG_TIMEOUT seconds, or "
         "init_process_group(timeout=...))",
         EFFECT, "`Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N, OpType=OP, "
         "...) ran for N milliseconds`, `timed out in blocking wait`"),
    _sig("gloo-timeout", "Gloo collective timed out",
         [(r"gloo/transport/tcp/\w+\.cc:\d+\] Timed out waiting (?P<ms>\d+)ms for (?P<op>\w+) "
          r"operation")],
         lambda h: (f"this rank waited {int(h.group('ms', '0')) // 1000} s for a {h.group('op')} "
                    "its peer never sent: the peer crashed, hung or took a different code path"),
         _PEERS_FIRST + "; raise the process-group timeout only if the step is really that long",
         EFFECT, "Gloo's `Timed out waiting Nms for recv operation to complete`"),
    _sig("store-barrier-timeout", "store barrier timed out",
         [(r"Timed out after (?P<secs>\d+) seconds waiting for clients\. (?P<joined>\d+)/"
          r"(?P<expected>\d+) clients joined"),
          (r"store based barrier on rank:? (?P<rank>\d+), for key: \S+ \(world_size=(?P<expected>"
          r"\d+), (?:num_workers_joined|worker_count)=(?P<joined>\d+)")],
         _barrier_cause, _barrier_fix, _barrier_priority,
         "`DistStoreError: Timed out after N seconds waiting for clients. J/W clients joined.`, "
         "the store-based barrier's `num_workers_joined=J` (too many: shared store or wrong "
         "world size; too few: ranks missing)"),
    _sig("rendezvous-timeout", "rendezvous timed out",
         [r"RendezvousTimeoutError"],
         "not every node joined torch's rendezvous in time: a node did not start, or started "
         "with another run id, endpoint or node count",
         "start every node with the same command, --nnodes, --master-addr/--master-port and "
         "run id; check the missing node's own log for why it did not join",
         EFFECT, "`RendezvousTimeoutError`"),
    _sig("join-timeout", "nodes missing",
         [(r"meshrun: error: only (?P<joined>\d+) of (?P<nnodes>\d+) nodes joined the store at "
          r"(?P<where>\S+) within (?P<secs>\d+) s; missing node ranks: (?P<missing>[\d, ]+)")],
         lambda h: (f"only {h.group('joined')} of {h.group('nnodes')} nodes joined within "
                    f"{h.group('secs')} s; missing node ranks: {h.group('missing').strip()} "
                    "(not started, or cannot reach node 0)"),
         _meshrun_fix("start meshrun on the missing nodes with the same --master-addr and "
                      "--master-port, and check they can reach node 0"),
         EFFECT, "meshrun's `only J of N nodes joined the store ... missing node ranks: ...`"),
    _sig("rendezvous-connection-error", "cannot reach the store",
         [r"RendezvousConnectionError", (r"The client socket has timed out after (?P<after>\S+) "
          r"while trying to connect to \((?P<target>[^,]+), (?P<port>\d+)\)"),
          (r"TCP client failed to connect/validate to host (?P<target>\S+?):(?P<port>\d+) - "
          r"timed out")],
         lambda h: ("this node could not connect to the job's store"
                    + (f" at {h.group('target')}:{h.group('port')}" if h.group("target") else "")
                    + ": node 0 is not up yet, the address or port is wrong, or a firewall "
                    "drops the connection"),
         "check --master-addr/--master-port against node 0's banner, that node 0 is running, and "
         "that the port is open between the nodes (nc -zv ADDR PORT)",
         EFFECT, "`RendezvousConnectionError`, `The client socket has timed out after Nms while "
         "trying to connect to (HOST, PORT)`"),
    _sig("store-connection-lost", "store connection lost",
         [r"Connection was likely closed\. Did the remote server shutdown or crash\?"],
         "this process lost its connection to the job's store on node 0: node 0 died, was "
         "stopped or became unreachable",
         "look at node 0's logs for why it stopped (meshrun diagnose with node0.log); if node 0 "
         "is healthy, check the network between the nodes",
         EFFECT, "torch's `Failed to recv, got 0 bytes. Connection was likely closed. Did the "
         "remote server shutdown or crash?`"),
    # -- advice -----------------------------------------------------------------------------
    _sig("nccl-socket-fallback", "NCCL over TCP sockets",
         [r"NET/IB : No device found", r"NCCL INFO Using network Socket\b"],
         "NCCL found no InfiniBand/RoCE device (or was told not to use it), so traffic between "
         "nodes goes over TCP sockets: many times slower, and a cause of timeouts at scale",
         "if the nodes have InfiniBand/RoCE: make the devices visible in the container "
         "(/dev/infiniband, --privileged or the RDMA device plugin), unset NCCL_IB_DISABLE, and "
         "check with ibv_devices; on a single node this is harmless",
         ADVICE, "NCCL's `NET/IB : No device found`, `Using network Socket`"),
)

UNKNOWN_CODE = "unknown"
_BY_CODE: dict[str, Signature] = {}
for _s in CATALOG:
    _BY_CODE.setdefault(_s.code, _s)


def codes() -> list[str]:
    """Every code the catalog can report (without ``unknown``), in catalog order."""
    return list(_BY_CODE)


# Every pattern has a literal it cannot match without (tests check it): one regex of those
# literals skips the many lines no signature can match.
_ANY = re.compile("|".join(sorted({re.escape(n or "") for s in CATALOG for n in s.needles},
                                  key=len, reverse=True)))


# --- reading lines ----------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# [node K] (simulate) | [rankN]: (meshrun, torch) | [1,N]<stdout>: (Open MPI) | [roleN]: (torchrun)
_PREFIX = re.compile(r"\[(?:node (?P<node>\d+)\] |rank(?P<rank>\d+)\]: ?|\d+,(?P<mpi>\d+)\]"
                     r"<std(?:out|err)>: ?|(?!rank\d)[A-Za-z][A-Za-z_]*?(?P<local>\d+)\]: ?)")
_NCCL_PREFIX = re.compile(r"^(?P<host>[A-Za-z0-9][\w.\-]*):\d+:\d+ \[\d+\] ")
_FILE_RANK = re.compile(r"(?:^|[^a-z])rank(\d+)(?:\D|$)", re.IGNORECASE)
_FILE_NODE = re.compile(r"(?:^|[^a-z])node(\d+)(?:\D|$)", re.IGNORECASE)


@dataclass
class _Line:
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


def _peel(raw: str) -> tuple[str, int | None, int | None, str | None, int | None]:
    """(text, rank, local_rank, host, node) of a line with its prefixes removed."""
    body = _ANSI.sub("", raw) if "\x1b" in raw else raw
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


def _parse_entries(lines: Sequence[_Line]) -> list[tuple[WorkerFailure, int, int]]:
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
    lines = [_Line(no, raw, _peel(raw)[0]) for no, raw in enumerate(text.splitlines(), 1)]
    return [failure for failure, _, _ in _parse_entries(lines)]


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
_ERRORISH = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b|\berror:|\bFAILED\b|terminate called|"
                       r"Fatal Python error|Segmentation fault|core dumped", re.IGNORECASE)
_STRONG = re.compile(r"terminate called after throwing|Fatal Python error|meshrun: error:|"
                     r"core dumped")
_TB_START = "Traceback (most recent call last):"
_TB_LINK = re.compile(r"^(?:During handling of the above exception|The above exception was the "
                      r"direct cause)")


def _reads_like_error(text: str, loose: bool) -> bool:
    if not loose:
        return _STRONG.search(text) is not None
    return _ERRORISH.search(text) is not None and _NOISE.search(text) is None


def _first_error(lines: Sequence[_Line], *, loose: bool = True) -> tuple[_Line | None, bool]:
    """(the first real error line, whether it ends a Python traceback).

    Without a traceback, ``loose`` also accepts the first line that reads like an error.
    """
    fallback: _Line | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.skip:
            i += 1
            continue
        if line.body.strip() == _TB_START:
            j = i + 1
            while j < len(lines) and (not lines[j].body.strip() or lines[j].body[:1] in " \t"):
                j += 1
            if j < len(lines) and not _TB_LINK.match(lines[j].body):
                end = lines[j]
                if "ChildFailedError" not in end.body:  # the launcher's own, not an error
                    return end, True
            i = j + 1
            continue
        if fallback is None and _reads_like_error(line.body, loose):
            fallback = line
        i += 1
    return fallback, False


# --- diagnosing ---------------------------------------------------------------------------------

@dataclass
class _File:
    name: str
    text: str
    lines: list[_Line] = field(default_factory=list)
    rank: int | None = None
    node: int | None = None


@dataclass
class _Found:
    diagnosis: Diagnosis
    order: tuple[int, int]
    suppresses: tuple[str, ...]


_OWN_SUMMARY = ("meshrun: diagnosis: ", "meshrun diagnose: ")


def _load(name: str, text: str) -> _File:
    base = os.path.basename(name)
    rank_m, node_m = _FILE_RANK.search(base), _FILE_NODE.search(base)
    handle = _File(name, text, rank=int(rank_m.group(1)) if rank_m else None,
                   node=int(node_m.group(1)) if node_m else None)
    in_traceback: dict[tuple, bool] = {}  # per writer: inside "Traceback (most recent ...)"
    for no, raw in enumerate(text.splitlines(), 1):
        body, rank, local, host, node = _peel(raw)
        line = _Line(no, raw, body, rank if rank is not None else handle.rank, local, host,
                     node if node is not None else handle.node, idx=no - 1)
        writer = (line.rank, line.local_rank, line.node)
        if body.startswith(_OWN_SUMMARY):
            line.skip = True  # an earlier diagnosis, printed into the log: not evidence
        if body.strip() == _TB_START:
            in_traceback[writer] = True
        elif in_traceback.get(writer):
            if body[:1] in (" ", "\t"):
                line.quoted = True
            else:
                in_traceback[writer] = False
        handle.lines.append(line)
    return handle


_Said = dict[int, tuple[str, int, "_Line"]]  # rank -> (text, file index, line)


def _learn_hosts(files: Sequence[_File]) -> tuple[dict[int, str], dict[int, str], set[int],
                                                  _Said]:
    """(rank -> host, node -> host, failed ranks, what meshrun said about each failed rank:
    its "first error:" line, else its "rank R ... exited with code N" line)."""
    rank_host: dict[int, str] = {}
    node_host: dict[int, str] = {}
    failed: set[int] = set()
    first_error: _Said = {}
    for fi, f in enumerate(files):
        node_of_file: int | None = f.node
        last_failed: int | None = None
        for line in f.lines:
            if m := _BANNER_NODE.match(line.body):
                node_of_file = int(m.group("node"))
            if line.node is None and node_of_file is not None:
                line.node = node_of_file  # a node log without [node K] prefixes
            if m := _BANNER_RANKS.match(line.body):
                first = int(m.group("first"))
                last = int(m.group("last") or first)
                for r in range(first, last + 1):
                    rank_host.setdefault(r, m.group("host"))
                node = line.node if line.node is not None else node_of_file
                if node is not None:
                    node_host.setdefault(node, m.group("host"))
            if m := _MESHRUN_FAILED.search(line.body):
                rank, host = int(m.group("rank")), m.group("host")
                rank_host.setdefault(rank, host)
                node_host.setdefault(int(m.group("node")), host)
                failed.add(rank)
                last_failed = rank
                line.rank = rank
                first_error.setdefault(rank, (m.group(0).removeprefix("meshrun: "), fi, line))
            elif last_failed is not None and _MESHRUN_DETAIL.match(line.body):
                line.rank = last_failed  # "meshrun:   first error: ..." belongs to that rank
                if m := _MESHRUN_FIRST_ERROR.search(line.body):
                    first_error[last_failed] = (m.group("line"), fi, line)
            else:
                last_failed = None
        for failure, start, end in _parse_entries(f.lines):
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


def _confirmed(sig: Signature, found: re.Match, text: str) -> bool:
    if sig.confirm is None:
        return True
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
    nor the logs of an earlier run with the same id kept aside as ``<name>.<time>.log``).

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
            # kept as <name>.<its time>[-n].log (meshrun.logs.keep_previous)
            inner = sorted(p for p in os.listdir(path)
                           if p.endswith(".log") and not _KEPT_ASIDE.search(p))
            if not inner:
                raise UsageError(f"log folder {path} holds no *.log files", subject="LOGFILE",
                                 hint="pass a run's folder (<log-dir>/<run-id>) or its log files")
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


def _read(path: str) -> str:
    if not os.path.exists(path):
        raise UsageError(f"log file {path} does not exist", subject="LOGFILE",
                         hint="pass the files under <log-dir>/<run-id>/, e.g. "
                              "logs/<run-id>/node0.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read log file {path} ({exc.strerror or exc})",
                         subject="LOGFILE", hint="check the path and its permissions") from None


def _diagnose(named: Sequence[tuple[str, str]], job: Any,
              device: str | None = None) -> list[Diagnosis]:
    files = [_load(name, text) for name, text in named]
    rank_host, node_host, failed, first_error = _learn_hosts(files)

    def host_of(line: _Line, rank: int | None) -> str | None:
        if line.host:
            return line.host
        if rank is not None and rank in rank_host:
            return rank_host[rank]
        return node_host.get(line.node) if line.node is not None else None

    found: list[_Found] = []
    for fi, f in enumerate(files):
        for li, line in enumerate(f.lines):
            if line.skip or line.quoted or not line.body or not _ANY.search(line.body):
                continue
            for sig in CATALOG:
                if sig.worker_only and line.rank is None:
                    continue
                match = sig.find(line.body)
                if match is None or not _confirmed(sig, match, f.text):
                    continue
                named_rank = match.groupdict().get("rank")
                rank = int(named_rank) if named_rank else line.rank
                following = tuple(x.body for x in f.lines[li + 1:li + 6])
                hit = Hit(match, line.body, rank, host_of(line, rank), following, job, device,
                          f.text)
                pairs = sig.expand(hit) if sig.expand else [(rank, None)]
                for r, h in pairs:
                    named_host = match.groupdict().get("host")
                    host = h or named_host or host_of(line, r)
                    cause = redact_text(_text(sig.cause, hit))
                    priority = sig.priority(hit) if callable(sig.priority) else sig.priority
                    found.append(_Found(Diagnosis(
                        code=sig.code, cause=cause, fix=_text(sig.fix, hit), rank=r, host=host,
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


def _unknowns(files: Sequence[_File], found: Sequence[_Found], failed: set[int],
              first_error: _Said, rank_host: Mapping[int, str],
              node_host: Mapping[int, str]) -> list[_Found]:
    """``unknown`` diagnoses: failed ranks that no signature explains, else one unexplained
    traceback (when nothing at all explains the failure)."""
    # advice (torch's import warning that numpy is missing, a retry warning) does not explain
    # why a rank failed: its own error still gets a diagnosis
    explained = {f.diagnosis.rank for f in found if f.diagnosis.priority < ADVICE}
    roots: dict[int, tuple[WorkerFailure, int, int, int]] = {}
    for fi, f in enumerate(files):
        for failure, first, last in _parse_entries(f.lines):
            if failure.root:
                roots.setdefault(failure.rank, (failure, fi, first, last))
    out: list[_Found] = []
    for rank in sorted(failed - explained):
        host = rank_host.get(rank)
        # 1. the rank's own traceback; 2. the traceback in torchrun's block; 3. a line that
        # reads like an error; 4. meshrun's "first error:"; 5. how it exited.
        tb_line = loose = None
        for fi, f in enumerate(files):
            line, from_tb = _first_error([ln for ln in f.lines
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
    candidates: list[tuple[tuple[int, int], _Line, str]] = []
    for fi, f in enumerate(files):
        if _TB_START not in f.text and not _STRONG.search(f.text):
            continue
        by_rank: dict[int | None, list[_Line]] = {}
        for line in f.lines:
            by_rank.setdefault(line.rank, []).append(line)
        for rank, lines in by_rank.items():
            if rank in explained:
                continue
            line, from_tb = _first_error(lines, loose=False)
            if line is not None:
                candidates.append(((fi, line.idx), line, f.name))
    if candidates:
        order, line, name = min(candidates, key=lambda c: c[0])
        host = line.host or (rank_host.get(line.rank) if line.rank is not None else None)
        if host is None and line.node is not None:
            host = node_host.get(line.node)
        out.append(_unknown(line.raw, line.rank, host, (name, line.no, order)))
    return out


def _unknown(text: str, rank: int | None, host: str | None,
             where: tuple[str | None, int | None, tuple[int, int]]) -> _Found:
    name, line_no, order = where
    shown = redact_text(text.rstrip())[:MAX_LINE]
    body = _peel(shown)[0].strip() or shown
    log = f"rank{rank}.log" if rank is not None else "the rank's log"
    return _Found(Diagnosis(
        code=UNKNOWN_CODE, cause=f"an error no signature knows: {body}",
        fix=f"read the traceback around this line in {log}; if it is a launch or cluster "
            "problem, attach the run's log folder to a bug report",
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


# --- output -----------------------------------------------------------------------------------

def to_json(diagnoses: Sequence[Diagnosis]) -> dict:
    """``{"diagnoses": [{"code", "cause", "fix", "rank", "host", "line", ...}, ...]}``."""
    return {"diagnoses": [d.to_dict() for d in diagnoses]}


def _ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    values = sorted(set(values))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(out)


def _who(group: Sequence[Diagnosis]) -> str:
    ranks = [d.rank for d in group if d.rank is not None]
    locals_ = [d.local_rank for d in group if d.rank is None and d.local_rank is not None]
    hosts = list(dict.fromkeys(d.host for d in group if d.host))
    if ranks:
        who = f"rank {ranks[0]}" if len(set(ranks)) == 1 else f"ranks {_ranges(ranks)}"
    elif locals_:
        who = (f"local rank {locals_[0]}" if len(set(locals_)) == 1
               else f"local ranks {_ranges(locals_)}")
    else:
        who = ""
    if hosts:
        where = ", ".join(hosts)
        return f"{who} on {where}" if who else where
    return who or "this run"


def render_text(diagnoses: Sequence[Diagnosis]) -> str:
    """One sentence per code, root cause first: ``rank 3 on host-b: CUDA out of memory — ...``."""
    if not diagnoses:
        return "no known failure found in these logs"
    groups: dict[str, list[Diagnosis]] = {}
    for d in diagnoses:
        groups.setdefault(d.code, []).append(d)
    lines = []
    for group in groups.values():
        first = group[0]
        summary = first.summary or first.code
        lines.append(f"{_who(group)}: {summary} — {first.cause}; fix: {first.fix}")
    return "\n".join(lines)


def catalog_table(examples: Mapping[str, Diagnosis] | None = None) -> str:
    """The catalog as a Markdown table (code, tier, what it matches, cause, fix), for the docs.

    A cause or fix computed from the message is shown as the one ``examples[code]`` (a
    diagnosis of that code) got, prefixed "e.g.", or as "(from the message)" without one.
    """
    examples = examples or {}
    rows = ["| code | tier | matches | cause | fix |", "|---|---|---|---|---|"]
    for code in codes():
        sig = _BY_CODE[code]
        tier = (TIERS[sig.priority] if isinstance(sig.priority, int)
                else getattr(sig.priority, "label", "setup or effect"))
        shown = []
        for value, attr in ((sig.cause, "cause"), (sig.fix, "fix")):
            if isinstance(value, str):
                shown.append(value)
            elif code in examples:
                shown.append("e.g. " + getattr(examples[code], attr))
            else:
                shown.append("(from the message)")
        cells = [c.replace("|", "\\|").replace("\n", " ") for c in (sig.matches, *shown)]
        rows.append(f"| `{code}` | {tier} | {cells[0]} | {cells[1]} | {cells[2]} |")
    return "\n".join(rows)
