"""What ``PayloadStore`` returns (``StoredPayload``, ``HistoryEntry``) and how its values are
written to and read from the database's text columns (JSON, never NaN), and how a recorded
payload type is found again by its name."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from agent_payload import _jsontext
from agent_payload.changes import AgentPayloadChangeRequest
from agent_payload.errors import (
    ConfigurationError,
    InvalidChangeRequestError,
    InvalidPayloadError,
)
from agent_payload.report import MergeReport
from agent_payload.usage import Usage

__all__ = [
    "ENTRY_FIELDS",
    "EntryKind",
    "HistoryEntry",
    "StoredPayload",
    "dumps",
    "entry_from_row",
    "entry_row",
    "loads",
    "request_json",
    "resolve_type",
    "type_name",
]

EntryKind = Literal["create", "apply", "revert"]


@dataclass(frozen=True, slots=True)
class StoredPayload:
    """A key's payload at a version (JSON data, as the store keeps it; validate it with its
    type to get a model instance). ``apply`` and ``revert`` also return the ``entry`` they
    recorded and the merge ``report``."""

    key: str
    version: int
    payload: Any
    payload_type: str | None = None
    entry: HistoryEntry | None = None
    report: MergeReport | None = None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One version of a key: how it was made from its ``parent`` version.

    ``kind``: ``create`` (version 1, no request), ``apply`` or ``revert`` (``reverted_to``: the
    version whose payload it restored). ``change_request``: the request as applied to the
    parent (wire form, after any rebase); ``written``: the request as its writer wrote it,
    against ``base_version``, when it was rebased (else ``None``); ``markers``: the DELETE
    markers it was merged with. ``reasoning``, ``run_id``, ``model_name``, ``usage``: what the
    writer said; ``created_at``: when it was stored (UTC)."""

    key: str
    version: int
    parent: int | None
    kind: EntryKind
    change_request: dict[str, Any] | None
    base_version: int | None = None
    written: dict[str, Any] | None = None
    markers: tuple[str, ...] = ()
    reasoning: str | None = None
    run_id: str | None = None
    model_name: str | None = None
    usage: Usage | None = None
    reverted_to: int | None = None
    created_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))

    @property
    def rebased(self) -> bool:
        """True when the request was written against an older version and rebased."""
        return self.written is not None


def dumps(value: Any, what: str) -> str:
    """JSON text for a column, numbers read from a file written as they were read (the batch
    state's and the files' writer, ``_jsontext``); ``InvalidPayloadError`` for NaN or
    infinity: JSON has none."""
    try:
        return _jsontext.compact(value)
    except ValueError as exc:
        raise InvalidPayloadError(
            f"{what} holds NaN or infinity, which JSON cannot store; nothing was stored"
        ) from exc


def loads(text: str | None) -> Any:
    """A column's JSON, its numbers exactly as stored (what ``dumps`` wrote)."""
    return None if text is None else _jsontext.loads_file(text)


def request_json(change_request: Any) -> dict[str, Any]:
    """A change request as JSON data (its wire form for a parsed one)."""
    if isinstance(change_request, AgentPayloadChangeRequest):
        wire: dict[str, Any] = change_request.to_wire()
        return wire
    if change_request is None:
        return {}
    if not isinstance(change_request, Mapping):
        raise InvalidChangeRequestError(
            f"change_request: expected a change request object, found "
            f"{type(change_request).__name__}; nothing was stored"
        )
    try:
        text = json.dumps(
            dict(change_request), allow_nan=False, ensure_ascii=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as exc:
        raise InvalidChangeRequestError(
            f"change_request: holds something that is not JSON data ({exc}); nothing was stored"
        ) from exc
    copied: dict[str, Any] = json.loads(text)
    return copied


def _json(value: Any) -> str | None:
    return None if value is None else dumps(value, "the change request")


def _usage(text: str | None) -> Usage | None:
    data = loads(text)
    if not isinstance(data, dict):
        return None
    known = {f.name for f in dataclasses.fields(Usage)}
    return Usage(**{k: v for k, v in data.items() if k in known})


# How a HistoryEntry field that is not a plain column value is written and read back.
_COLUMNS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "change_request": (_json, loads),
    "written": (_json, loads),
    "markers": (lambda markers: dumps(list(markers), "markers"), lambda t: tuple(loads(t))),
    "usage": (
        lambda usage: None if usage is None else dumps(dataclasses.asdict(usage), "usage"),
        _usage,
    ),
    "created_at": (datetime.timestamp, lambda t: datetime.fromtimestamp(t, UTC)),
}
ENTRY_FIELDS = tuple(f.name for f in dataclasses.fields(HistoryEntry))


def entry_row(entry: HistoryEntry) -> dict[str, Any]:
    """The columns of ``entry``'s history row, by name (its fields' names)."""
    row = {name: getattr(entry, name) for name in ENTRY_FIELDS}
    return {name: _COLUMNS[name][0](v) if name in _COLUMNS else v for name, v in row.items()}


def entry_from_row(row: Sequence[Any]) -> HistoryEntry:
    """The entry of a history row read as ``ENTRY_FIELDS``."""
    values = zip(ENTRY_FIELDS, row, strict=True)
    return HistoryEntry(**{n: _COLUMNS[n][1](v) if n in _COLUMNS else v for n, v in values})


def type_name(payload_type: Any) -> str:
    """``module.QualName`` of a payload type (what the store records)."""
    module = getattr(payload_type, "__module__", None)
    name = getattr(payload_type, "__qualname__", None)
    if not module or not name or "<locals>" in name:
        raise ConfigurationError(
            f"payload_type: the store records a type by its importable name, and "
            f"{payload_type!r} has none (define the class at module level)"
        )
    return f"{module}.{name}"


def resolve_type(name: str, known: Mapping[str, Any], key: str) -> Any:
    """The type recorded as ``name``: one given to this store (``payload_types=`` or an earlier
    ``create`` in this process). Never imported by a name read from the database: whoever can
    write the database must not choose what this process imports."""
    if name in known:
        return known[name]
    short = name.rsplit(".", 1)[-1]
    raise ConfigurationError(
        f"key {key!r} was created with payload_type {name}, which this store was not given; "
        f"pass it: PayloadStore(url, payload_types=[{short}])"
    )
