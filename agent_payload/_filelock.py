"""The exclusive lock of a file that several writers edit (MCP servers, ``agent-payload apply -o``).

An advisory ``flock`` on a sidecar file next to the target, ``.<name>.lock`` (never on the
target itself: an atomic write replaces the target's inode, so a lock held on it would guard
nothing). Every writer that reads the file, decides, and writes it back holds the lock across
the three steps, so two of them never interleave. The sidecar sits next to the file's real path
(symlinks resolved), so writers naming the file by different paths share one lock. Where
``fcntl`` does not exist (Windows) the lock is a no-op. The lock file is left in place: removing
it while another writer waits on it would let two writers in at once.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from agent_payload.errors import FileWriteError

__all__ = ["lock_path", "locked", "sidecar"]


def sidecar(path: str | os.PathLike[str], suffix: str) -> Path:
    """The hidden file ``.<name><suffix>`` next to ``path``'s real location."""
    real = Path(os.path.realpath(path))
    return real.with_name(f".{real.name}{suffix}")


def lock_path(path: str | os.PathLike[str]) -> Path:
    """Where the lock of ``path`` lives: ``.<name>.lock`` next to it."""
    return sidecar(path, ".lock")


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (waiting for it). Raises ``FileWriteError`` when
    the lock file cannot be opened (a read-only directory: the file could not be written
    either)."""
    if sys.platform == "win32":  # pragma: no cover - no flock there
        yield
        return
    import fcntl

    where = lock_path(path)
    try:
        fd = os.open(where, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise FileWriteError(
            f"cannot lock {os.fspath(path)}: cannot open its lock file {where} "
            f"({exc.strerror or exc}); the file was not changed",
            path=os.fspath(path),
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
