"""The served file as bytes: read and decoded exactly (the library's one JSON file reader),
its version, and an atomic write made only while it is still the version judged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agent_payload._files import JsonLayout, atomic_write_bytes, json_layout, loads_json_file
from agent_payload.mcp._journal import Tap, Versions, digest

__all__ = ["FileProblem", "decode", "load", "read_bytes", "version", "write_unchanged"]


class FileProblem(Exception):
    """The file cannot be read as a JSON payload right now (the message says why)."""


def decode(path: Path, data: bytes) -> Any:
    return _parse(path, _text(path, data))


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileProblem(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); JSON files must be UTF-8"
        ) from exc


def _parse(path: Path, text: str) -> Any:
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


def load(path: Path, versions: Versions) -> tuple[str, bytes, JsonLayout, Any]:
    """The file's version and its bytes compressed (remembered as shown once read), its layout
    and its JSON; ``FileProblem`` when it cannot be read (nothing remembered). The bytes are
    let go before the JSON is built (a large file's peak memory)."""
    data = read_bytes(path)
    version, packed = versions.pack(data)
    text = _text(path, data)
    del data
    payload = _parse(path, text)
    versions.keep(version, packed)
    return version, packed, json_layout(text), payload


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


def write_unchanged(path: Path, expected: str, new: bytes | Tap) -> bool:
    """Write ``new`` if the file is still version ``expected`` (a writer that does not take the
    lock may have replaced it); False when it is not. Raises ``FileProblem``, ``FileWriteError``."""
    if version(path) != expected:
        return False
    atomic_write_bytes(path, new)
    return True
