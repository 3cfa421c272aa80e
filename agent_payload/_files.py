"""The one reader and the one writer of JSON files (the CLI, the MCP server, sessions).

Read exactly (``_jsontext.loads_file``: numbers as written, duplicate keys and ``NaN`` refused
with line and column); written in the input's layout (``JsonLayout``) with numbers as read.
A write goes to a temporary file beside the target, fsynced, then ``os.replace``: on any
failure the target is as it was (``FileWriteError`` naming the path). Refused before writing:
a target that is not a regular file, read-only or hard-linked, or a read-only folder. A
symlink's target is replaced; a replaced file keeps its mode (and owner, where allowed).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_payload import _jsontext
from agent_payload.errors import FileWriteError

__all__ = [
    "JsonLayout",
    "atomic_write_bytes",
    "atomic_write_text",
    "json_file_chunks",
    "json_file_text",
    "json_layout",
    "loads_json_file",
]


# --- reading ------------------------------------------------------------------------------


def loads_json_file(text: str, *, max_depth: int | None = None) -> Any:
    """The JSON data of a file's text, read exactly (a BOM skipped). Raises
    ``json.JSONDecodeError`` (line, column, what) or ``_jsontext.TooDeepError``."""
    return _jsontext.loads_file(text.removeprefix("\ufeff"), max_depth=max_depth)


# --- the text written ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonLayout:
    """How a JSON file is laid out, so that a rewrite keeps it (no diff of every line)."""

    indent: int | str | None = 2
    separators: tuple[str, str] | None = None


def json_layout(text: str) -> JsonLayout:
    """The layout of ``text``: the indent of its first indented line (spaces or a tab); one
    line (``{"a": 1}`` or minified) stays one line, with the same separators."""
    first = _NON_SPACE.search(text)
    start = first.start() if first is not None else len(text)
    end = len(text)
    while end > start and text[end - 1].isspace():
        end -= 1
    newline = text.find("\n", start, end)
    if newline == -1:
        compact = text[start : start + 1] in "{[" and (
            text.find('": ', start, end) == -1 and text.find(", ", start, end) == -1
        )
        return JsonLayout(None, (",", ":") if compact else (", ", ": "))
    pos = newline + 1
    while pos < end:
        stop = text.find("\n", pos, end)
        stop = end if stop == -1 else stop
        line = text[pos:stop].rstrip("\r")
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return JsonLayout("\t" if lead.startswith("\t") else len(lead))
        pos = stop + 1
    return JsonLayout(2)


_NON_SPACE = re.compile(r"\S")


def json_file_text(value: Any, layout: JsonLayout | None = None) -> str:
    """``value`` as a file's text: ``json_file_chunks`` joined."""
    return b"".join(json_file_chunks(value, layout)).decode("utf-8")


def json_file_chunks(value: Any, layout: JsonLayout | None = None) -> Iterator[bytes]:
    """``value`` as a file's UTF-8 bytes, in pieces (a large payload's text is never whole in
    memory): any depth, a final newline, numbers read from a file written as they were read,
    non-ASCII characters as they are; a lone surrogate, which UTF-8 cannot carry, as its JSON
    escape (``\\ud800``)."""
    layout = layout or JsonLayout()
    pieces = _jsontext.dump_pieces(
        value, indent=layout.indent, separators=layout.separators, literals=True
    )
    del value  # the caller may let its payload go while the pieces are written
    pieces.append("\n")
    pieces.reverse()
    while pieces:  # each piece let go once encoded
        yield pieces.pop().encode("utf-8", "backslashreplace")


# --- writing ------------------------------------------------------------------------------


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


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or pieces of them) to ``path`` atomically (see the module
    docstring)."""
    given = Path(path)
    target = Path(os.path.realpath(given))  # a symlink: replace what it points to
    directory = target.parent
    tmp_name: str | None = None
    try:
        existing = _check_target(given, target)
        fd, tmp_name = _create_temporary(target, existing)
        with os.fdopen(fd, "wb") as handle:
            for chunk in (data,) if isinstance(data, bytes) else data:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
        tmp_name = None
        _fsync_directory(directory)
    except OSError as exc:
        if isinstance(exc, FileWriteError):
            raise
        reason = exc.strerror or type(exc).__name__
        raise FileWriteError(
            f"could not write {given}: {reason}; the file was not changed", path=str(given)
        ) from exc
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def _refuse(given: Path, why: str, code: int) -> FileWriteError:
    """The refusal to write ``given``, chained to the ``OSError`` the fault is (``code``)."""
    error = FileWriteError(
        f"could not write {given}: {why}; the file was not changed", path=str(given)
    )
    error.__cause__ = OSError(code, os.strerror(code), str(given))  # EACCES: PermissionError
    return error


def _check_target(given: Path, target: Path) -> os.stat_result | None:
    """The target's status (None: a new file), or ``FileWriteError`` for a target the
    rename must not replace."""
    linked = given.is_symlink()
    shown = f"{target} (the symlink {given} points there)" if linked else ""
    try:
        status: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        status = None
    if status is not None:
        name = shown or str(given)
        if stat.S_ISDIR(status.st_mode):
            raise _refuse(given, f"{name} is a directory, not a file", errno.EISDIR)
        if not stat.S_ISREG(status.st_mode):
            raise _refuse(given, f"{name} is not a regular file", errno.EINVAL)
        if not status.st_mode & 0o222 or not os.access(target, os.W_OK):
            raise _refuse(
                given,
                f"{name} is read-only (mode {stat.filemode(status.st_mode)}); make it writable "
                "(chmod u+w) to let it be replaced",
                errno.EACCES,
            )
        if status.st_nlink > 1:
            raise _refuse(
                given,
                f"{name} has {status.st_nlink} hard links; replacing it would leave the other "
                "names with the old content (write to a copy, or remove the other links)",
                errno.EMLINK,
            )
    folder = target.parent
    with contextlib.suppress(FileNotFoundError):  # a missing folder: the write says so
        mode = os.stat(folder).st_mode
        if not mode & 0o222 or not os.access(folder, os.W_OK):
            raise _refuse(
                given,
                f"its folder {folder} is read-only (mode {stat.filemode(mode)}): the file is "
                "replaced by a new one written there",
                errno.EACCES,
            )
    return status


def _create_temporary(target: Path, existing: os.stat_result | None) -> tuple[int, str]:
    """A new temporary file beside ``target`` with the existing file's mode and owner (a new
    file: the umask's mode)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        name = str(target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(name, flags, 0o600 if existing is not None else 0o666)
        except FileExistsError:
            continue
        if existing is not None:
            try:
                now = os.fstat(fd)
                owner = (existing.st_uid, existing.st_gid)
                if hasattr(os, "fchown") and (now.st_uid, now.st_gid) != owner:
                    with contextlib.suppress(OSError):  # allowed to root, or to change group
                        os.fchown(fd, *owner)
                os.chmod(name, stat.S_IMODE(existing.st_mode))
            except OSError:
                os.close(fd)
                os.unlink(name)
                raise
        return fd, name
    raise FileExistsError(f"no free temporary name beside {target}")


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable where the platform allows it (best effort: not on Windows)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
