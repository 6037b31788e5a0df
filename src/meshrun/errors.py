"""One shape for everything meshrun tells a user went wrong: a :class:`Diagnostic`.

Shaped like pip's ``exceptions.py``: every diagnostic has a stable kebab-case ``code`` (the
word to search for in docs/errors.md), a ``severity``, the ``subject`` it is about (a flag, a
variable, a rank), a ``message`` that shows the arithmetic, and a ``fix`` that says what to do
next. They print one way (:meth:`Diagnostic.line`)::

    meshrun: error: --nnodes 2 but no master address; fix: pass --master-addr ... [master-addr-missing]

and read one way as JSON (:meth:`Diagnostic.to_json`). Four kinds share the shape:

* :class:`MeshrunError` — an error that stops meshrun (:class:`UsageError` exit 2 before
  anything starts, :class:`StartupError` exit 3); the CLI prints its line, and with
  ``--json`` also ``{"error": {...}}``, and exits with its code; :class:`TrainingError`
  (exit 1) is a recipe's training that cannot go on (a loss that is not finite), printed by
  the worker itself;
* :class:`Finding` — a check's result that does not stop anything by itself: the NCCL
  environment lint, ``meshrun doctor``'s checks, preflight's differences;
* :class:`meshrun.diagnose.Diagnosis` — a failure found in logs, with its rank and host.

Exit codes (documented in docs/guide.md):

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

import re
from dataclasses import dataclass

EXIT_OK = 0
EXIT_WORKER_FAILED = 1
EXIT_USAGE = 2
EXIT_STARTUP = 3
EXIT_NODE_LOST = 4
EXIT_HANG = 5

SEVERITIES = ("error", "warning", "info")
CODE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
#: how a code ends a printed line: ``... [master-addr-missing]`` (parsers strip it with this)
CODE_SUFFIX = re.compile(r" \[(?P<code>[a-z0-9]+(?:-[a-z0-9]+)*)\]$")


class Diagnostic:
    """The shape: ``code``, ``severity``, ``subject``, ``message``, ``fix``. Subclasses
    provide the five (as fields or properties); the line and the JSON are made here only."""

    code: str
    severity: str
    subject: str
    message: str
    fix: str

    def line(self) -> str:
        """The one line printed for it: control characters the user typed (a carriage
        return, a newline inside a value) are shown escaped, so it stays one line."""
        text = f"meshrun: {self.severity}: {one_line(self.message)}"
        if self.fix:
            text += f"; fix: {one_line(self.fix)}"
        return f"{text} [{self.code}]"

    def to_json(self) -> dict:
        return {"code": self.code, "severity": self.severity, "subject": self.subject,
                "message": self.message, "fix": self.fix}

    @property
    def hint(self) -> str:  # the name the fix had before it had one name
        return self.fix


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with every control character (and Unicode's line and paragraph separators)
    written as its escape: ``\\r``, ``\\n``, ``\\x1b``."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def check_shape(code: str, severity: str) -> None:
    if not CODE.match(code):
        raise ValueError(f"diagnostic code {code!r} is not kebab-case")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}, not {severity!r}")


@dataclass(frozen=True)
class Finding(Diagnostic):
    """A check's result (the NCCL lint, ``meshrun doctor``, preflight): the shape, as a record."""

    code: str
    severity: str
    subject: str
    message: str
    fix: str = ""

    def __post_init__(self) -> None:
        check_shape(self.code, self.severity)


class MeshrunError(Exception, Diagnostic):
    """An error the user can fix: one line, with its code and exit code."""

    exit_code = EXIT_USAGE
    severity = "error"

    def __init__(self, message: str, *, hint: str = "", code: str = "bad-input",
                 subject: str = "") -> None:
        super().__init__(message)
        check_shape(code, "error")
        self.message = message
        self.fix = hint
        self.code = code
        self.subject = subject

    def __str__(self) -> str:
        return self.line()


class UsageError(MeshrunError):
    """Bad input (flag, variable, config): exit 2 before anything is started."""

    exit_code = EXIT_USAGE


class StartupError(MeshrunError):
    """The job could not start on this node (join timeout, port in use, ...): exit 3."""

    exit_code = EXIT_STARTUP

    def __init__(self, message: str, *, hint: str = "", code: str = "startup-failed",
                 subject: str = "") -> None:
        super().__init__(message, hint=hint, code=code, subject=subject)


class TrainingError(MeshrunError):
    """Training that cannot go on (a loss that is not finite): the recipes' workers print the
    line and exit 1, every rank at the same step (the value is the same on every rank)."""

    exit_code = EXIT_WORKER_FAILED

    def __init__(self, message: str, *, hint: str = "", code: str = "training-failed",
                 subject: str = "") -> None:
        super().__init__(message, hint=hint, code=code, subject=subject)
