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
recognised and their fix reused. The watchdog (:mod:`meshrun.runtime.watchdog`) prints
``meshrun: node 1 (host-b) is lost: last heartbeat 12.3 s ago`` (or ``node 0
(host-a), which hosts the job's store, is lost: ...``) and ``meshrun: job hung: no
progress for 300 s; stuck: rank 3 on node 1 (host-b), rank 5 on node 2
(host-c)``: :data:`NODE_LOST_RE` and :data:`HANG_RE` parse exactly those.

Every ``line`` and ``cause`` passes :func:`meshrun.redact.redact_text`, so a
diagnosis is safe to attach to a bug report.

The package, in reading order: :mod:`.records` (the records and tiers), :mod:`.causes`
(causes and fixes computed from messages), :mod:`.catalog` (the known failures, as data),
:mod:`.lines` (prefixes, torchrun's block, the first error), :mod:`.engine` (matching,
suppression, unknowns, order) and :mod:`.text` (sentences, JSON, the docs table).
"""

from .catalog import CATALOG, UNKNOWN_CODE, codes
from .causes import HANG_RE, NODE_LOST_RE, fix_for_oom
from .engine import diagnose_files, diagnose_text
from .lines import parse_root_cause, parse_worker_failures
from .records import (
    ADVICE,
    EFFECT,
    FAULT,
    LOST,
    MAX_LINE,
    SETUP,
    TIERS,
    UNKNOWN,
    Diagnosis,
    Hit,
    Signature,
    WorkerFailure,
    needle,
)
from .text import catalog_table, render_text, to_json

__all__ = ["ADVICE", "CATALOG", "EFFECT", "FAULT", "HANG_RE", "LOST", "MAX_LINE", "NODE_LOST_RE",
           "SETUP", "TIERS", "UNKNOWN", "UNKNOWN_CODE", "Diagnosis", "Hit", "Signature",
           "WorkerFailure", "catalog_table", "codes", "diagnose_files", "diagnose_text",
           "fix_for_oom", "needle", "parse_root_cause", "parse_worker_failures", "render_text",
           "to_json"]
