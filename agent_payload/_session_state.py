"""A session's decisions, pure (no I/O): ``SessionState`` holds the payload, the turns in
effect and the redo stack, records a turn (with the change request that undoes it), undoes and
redoes through change requests, answers ``why(path)``, writes the prompt's summary of earlier
turns and the saved form; ``TurnRecord`` is one turn. ``PayloadSession`` and
``AsyncPayloadSession`` (``agent_payload.session``) are thin drivers around it."""

from __future__ import annotations

import json
import re
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from agent_payload import _intake, _sessionfile
from agent_payload import merge as _merge
from agent_payload._config import check_payload_type
from agent_payload._jsondata import json_data, locate_problem
from agent_payload.changes import DEFAULT_MARKERS, AgentPayloadChangeRequest
from agent_payload.diff import diff_payloads, undo_change_request
from agent_payload.errors import (
    InvalidPayloadError,
    LimitExceededError,
    SessionFileError,
    StalePayloadError,
    UsageError,
)
from agent_payload.report import Change, PayloadPath
from agent_payload.typed._reveal import file_json
from agent_payload.usage import Usage

__all__ = [
    "HISTORY_FORMAT",
    "SessionState",
    "TurnRecord",
    "TurnResult",
    "parse_payload_path",
]

HISTORY_FORMAT = _sessionfile.FORMAT
"""The ``format`` of a saved session; ``format_version`` is ``_sessionfile.FORMAT_VERSION``."""

_UNSET: Any = object()

