"""Atomic file writes: the one helper every path that writes a file uses.

A write goes to a temporary file in the target's directory, is flushed and fsynced, and then
replaces the target with ``os.replace`` (atomic on POSIX and Windows). On any failure (disk
full, ``RLIMIT_FSIZE``, permissions, an exception while encoding) the temporary file is removed
and the target is exactly as it was; the error is a ``FileWriteError`` naming the path, chained
to the cause. An existing target keeps its permission bits.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from agent_payload.errors import FileWriteError

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def atomic_write_text(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see the module docstring)."""
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise FileWriteError(
            f"could not write {os.fspath(path)}: the text cannot be encoded as {encoding} "
            f"({exc.reason} at character {exc.start}); the file was not changed",
            path=os.fspath(path),
        ) from exc
    atomic_write_bytes(path, data)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    target = Path(path)
    directory = target.parent
    tmp_name: str | None = None
    try:
        mode: int | None = None
        with contextlib.suppress(FileNotFoundError):
            mode = target.stat().st_mode & 0o7777
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
        tmp_name = None
        _fsync_directory(directory)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FileWriteError(
            f"could not write {target}: {reason}; the file was not changed", path=str(target)
        ) from exc
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable where the platform allows it (best effort: not on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
