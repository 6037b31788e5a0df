"""What torch's elastic agent writes, and where: its log lines that meshrun says better
itself (filtered; a failure it drops is kept for meshrun's own restart line), the line
meshrun says when the agent restarts the workers, and the workers' redirect files under
``raw/`` (tailed into the node's logs by :class:`~meshrun.runtime.logs.LogRouter`, scrubbed
of secrets at the end). torch is imported only inside functions.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from ..redact import redact_text
from . import failures
from .logs import LogRouter


class _SaidByMeshrun:
    """A logging filter for torch's elastic agent: drops the lines meshrun says better itself
    (``failed (exitcode: 1) local_rank: 0 (pid: ...) of binary: ...`` next to meshrun's
    ``rank R on node K exited with code 1``, ``Sending process N closing signal SIGTERM``,
    ``Received Signals.SIGTERM death signal``). torch's other warnings pass. The failure it
    drops is kept (:data:`last_failure`): when torch's agent restarts the workers, meshrun's
    line says which rank ended how (:func:`worker_logs_spec`)."""

    _DROP = ("failed (exitcode: ", "Sending process ", "Received %s death signal",
             "Got termination signal")

    def __init__(self, router: LogRouter | None = None) -> None:
        self.router = router

    def filter(self, record: Any) -> bool:
        msg = str(record.msg)
        if msg.startswith("Sending process "):
            failures.Stopping.saw()   # a record written after this is a stopped rank's
        elif msg.startswith("Received %s death signal") and self.router is not None:
            self.router.quiet_workers()   # logged before torch stops the workers
        if msg.startswith("failed (exitcode: ") and isinstance(record.args, tuple) \
                and len(record.args) >= 2:
            last_failure[:] = [record.args[0], record.args[1]]   # exit code, local rank
        return not msg.startswith(self._DROP)


last_failure: list[Any] = []   # [exit code, local rank] of the agent's latest failed worker


def quiet_agent_lines(router: LogRouter | None = None) -> None:
    """torch's agent lines that meshrun says itself, dropped (once per logger); ``router``:
    the node's, told when torch's agent is stopped by a signal (:meth:`LogRouter.quiet_workers`)."""
    import logging

    for name in ("torch.distributed.elastic.multiprocessing.api",
                 "torch.distributed.elastic.agent.server.api"):
        logger = logging.getLogger(name)
        mine = [f for f in logger.filters if isinstance(f, _SaidByMeshrun)]
        for said in mine:
            said.router = router
        if not mine:
            logger.addFilter(_SaidByMeshrun(router))


def restart_line(node_rank: int, envs: dict[int, dict[str, str]]) -> str | None:
    """meshrun's line when torch's agent starts the workers of a restart (its
    ``TORCHELASTIC_RESTART_COUNT`` above 0), naming the rank whose end caused it; None for
    the first start."""
    env = envs[min(envs)] if envs else {}
    try:
        count = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return None
    if count <= 0:
        return None
    why = ""
    if last_failure:
        code, local = last_failure
        rank = envs.get(local, {}).get("RANK", f"local {local}")
        how = (f"by signal {-code}" if isinstance(code, int) and code < 0
               else f"with exit code {code}")
        why = f" after rank {rank} ended {how}"
    return (f"meshrun: torch's agent restarts node {node_rank}'s workers{why} (restart {count} "
            f"of {env.get('TORCHELASTIC_MAX_RESTARTS', '?')}); they resume through the "
            "rendezvous")


def worker_logs_spec(run_dir: str, node_rank: int, router: LogRouter):
    """A torch ``LogsSpecs`` that redirects every worker under ``raw/``; ``router`` tails the
    files (:class:`WorkerTail`: torch's own tee would split a progress bar's redraws)."""
    from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs, Std

    session = os.path.join(run_dir, "raw", f"node{node_rank}-{time.strftime('%Y%m%d-%H%M%S')}")

    class _WorkerLogs(LogsSpecs):
        def __init__(self) -> None:
            super().__init__(log_dir=session, redirects=Std.ALL, tee=Std.NONE)  # WorkerTail

        @property
        def root_log_dir(self) -> str:
            return session

        def reify(self, envs: dict[int, dict[str, str]]) -> Any:
            attempt = envs[0].get("TORCHELASTIC_RESTART_COUNT", "0") if envs else "0"
            folder = os.path.join(session, f"attempt{attempt}")
            if not os.path.exists(folder) and (line := restart_line(node_rank, envs)):
                print(line, file=sys.stderr, flush=True)   # torch's restart: its own line
            again = 1
            while os.path.exists(folder):
                # a restart torch does not count (a membership change) keeps the count: its
                # workers get files of their own, never the last ones rewritten (which the
                # tail had read: their output would come twice, or be cut)
                again += 1
                folder = os.path.join(session, f"attempt{attempt}-{again}")
            os.makedirs(folder)
            out: dict[str, dict[int, str]] = {k: {} for k in ("stdouts", "stderrs", "errors")}
            for local_rank, env in envs.items():
                base = os.path.join(folder, f"rank{env.get('RANK', local_rank)}")
                out["stdouts"][local_rank] = base + ".stdout"
                out["stderrs"][local_rank] = base + ".stderr"
                out["errors"][local_rank] = base + ".error.json"
                env["TORCHELASTIC_ERROR_FILE"] = base + ".error.json"
                rank = int(env.get("RANK", local_rank))
                router.tail(base + ".stdout", rank, "stdout")
                router.tail(base + ".stderr", rank, "stderr")
            return LogsDest(stdouts=out["stdouts"], stderrs=out["stderrs"],
                            tee_stdouts={}, tee_stderrs={}, error_files=out["errors"])

    return _WorkerLogs()


def scrub_raw(run_dir: str, node_rank: int) -> None:
    """Redact secrets in torch's raw per-worker files of this node (written by torch itself,
    before meshrun sees the lines): the bundle must not carry tokens or keys."""
    root = os.path.join(run_dir, "raw")
    if not os.path.isdir(root):
        return
    for session in os.listdir(root):
        if not session.startswith(f"node{node_rank}-"):
            continue
        for folder, _, files in os.walk(os.path.join(root, session)):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        text = handle.read()
                    clean = redact_text(text)
                    if clean != text:
                        with open(path, "w", encoding="utf-8") as handle:
                            handle.write(clean)
                except OSError:
                    continue
