"""Opening a file the user named as input (a policy, a gateway config, a saved checkpoint, a trace to
import) without waiting forever on a named pipe (FIFO) that nothing writes to.

``open()`` of a FIFO for reading blocks until a writer opens it: ``sealbox import pipe`` given a
``mkfifo`` path no program writes to hung until it was killed. :func:`open_input` waits at most
:func:`pipe_wait` seconds (default :data:`PIPE_WAIT`, ``$SEALBOX_PIPE_WAIT`` overrides it) for a
writer's first byte or its end, then reads on as for any file. A pipe with its writer already there
(a shell's process substitution, ``<(cat policy.yaml)``) is read as before.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

__all__ = ["PIPE_WAIT", "misplaced_file", "not_utf8_text", "open_input", "pipe_wait"]

#: Seconds :func:`open_input` waits for a named pipe's writer to write (or close it).
PIPE_WAIT = 10.0


def pipe_wait() -> float:
    """:data:`PIPE_WAIT`, or ``$SEALBOX_PIPE_WAIT`` when it is a finite number of seconds >= 0 (else the default)."""
    text = os.environ.get("SEALBOX_PIPE_WAIT", "")
    try:
        value = float(text)
    except ValueError:
        return PIPE_WAIT
    return value if 0 <= value < float("inf") else PIPE_WAIT


def not_utf8_text(path: object, exc: BaseException) -> str | None:
    """What an error line says of a file that is not UTF-8 text (``path is not UTF-8 text (byte N)``, N the offset of
    the first byte that is not), for a ``UnicodeDecodeError`` met reading it; None for another error."""
    if isinstance(exc, UnicodeDecodeError):
        return f"{path} is not UTF-8 text (byte {exc.start})"
    return None


def misplaced_file(path: str | os.PathLike, expected: str) -> str | None:
    """What an error line says of a Sealbox file given where another was expected (``expected``: what was,
    e.g. ``a saved checkpoint (what `sealbox log checkpoint` printed)``), recognised by its first bytes: an
    export bundle, another ZIP archive, a store's SQLite database, the log's private signing key (``log.key``).
    None for anything else, and for what is not a regular file (a pipe is not read ahead: its bytes would be lost).
    Such a file was reported by what reading it as text first met (``… is not UTF-8 text (byte 14)``)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return None  # reading it says why
    if head[:4] == b"PK\x03\x04":
        if head[30:36] == b"format":  # a bundle's first member (docs/bundle-format.md)
            return (f"{path} is a Sealbox export bundle (a ZIP archive), not {expected}: a bundle is the file to "
                    f"verify, `sealbox verify {path} --key KEY`")
        return f"{path} is a ZIP archive, not {expected}"
    if head.startswith(b"SQLite format 3\x00"):
        return f"{path} is a SQLite database (a store's sealbox.db), not {expected}"
    if head.lstrip(b"\xef\xbb\xbf").startswith(b"PRIVATE+KEY+"):
        return (f"{path} is the log's private signing key (log.key), not {expected}: keep it secret; the log's "
                "verifier key is log.vkey beside it")
    return None


def open_input(path: str | os.PathLike) -> BinaryIO:
    """Open ``path`` for reading bytes, as ``open(path, "rb")`` does, except that a named pipe (FIFO)
    is opened without blocking and waited on for at most :func:`pipe_wait` seconds.

    Raises:
        TimeoutError: a FIFO that no process wrote to or closed within that time (its ``strerror``
            says so and names the wait); nothing was read.
        OSError: as ``open`` raises it (FileNotFoundError, PermissionError, IsADirectoryError, ...).
    """
    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False  # open() says why, as before
    if not is_fifo:
        return open(path, "rb")
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        wait = pipe_wait()
        if not poller.poll(int(wait * 1000)):  # Linux: no POLLHUP until a writer came and went
            raise TimeoutError(errno.ETIMEDOUT, f"it is a named pipe (FIFO) that nothing wrote to within {wait:g} s",
                               os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
