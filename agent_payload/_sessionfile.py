"""The saved-session file, defined once: its records are the pydantic models below (a session
holds what its file holds). Whatever is wrong with a file raises ``SessionFileError`` naming
the file, the place in it (``turns[2].usage``) and the fault, chained to the cause."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError

from agent_payload import _jsontext
from agent_payload._config import clip, is_int
from agent_payload._files import JsonLayout, json_file_text, loads_json_file
from agent_payload._jsondata import kind_word
from agent_payload._paths import format_payload_path
from agent_payload.errors import SessionFileError
from agent_payload.merge import DEFAULT_LIMITS
from agent_payload.report import Change
from agent_payload.usage import Usage

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SessionData",
    "TurnRecord",
    "Undone",
    "dumps",
    "first_error",
    "read_session_file",
    "session_error",
]

FORMAT: Final = "agent_payload.session"
FORMAT_VERSION: Final = 1
MAX_FILE_DEPTH = DEFAULT_LIMITS.max_depth + 8
"""The deepest session file read: the deepest payload the merge accepts, in its envelope."""


class _Record(BaseModel):
    """Strict (``"3"`` is not an int), no unknown keys; validators built on first use."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)


class UsageData(_Record):
    """A ``Usage`` in the file (the cache counts written only when not 0)."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    requests: int = Field(ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    cache_write_input_tokens: int = Field(default=0, ge=0)

    @classmethod
    def read(cls, value: Any) -> Usage:
        return value if isinstance(value, Usage) else Usage(**dict(cls.model_validate(value)))

    @classmethod
    def write(cls, usage: Usage) -> dict[str, Any]:
        return cls.model_construct(**asdict(usage)).model_dump(exclude_defaults=True)


class ChangeData(_Record):
    """A ``Change`` in the file."""

    op: Literal["add", "update", "delete"]
    path: list[str | int]
    old: Any = None
    new: Any = None

    @classmethod
    def read(cls, value: Any) -> Change:
        if isinstance(value, Change):
            return value
        fields = cls.model_validate(value)
        return Change(fields.op, tuple(fields.path), fields.old, fields.new)

    @classmethod
    def write(cls, change: Change) -> dict[str, Any]:
        return {"op": change.op, "path": list(change.path), "old": change.old, "new": change.new}


StoredUsage = Annotated[Usage, BeforeValidator(UsageData.read), PlainSerializer(UsageData.write)]
StoredChange = Annotated[
    Change, BeforeValidator(ChangeData.read), PlainSerializer(ChangeData.write)
]


class TurnRecord(_Record):
    """One turn of a session: ``index`` from 1, the requests that made and undo it (wire
    form), its ``changes`` (paths as they were), ``duration`` (s), ``timestamp`` (ISO 8601 UTC)."""

    index: int = Field(ge=1)
    task: str
    change_request: dict[str, Any]
    reasoning: str | None
    changes: tuple[StoredChange, ...] = Field(strict=False)  # a list in the file
    usage: StoredUsage
    attempts: int = Field(ge=0)
    duration: float = Field(ge=0)
    timestamp: str
    undo_request: dict[str, Any]


class Undone(_Record):
    """A turn taken back by ``undo``, with the request that redoes it."""

    turn: TurnRecord
    redo_request: dict[str, Any]


class SessionData(_Record):
    """A saved session, version 1 (the session checks the payload itself)."""

    format: Literal["agent_payload.session"]
    format_version: Literal[1] = 1
    payload_type: str | None = None  # ``module.QualName`` of the payload type it was saved with
    payload: Any
    turns: list[TurnRecord]
    redo: list[Undone]


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


def read_session_file(path: str | os.PathLike[str]) -> Any:
    """The JSON content of a session file (``SessionFileError`` for anything unreadable)."""
    file = os.fspath(path)
    try:
        text = Path(file).read_bytes().decode("utf-8")
    except OSError as exc:
        raise session_error(file, "", f"cannot read it ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise session_error(file, "", f"not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
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


def validate_session_data(data: Any, file: str) -> SessionData:
    """``data`` checked as a saved session; ``SessionFileError`` naming ``file`` otherwise."""
    if not isinstance(data, dict):
        raise session_error(file, "", f"expected a JSON object, found {kind_word(data)}")
    version = data.get("format_version", 1)
    fmt = data.get("format")
    if fmt != FORMAT:
        raise session_error(
            file, "format", f"expected {FORMAT!r}, found {fmt!r}: this is not a saved session"
        )
    if is_int(version, FORMAT_VERSION + 1):
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
    """The file's text: indented JSON, any depth, UTF-8 (``_files.json_file_text``)."""
    return json_file_text(data, JsonLayout(2))


def first_error(exc: ValidationError) -> tuple[str, str]:
    """Where the first error of ``exc`` is, and what it is (with how many more follow)."""
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
    scalar = value is None or isinstance(value, bool | int | float | str)
    try:
        text = json.dumps(value, ensure_ascii=False) if scalar else repr(value)
    except ValueError:  # an int too long to write
        text = f"{type(value).__name__} too long to show"
    return clip(text)