_PROBE_DEPTH = 100
"""Payloads deeper than this are diffed once before a turn's model call (``check_before_turn``);
shallower ones cost nothing extra."""


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn of a session.

    ``index`` counts turns from 1 in the order they were sent. ``change_request`` is the
    request the agent applied (wire form), ``undo_request`` the one that reverses the turn.
    ``changes`` are the merge's effective changes (paths as they were at that turn).
    ``duration`` is in seconds; ``timestamp`` is ISO 8601 UTC, when the turn ended.
    """

    index: int
    task: str
    change_request: dict[str, Any]
    reasoning: str | None
    changes: tuple[Change, ...]
    usage: Usage
    attempts: int
    duration: float
    timestamp: str
    undo_request: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``TurnRecord.from_json`` reads it back)."""
        return {
            "index": self.index,
            "task": self.task,
            "change_request": self.change_request,
            "reasoning": self.reasoning,
            "changes": [
                {"op": c.op, "path": list(c.path), "old": c.old, "new": c.new} for c in self.changes
            ],
            "usage": _sessionfile.usage_json(self.usage),
            "attempts": self.attempts,
            "duration": self.duration,
            "timestamp": self.timestamp,
            "undo_request": self.undo_request,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TurnRecord:
        """The record ``to_json`` wrote (``SessionFileError`` naming the field when a field is
        missing or of the wrong type)."""
        try:
            checked = _sessionfile.TurnData.model_validate(data)
        except ValidationError as exc:
            raise _sessionfile.session_error("turn record", *_sessionfile.first_error(exc)) from exc
        return cls._from_data(checked)

    @classmethod
    def _from_data(cls, data: _sessionfile.TurnData) -> TurnRecord:
        usage = data.usage
        return cls(
            index=data.index,
            task=data.task,
            change_request=data.change_request,
            reasoning=data.reasoning,
            changes=tuple(Change(c.op, tuple(c.path), c.old, c.new) for c in data.changes),
            usage=Usage(
                usage.input_tokens,
                usage.output_tokens,
                usage.requests,
                cached_input_tokens=usage.cached_input_tokens,
                cache_write_input_tokens=usage.cache_write_input_tokens,
            ),
            attempts=data.attempts,
            duration=data.duration,
            timestamp=data.timestamp,
            undo_request=data.undo_request,
        )


@dataclass(frozen=True, slots=True)
class _Undone:
    """A turn taken back by ``undo``, with the request that redoes it."""

    turn: TurnRecord
    redo_request: dict[str, Any]


class TurnResult(Protocol):
    """What a session records of a turn: an ``AgentResult``, a successful ``ToolResult`` of
    ``ChangeRequestToolHandler`` (your own tool loop), or anything with these attributes.
    ``reasoning``, ``usage`` and ``attempts`` are read when present (else the change
    request's reasoning, no usage, 1 attempt)."""

    @property
    def payload(self) -> Any: ...
    @property
    def change_request(self) -> AgentPayloadChangeRequest | None: ...
    @property
    def changes(self) -> list[Change]: ...


_SEGMENT = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def parse_payload_path(path: str | Sequence[str | int]) -> PayloadPath:
    """``"items[3].price"`` or ``'meta["a.b"]'`` -> ``("items", 3, "price")``; a tuple or list
    of keys and indices is returned as a tuple. The spelling is the one of the prompts and the
    report (identifiers after dots, indices in brackets, any other key as a JSON string in
    brackets)."""
    if not isinstance(path, str):
        return tuple(path)
    parts: list[str | int] = []
    position = 0
    while position < len(path):
        match = _SEGMENT.match(path, position)
        if match is None or (position == 0 and path.startswith(".")):
            raise UsageError(
                f"why: cannot read the payload path {path!r} at character {position}; write "
                'it like items[3].price or meta["a.b"], or pass a tuple of keys and indices.'
            )
        key, index, quoted = match.groups()
        if key is not None:
            parts.append(key)
        elif index is not None:
            parts.append(int(index))
        else:
            parts.append(json.loads(quoted))
        position = match.end()
    return tuple(parts)


def _related(a: PayloadPath, b: PayloadPath) -> bool:
    """One path is a prefix of the other (a change above or below the path concerns it)."""
    n = min(len(a), len(b))
    return all(_same(x, y) for x, y in zip(a[:n], b[:n], strict=True))


def _same(x: str | int, y: str | int) -> bool:
    return type(x) is type(y) and x == y


def _as_json(payload: Any) -> Any:
    return {} if payload is None else json_data(payload)


def _undo_wire(before: Any, after: Any) -> dict[str, Any]:
    """The wire form of the request that turns payload ``after`` back into ``before``."""
    return undo_change_request(_as_json(before), _as_json(after)).to_wire()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


HISTORY_KEPT = 32
"""How many changes back a turn that ran while others finished may have started."""


class SessionState:
    """Every decision of a session (pure: no model calls, no I/O).

    Holds the current payload, the turns in effect and the redo stack; builds what each turn
    sends; records turns; undoes and redoes them.
    """

    def __init__(
        self,
        payload: Any,
        *,
        payload_type: Any = None,
        summary_turns: int = 5,
        turns: Sequence[TurnRecord] = (),
        redo: Sequence[_Undone] = (),
    ) -> None:
        check_payload_type(payload_type, "payload_type")
        prepared = _intake.prepare(payload, payload_type)  # checked as a run checks it, now
        self.payload: Any = prepared.payload
        self.payload_type = prepared.payload_type
        self.summary_turns = summary_turns
        self.turns: list[TurnRecord] = list(turns)
        self.redo_stack: list[_Undone] = list(redo)
        self._since: deque[tuple[Any, _merge.Applied]] = deque(maxlen=HISTORY_KEPT)
        """The last changes of the payload (turns, undos, redos): the payload each was applied
        to and the request, so a turn that started from one of them can be rebased."""
        self._next_index = (
            max((t.index for t in (*self.turns, *(u.turn for u in redo))), default=0) + 1
        )

    # -- sending ----------------------------------------------------------------------------

    def summary(self) -> str | None:
        """The short account of earlier turns sent with the next task (None before the first).

        At most ``summary_turns`` turns, most recent last: each turn's task and the model's
        reasoning, each cut to 200 characters. Payloads and replies are never repeated: the
        prompt carries the current payload only.
        """
        if not self.turns or self.summary_turns <= 0:
            return None
        recent = self.turns[-self.summary_turns :]
        lines = [
            "Earlier turns of this session, already applied to the payload shown "
            "(most recent last; for context only):"
        ]
        skipped = len(self.turns) - len(recent)
        if skipped:
            lines.append(f"({skipped} earlier turn(s) not shown)")
        for turn in recent:
            line = f"{turn.index}. Task: {_cut(turn.task)}"
            if turn.reasoning:
                line += f" -- Done: {_cut(turn.reasoning)}"
            line += f" ({len(turn.changes)} change(s))"
            lines.append(line)
        return "\n".join(lines)

    def record(
        self,
        task: str,
        result: TurnResult,
        *,
        duration: float,
        timestamp: str,
        base: Any = _UNSET,
        undo_request: dict[str, Any] | None = None,
    ) -> TurnRecord:
        """Record a finished turn: the payload becomes ``result.payload``; redo is cleared.

        ``base`` is the payload the turn started from: if the session's payload is no longer
        that object (an ``undo`` or another turn finished meanwhile, in async code), the turn
        is not recorded and ``StalePayloadError`` is raised. ``undo_request``: the request
        that undoes the turn, when already computed (``_undo_wire(base, result.payload)``).
        """
        if base is not _UNSET and base is not self.payload:
            raise StalePayloadError(
                f"session: the turn {task!r} started from a payload that is no longer current "
                "(another turn, an undo or a redo finished while it ran); it was not recorded. "
                "Send the task again.",
                expected=f"turn {self._next_index} base",
                actual="a newer payload",
            )
        if getattr(result, "is_error", False) or result.change_request is None:
            raise UsageError(
                f"session: the turn {task!r} has no applied change request (a tool result "
                "marked is_error, or nothing parsed); record only results that were applied."
            )
        if undo_request is None:
            undo_request = undo_change_request(
                _as_json(self.payload), _as_json(result.payload)
            ).to_wire()
        request = result.change_request
        reasoning = getattr(result, "reasoning", request.reasoning)
        turn = TurnRecord(
            index=self._next_index,
            task=task,
            change_request=request.to_wire(),
            reasoning=reasoning,
            changes=tuple(result.changes),
            usage=getattr(result, "usage", None) or Usage(),
            attempts=int(getattr(result, "attempts", 1)),
            duration=duration,
            timestamp=timestamp,
            undo_request=undo_request,
        )
        self._next_index += 1
        self.turns.append(turn)
        self.redo_stack.clear()
        marker = getattr(result, "marker", None)
        markers = frozenset({marker}) if isinstance(marker, str) else DEFAULT_MARKERS
        self._since.append((self.payload, _merge.Applied(request, markers)))
        self.payload = result.payload
        return turn

    def since(self, base: Any) -> list[_merge.Applied] | None:
        """The changes applied since ``base`` (a payload this session held, the start of a turn
        that ran while others finished), in order; None when ``base`` is not among the last
        ``HISTORY_KEPT`` payloads (or was replaced from outside the session)."""
        if base is self.payload:
            return []
        for n, (before, _) in enumerate(self._since):
            if before is base:
                return [applied for _, applied in list(self._since)[n:]]
        return None

    def check_before_turn(self) -> None:
        """Raise now, before the model is asked (no tokens spent), what would stop a turn on
        the current payload from being recorded. Recording diffs the payload (the turn's undo
        request), and depth is what a diff can refuse: a payload deeper than
        ``_PROBE_DEPTH`` levels is first diffed with itself, so whatever the diff refuses
        (``LimitExceededError``) is raised here rather than after the model call."""
        current = _as_json(self.payload)
        if locate_problem(current, _PROBE_DEPTH, sys.maxsize) is not None:
            undo_change_request(current, current)

    # -- undo / redo ------------------------------------------------------------------------

    def undo(self) -> TurnRecord | None:
        """Take back the last turn in effect (None when there is none)."""
        if not self.turns:
            return None
        turn = self.turns[-1]
        after = _as_json(self.payload)
        restored = _merge.apply_change_request(self.payload, turn.undo_request, strict=True)
        redo_request = diff_payloads(_as_json(restored.payload), after).to_wire()
        self.turns.pop()
        self.redo_stack.append(_Undone(turn, redo_request))
        self._since.append((self.payload, _merge.Applied(turn.undo_request)))
        self.payload = restored.payload
        return turn

    def redo(self) -> TurnRecord | None:
        """Apply again the last turn taken back by ``undo`` (None when there is none)."""
        if not self.redo_stack:
            return None
        undone = self.redo_stack.pop()
        redone = _merge.apply_change_request(self.payload, undone.redo_request, strict=True)
        self._since.append((self.payload, _merge.Applied(undone.redo_request)))
        self.payload = redone.payload
        self.turns.append(undone.turn)
        return undone.turn

    # -- questions --------------------------------------------------------------------------

    def why(self, path: str | Sequence[str | int]) -> TurnRecord | None:
        """The last turn in effect whose changes touched ``path``: a change at the path, above
        it (a container set or deleted whole) or below it (one of its fields). None if no turn
        did. Paths are compared as each turn recorded them (array positions at that turn)."""
        wanted = parse_payload_path(path)
        for turn in reversed(self.turns):
            if any(_related(tuple(change.path), wanted) for change in turn.changes):
                return turn
        return None

    # -- persistence ------------------------------------------------------------------------

    def to_json(self, *, include_secrets: bool = False) -> dict[str, Any]:
        """The session as JSON data: the current payload, the turns in effect, the redo stack.

        A model payload holding secrets (``SecretStr``) or ``Field(exclude=True)`` values is
        refused (``UsageError`` naming them: its JSON form would lose them) unless
        ``include_secrets=True``, which writes their values in clear so that ``from_json``
        gives them back."""
        payload = (
            {}
            if self.payload is None
            else file_json(
                self.payload,
                include_secrets=include_secrets,
                what="session",
                option="include_secrets",
            )
        )
        return {
            "format": HISTORY_FORMAT,
            "format_version": _sessionfile.FORMAT_VERSION,
            "payload_type": _type_name(self.payload_type),
            "payload": payload,
            "turns": [turn.to_json() for turn in self.turns],
            "redo": [
                {"turn": u.turn.to_json(), "redo_request": u.redo_request} for u in self.redo_stack
            ],
        }

    @classmethod
    def from_json(
        cls,
        data: Any,
        *,
        payload_type: Any = None,
        summary_turns: int = 5,
        source: str = "session data",
    ) -> SessionState:
        """Read what ``to_json`` wrote; ``payload_type`` (a pydantic model class) validates
        the payload back into that class; a session saved with a payload type must be loaded
        with that type (``UsageError`` otherwise: the payload would come back as a plain dict).
        Anything wrong in the data (a field missing or of the wrong type, no payload, a payload
        the merge refuses or that does not fit ``payload_type``) raises ``SessionFileError``
        naming ``source`` and the place."""
        checked = _sessionfile.validate_session_data(data, source)
        return cls._from_data(
            checked, payload_type=payload_type, summary_turns=summary_turns, source=source
        )

    @classmethod
    def _from_data(
        cls,
        data: _sessionfile.SessionData,
        *,
        payload_type: Any,
        summary_turns: int,
        source: str,
    ) -> SessionState:
        saved_type = data.payload_type
        if saved_type and _type_name(payload_type) != saved_type:
            given = _type_name(payload_type)
            raise UsageError(
                f"{source}: saved with payload_type {saved_type}, loaded with "
                f"{given or 'none'}; pass payload_type= that class to load() (the payload "
                "would otherwise come back as a plain dict)."
            )
        payload = data.payload
        try:
            if isinstance(payload_type, type) and issubclass(payload_type, BaseModel):
                payload = payload_type.model_validate(payload)
            return cls(
                payload,
                payload_type=payload_type,
                summary_turns=summary_turns,
                turns=[TurnRecord._from_data(t) for t in data.turns],
                redo=[_Undone(TurnRecord._from_data(u.turn), u.redo_request) for u in data.redo],
            )
        except ValidationError as exc:
            where, what = _sessionfile.first_error(exc)
            name = getattr(payload_type, "__name__", repr(payload_type))
            raise _sessionfile.session_error(
                source,
                "payload" + ("." + where if where and not where.startswith("[") else where),
                f"does not fit payload_type {name}: {what}",
            ) from exc
        except (InvalidPayloadError, LimitExceededError) as exc:
            if isinstance(exc, SessionFileError):
                raise
            raise _sessionfile.session_error(source, "payload", str(exc)) from exc


def _type_name(payload_type: Any) -> str | None:
    """``module.QualName`` of a payload type (what a saved session records), None for none."""
    if payload_type is None:
        return None
    module = getattr(payload_type, "__module__", None)
    name = getattr(payload_type, "__qualname__", None) or repr(payload_type)
    return f"{module}.{name}" if module else str(name)


def _cut(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
