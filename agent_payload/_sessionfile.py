"""The saved-session file: its versioned schema (pydantic) and the one reader that checks it.

A file written by ``PayloadSession.save`` is a JSON object::

    {"format": "agent_payload.session", "format_version": 1,
     "payload": {...}, "turns": [TURN, ...], "redo": [{"turn": TURN, "redo_request": {...}}]}

where each TURN is what ``TurnRecord.to_json`` writes. A turn's ``usage`` holds
``input_tokens``, ``output_tokens`` and ``requests``, plus ``cached_input_tokens`` and
``cache_write_input_tokens`` when not 0 (optional in version 1: a file without them reads them
as 0, so files written before they existed load unchanged). A ``format_version`` above
``FORMAT_VERSION`` was written by a newer release.

``read_session_file(path)`` is the only way in: whatever is wrong with the file (not UTF-8,
not JSON, cut short, a duplicate key, nested beyond what can be read, a field missing or of
the wrong type, no payload, a newer version) raises ``SessionFileError`` naming the file, where
in it (``turns[2].usage.input_tokens``) and what is wrong, chained to the underlying error.
Nothing else escapes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_payload import _jsontext
from agent_payload._files import JsonLayout, json_file_text, loads_json_file
from agent_payload._jsondata import kind_word
from agent_payload._paths import format_payload_path
from agent_payload.errors import SessionFileError
from agent_payload.merge import DEFAULT_LIMITS
from agent_payload.usage import Usage

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ChangeData",
    "RedoData",
    "SessionData",
    "TurnData",
    "UsageData",
    "dumps",
    "first_error",
    "read_session_file",
    "session_error",
    "usage_json",
    "validate_session_data",
]

FORMAT = "agent_payload.session"
FORMAT_VERSION = 1
MAX_FILE_DEPTH = DEFAULT_LIMITS.max_depth + 8
"""The deepest session file read: the deepest payload the merge accepts, in its envelope."""


class _Record(BaseModel):
    """Strict: no coercion (``"3"`` is not an int, ``true`` is not a number), no unknown keys.
    The validators are built when the first file is read, not when the package is imported."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)


class UsageData(_Record):
    """A turn's ``Usage``. The two cache counts are written only when not 0 (files without
    them, such as every file written before they existed, read as 0): a file is the same as
    before wherever no prompt cache was used."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    requests: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    cache_write_input_tokens: int = Field(default=0, ge=0)


def usage_json(usage: Usage) -> dict[str, int]:
    """What ``UsageData`` reads back: the cache counts only when not 0."""
    data = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "requests": usage.requests,
    }
    if usage.cached_input_tokens:
        data["cached_input_tokens"] = usage.cached_input_tokens
    if usage.cache_write_input_tokens:
        data["cache_write_input_tokens"] = usage.cache_write_input_tokens
    return data


class ChangeData(_Record):
    op: Literal["add", "update", "delete"]
    path: list[str | int]
    old: Any = None
    new: Any = None


class TurnData(_Record):
    index: int = Field(ge=1)
    task: str
    change_request: dict[str, Any]
    reasoning: str | None
    changes: list[ChangeData]
    usage: UsageData
    attempts: int = Field(ge=0)
    duration: float = Field(ge=0)
    timestamp: str
    undo_request: dict[str, Any]


class RedoData(_Record):
    turn: TurnData
    redo_request: dict[str, Any]


class SessionData(_Record):
    """Version 1 of the saved session (the payload is checked by the session itself: it must
    be JSON data the merge accepts, and validate against ``payload_type`` when one is given)."""

    format: Literal["agent_payload.session", "agent_payload.session/1"]
    format_version: Literal[1] = 1
    payload_type: str | None = None
    """``module.QualName`` of the payload type the session was saved with (None: plain data)."""
    payload: Any
    turns: list[TurnData]
    redo: list[RedoData]


def session_error(file: str, where: str, what: str) -> SessionFileError:
    """The error for a damaged session file (to be raised ``from`` the cause)."""
    place = f" at {where}" if where else ""
    return SessionFileError(
        f"{file}: not a saved session{place}: {what}. Load a file written by "
        "PayloadSession.save() (the file was not changed; restore it from a copy if it was "
        "damaged).",
        file=file,
        where=where,
    )


def read_session_file(path: str | os.PathLike[str]) -> SessionData:
    """The validated content of a saved session (``SessionFileError`` for anything wrong)."""
    file = os.fspath(path)
    try:
        raw = Path(file).read_bytes()
    except OSError as exc:
        raise session_error(file, "", f"cannot read it ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise session_error(file, "", f"not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    return validate_session_data(_loads(file, text), file)


def validate_session_data(data: Any, file: str) -> SessionData:
    """``data`` (what ``SessionState.to_json`` wrote, read back) checked against the schema;
    ``SessionFileError`` naming ``file`` otherwise."""
    if not isinstance(data, dict):
        raise session_error(file, "", f"expected a JSON object, found {kind_word(data)}")
    version = data.get("format_version", 1)
    fmt = data.get("format")
    if fmt != FORMAT:
        raise session_error(
            file, "format", f"expected {FORMAT!r}, found {fmt!r}: this is not a saved session"
        )
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise session_error(
            file,
            "format_version",
            f"version {version} was written by a newer agent_payload (this one reads up to "
            f"{FORMAT_VERSION}); upgrade agent_payload",
        )
    try:
        return SessionData.model_validate(data)
    except ValidationError as exc:
        raise session_error(file, *first_error(exc)) from exc


def dumps(data: Any) -> str:
    """The file's text (``_files.json_file_text``): indented JSON (compact for data nested
    beyond ``json``'s recursion limit), non-ASCII characters as they are (UTF-8) unless the
    data holds a lone surrogate, which only a JSON escape can carry."""
    return json_file_text(data, JsonLayout(2))


def _loads(file: str, text: str) -> Any:
    try:
        return loads_json_file(text, max_depth=MAX_FILE_DEPTH)
    except _jsontext.TooDeepError as exc:
        raise session_error(
            file,
            "",
            f"the JSON is {exc} (the merge accepts payloads {DEFAULT_LIMITS.max_depth:,} "
            "levels deep)",
        ) from exc
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip())
        what = "the file is cut short (truncated)" if cut else "invalid JSON"
        raise session_error(
            file, "", f"{what}: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc


def first_error(exc: ValidationError) -> tuple[str, str]:
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = format_payload_path(tuple(first["loc"]))
    found = first.get("input")
    if first["type"] == "missing":
        what = "this field is missing"
    else:
        what = f"{first['msg']}, found {kind_word(found)} {_preview(found)}"
    more = len(errors) - 1
    if more:
        what += f" ({more} more problem{'s' if more > 1 else ''} after it)"
    return where, what


def _preview(value: Any) -> str:
    if isinstance(value, dict | list):
        return ""
    try:
        text = json.dumps(value, ensure_ascii=False) if _is_scalar(value) else repr(value)
    except ValueError:  # an int too long to write
        text = f"{type(value).__name__} too long to show"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)
