"""A worker's stdout and stderr that a full log disk cannot kill.

torch's agent points each worker's stdout and stderr at files in the run's log folder. When
that disk fills, ``print`` raises ``OSError: [Errno 28] No space left on device`` in the
middle of training, and at exit Python cannot flush them ("lost sys.stderr", exit 120):
the log disk stopped the training. :func:`tolerate` wraps both so that such an error
drops the output instead (the rest of the worker's output is lost, not its training); the
node's agent, whose own writes to the same folder fail too, says so once on the console
(:meth:`meshrun.runtime.logs.LogRouter.route`). Any other error is raised as before.
"""

from __future__ import annotations

import errno
import io
import sys
from typing import Any

#: errors of the file, not of the text: the disk (or quota, or mount) failed
_LOST = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})


class Tolerant(io.TextIOBase):
    """``stream`` with writes and flushes that give up quietly once its file is lost."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.lost: OSError | None = None

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        if exc.errno not in _LOST:
            raise exc
        self.lost = exc

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors

    def __getattr__(self, name: str) -> Any:  # buffer, reconfigure, line_buffering, ...
        if name == "_stream" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)   # copy/pickle probe these before __init__ ran
        return getattr(self._stream, name)


def tolerate() -> None:
    """Wrap this process's ``sys.stdout`` and ``sys.stderr`` (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Tolerant):
            setattr(sys, name, Tolerant(stream))
