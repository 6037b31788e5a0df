"""Files the user named: written all or nothing, read only when they are what they claim.

Writing (``meshrun render -o FILE``): all of it or nothing.

The text goes to a temporary file beside the target, then replaces it in one rename, so a
read-only or full filesystem leaves no 0-byte or half-written file, and an existing file the
user wrote is never lost: it is kept unless ``force``, and even then replaced only by a whole
new one. A folder or a special file (a FIFO, a device) in the target's place is refused, with
or without ``force``. Every refusal is one line, exit 2 (:class:`~meshrun.errors.UsageError`).

Reading (``--config``, ``meshrun diagnose``, ``meshrun report``): a regular file, or it is
refused before it is opened: a FIFO would block the reader for ever, ``/dev/zero`` would
grow its memory without end."""

from __future__ import annotations

import os
import stat
import tempfile

from .errors import UsageError


def write_output(path: str, text: str, *, force: bool, flag: str = "-o",
                 private: bool = False) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UsageError(f"{path} cannot be checked ({exc.strerror})", subject=flag,
                         hint="choose another file", code="output-unwritable") from None
    if mode is not None:
        if stat.S_ISDIR(mode):
            raise UsageError(f"{path} is a folder, not a file", subject=flag,
                             hint=f"name a file, e.g. {os.path.join(path, 'out.yaml')}",
                             code="output-is-a-folder")
        if not stat.S_ISREG(mode):
            raise UsageError(f"{path} is not a regular file (a FIFO, a device or a socket)",
                             subject=flag, hint="name a regular file",
                             code="output-not-a-file")
        if not force:
            raise UsageError(f"{path} exists and would be overwritten", subject=flag,
                             hint="choose another file, or pass --force", code="output-exists")
    folder = os.path.dirname(os.path.abspath(path))
    temp = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        keep = stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask()
        os.chmod(temp, keep & 0o700 if private else keep)  # private: a secret inside
        os.replace(temp, path)
        temp = None
    except OSError as exc:
        raise UsageError(f"{path} cannot be written ({exc.strerror or exc})", subject=flag,
                         hint="write it on a writable filesystem with free space, or leave "
                              f"out {flag} to print it", code="output-unwritable") from None
    finally:
        if temp is not None:
            try:
                os.unlink(temp)
            except OSError:
                pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def regular_file_or_refuse(path: str, flag: str, max_bytes: int | None, *, code: str,
                           what: str) -> int:
    """The size of ``path`` if it is a regular file of at most ``max_bytes``; else one line.
    A missing file or a folder is left to the caller's own message (FileNotFoundError,
    IsADirectoryError are raised as they are)."""
    mode = os.stat(path).st_mode   # FileNotFoundError / PermissionError: the caller's
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory", path)
    if not stat.S_ISREG(mode):
        raise UsageError(f"{flag} {path} is not a regular file (a FIFO, a device or a "
                         "socket): meshrun reads only files", subject=flag,
                         hint=f"pass {what}", code=code)
    size = os.stat(path).st_size
    if max_bytes is not None and size > max_bytes:
        raise UsageError(f"{flag} {path} is {size:,} bytes: more than {what} holds "
                         f"(at most {max_bytes:,})", subject=flag, hint=f"pass {what}",
                         code=code)
    return size
