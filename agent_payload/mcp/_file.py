"""The served file as bytes: read and decoded exactly (the library's one JSON file reader),
its version, and an atomic write made only while it is still the version judged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agent_payload._files import atomic_write_bytes, loads_json_file
from agent_payload.mcp._journal import digest

__all__ = ["FileProblem", "decode", "load", "read_bytes", "version", "write_unchanged"]


class FileProblem(Exception):
    """The file cannot be read as a JSON payload right now (the message says why)."""


def decode(path: Path, data: bytes) -> Any:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileProblem(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); JSON files must be UTF-8"
        ) from exc
    try:
        return loads_json_file(text)
    except json.JSONDecodeError as exc:
        raise FileProblem(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FileProblem(f"cannot read {path}: {exc.strerror or exc}") from exc


def load(path: Path) -> tuple[bytes, Any]:
    """The file's bytes and its JSON; ``FileProblem`` when it cannot be read."""
    data = read_bytes(path)
    return data, decode(path, data)


def version(path: Path) -> str:
    """The file's version, read in blocks (no second copy of a large file in memory)."""
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                hasher.update(block)
    except OSError as exc:
        raise FileProblem(f"cannot read {path}: {exc.strerror or exc}") from exc
    return hasher.hexdigest()[: len(digest(b""))]


def write_unchanged(path: Path, expected: str, new: bytes) -> bool:
    """Write ``new`` if the file is still version ``expected`` (a writer that does not take the
    lock may have replaced it); False when it is not. Raises ``FileProblem``, ``FileWriteError``."""
    if version(path) != expected:
        return False
    atomic_write_bytes(path, new)
    return True
