"""User-facing errors: one line each, with what is wrong, where, and the fix.

Shaped like pip's ``exceptions.py``: every error has a kebab-case ``code``, a
``message`` that names the variable or flag (``subject``) and shows the
arithmetic, and a ``hint`` that says what to do next. The CLI prints
:meth:`MeshrunError.line` and exits with :attr:`MeshrunError.exit_code`; no
traceback reaches the user.

Exit codes (documented in the README):

====  ==============================================================
0     every worker finished successfully
1     a worker failed (meshrun exits with the worker's own code if
      it is non-zero; a worker killed by signal S gives 128 + S)
2     bad input: a flag, a variable or a config is wrong; nothing
      was started
3     the job could not start here: nodes did not join, the master
      could not be reached, the port is taken, preflight found nodes
      that differ
4     another node was lost (killed, frozen, cut off), or node 0,
      which hosts the job's store
5     the job hung: no rank made progress for --hang-timeout seconds
====  ==============================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_WORKER_FAILED = 1
EXIT_USAGE = 2
EXIT_STARTUP = 3
EXIT_NODE_LOST = 4
EXIT_HANG = 5


class MeshrunError(Exception):
    """An error the user can fix. ``str(err)`` is the one-line message."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, hint: str = "", code: str = "bad-input",
                 subject: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code
        self.subject = subject

    def line(self) -> str:
        """The single line printed for this error."""
        text = f"meshrun: error: {self.message}"
        if self.hint:
            text += f"; fix: {self.hint}"
        return text

    def __str__(self) -> str:
        return self.line()


class UsageError(MeshrunError):
    """Bad input (flag, variable, config): exit 2 before anything is started."""

    exit_code = EXIT_USAGE


class StartupError(MeshrunError):
    """The job could not start on this node (join timeout, port in use, ...)."""

    exit_code = EXIT_STARTUP

    def __init__(self, message: str, *, hint: str = "", code: str = "startup-failed",
                 subject: str = "") -> None:
        super().__init__(message, hint=hint, code=code, subject=subject)
