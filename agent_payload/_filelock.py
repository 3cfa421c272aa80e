"""Exclusive OS locks on sidecar files: the lock several writers of one file take (MCP servers,
``agent-payload apply -o``) and the batch job's one-runner lease.

A lock lives on a sidecar (``.<name>.lock``), never on the target itself: an atomic write
replaces the target's inode, so a lock held on it would guard nothing. Lock files are left in
place: removing one while another writer waits on it would let two writers in at once. POSIX
locks with ``flock``; Windows with ``msvcrt``, never waiting (``locked`` is a no-op there).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from agent_payload.errors import FileWriteError

__all__ = ["LockHeld", "acquire", "lock_path", "locked", "release", "sidecar"]


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is the note it wrote ("another process"
    when it wrote none or the note cannot be read)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


def sidecar(path: str | os.PathLike[str], suffix: str) -> Path:
    """The hidden file ``.<name><suffix>`` next to ``path``'s real location."""
    real = Path(os.path.realpath(path))
    return real.with_name(f".{real.name}{suffix}")


def lock_path(path: str | os.PathLike[str]) -> Path:
    """Where the lock of ``path`` lives: ``.<name>.lock`` next to it."""
    return sidecar(path, ".lock")


def acquire(where: Path, *, wait: bool, note: str = "") -> int:
    """Lock the file ``where`` (created if missing) and return its descriptor (``release``
    it). ``wait=False``: ``LockHeld`` when another holds it. ``note`` (who holds it) is kept
    in the file while held. ``OSError`` when the file cannot be opened."""
    fd = os.open(where, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.lseek(fd, 0, os.SEEK_SET)  # Windows locks a byte range: the same one everywhere
        if sys.platform == "win32":  # pragma: no cover
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        if not (isinstance(exc, BlockingIOError) or sys.platform == "win32"):
            os.close(fd)  # a fault of the lock itself, not another holder
            raise
        try:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
        except OSError:  # Windows: the holder's locked byte cannot be read
            holder = ""
        os.close(fd)
        raise LockHeld(holder or "another process") from exc
    if note:
        os.ftruncate(fd, 0)
        os.write(fd, note.encode())
    return fd


def release(fd: int) -> None:
    """Release a lock ``acquire`` took, clearing its note (none stale for the next reader)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive lock of ``path``, waiting for it. Raises ``FileWriteError`` when
    the lock file cannot be opened (a read-only directory: the file could not be written
    either)."""
    if sys.platform == "win32":  # pragma: no cover - no flock there
        yield
        return
    where = lock_path(path)
    try:
        fd = acquire(where, wait=True)
    except OSError as exc:
        name = os.fspath(path)
        why = f"cannot open its lock file {where} ({exc.strerror or exc})"
        message = f"cannot lock {name}: {why}; the file was not changed"
        raise FileWriteError(message, path=name) from exc
    try:
        yield
    finally:
        release(fd)
