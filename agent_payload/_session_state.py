"""A session's decisions, pure (no I/O): ``SessionState`` records turns with the change
request that undoes each, undoes and redoes through change requests, answers ``why`` and
writes the summary of earlier turns; ``agent_payload.session`` drives it."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from pydantic import BaseModel, ValidationError

from agent_payload import _intake, _sessionfile
from agent_payload import merge as _merge
from agent_payload._config import check_payload_type, clip
from agent_payload._jsondata import json_data, locate_problem
from agent_payload._paths import PathSyntaxError, parse_path
from agent_payload._sessionfile import TurnRecord, Undone
from agent_payload.changes import DEFAULT_MARKERS, AgentPayloadChangeRequest
from agent_payload.diff import diff_payloads, undo_change_request
from agent_payload.errors import (
    InvalidPayloadError,
    LimitExceededError,
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

HISTORY_FORMAT: Final = _sessionfile.FORMAT

_UNSET: Any = object()

_PROBE_DEPTH = 100  # deeper payloads are diffed once before a turn's model call


class TurnResult(Protocol):
    """What a session records of a turn: an ``AgentResult``, a successful ``ToolResult``, or
    anything with these attributes (``reasoning``, ``usage``, ``attempts`` read if present)."""

    @property
    def payload(self) -> Any: ...
    @property
    def change_request(self) -> AgentPayloadChangeRequest | None: ...
    @property
    def changes(self) -> list[Change]: ...


def parse_payload_path(path: str | Sequence[str | int]) -> PayloadPath:
    """``"items[3].price"`` or ``'meta["a.b"]'`` -> ``("items", 3, "price")`` (``_paths``'
    grammar); a tuple or list of keys and indices is returned as a tuple."""
    if not isinstance(path, str):
        return tuple(path)
    try:
        return parse_path(path)
    except PathSyntaxError as exc:
        raise UsageError(
            f"why: cannot read the payload path: {exc} Or pass a tuple of keys and indices."
        ) from None


def _related(a: PayloadPath, b: PayloadPath) -> bool:
    """One path is a prefix of the other (``1`` and ``"1"`` differ)."""
    return all(type(x) is type(y) and x == y for x, y in zip(a, b, strict=False))


def _as_json(payload: Any) -> Any:
    return {} if payload is None else json_data(payload)


def _undo_wire(before: Any, after: Any) -> dict[str, Any]:
    """The request (wire form) that turns payload ``after`` back into ``before``."""
    return undo_change_request(_as_json(before), _as_json(after)).to_wire()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


HISTORY_KEPT = 32  # how many changes back a late turn may have started


class SessionState:
    """Every decision of a session: the current payload, the turns in effect, the redo stack."""

    def __init__(
        self,
        payload: Any,
        *,
        payload_type: Any = None,
        summary_turns: int = 5,
        turns: Sequence[TurnRecord] = (),
        redo: Sequence[Undone] = (),
    ) -> None:
        check_payload_type(payload_type, "payload_type")
        prepared = _intake.prepare(payload, payload_type)  # checked as a run checks it, now
        self.payload: Any = prepared.payload
        self.payload_type = prepared.payload_type
        self.summary_turns = summary_turns
        self.turns: list[TurnRecord] = list(turns)
        self.redo_stack: list[Undone] = list(redo)
        self._since: deque[tuple[Any, _merge.Applied]] = deque(maxlen=HISTORY_KEPT)
        """The last changes of the payload (turns, undos, redos): the payload each was applied
        to and the request, so a turn that started from one of them can be rebased."""
        self._next_index = (
            max((t.index for t in (*self.turns, *(u.turn for u in redo))), default=0) + 1
        )

    # -- sending ----------------------------------------------------------------------------

    def summary(self) -> str | None:
        """The account of the last ``summary_turns`` turns sent with the next task (their tasks
        and reasoning, cut to 200 characters; never payloads): None before the first."""
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
        ``base``: the payload the turn started from (no longer current: ``StalePayloadError``);
        ``undo_request``: the request that undoes the turn, when already computed."""
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
            undo_request = _undo_wire(self.payload, result.payload)
        request = result.change_request
        turn = TurnRecord(
            index=self._next_index,
            task=task,
            change_request=request.to_wire(),
            reasoning=getattr(result, "reasoning", request.reasoning),
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
        """The changes applied since ``base``, a payload this session held, in order (None when
        it is not among the last ``HISTORY_KEPT``)."""
        if base is self.payload:
            return []
        for n, (before, _) in enumerate(self._since):
            if before is base:
                return [applied for _, applied in list(self._since)[n:]]
        return None

    def check_before_turn(self) -> None:
        """Raise before the model is asked what would stop the turn from being recorded: the
        diff of its undo request refuses only depth, so a deep payload is diffed with itself."""
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
        self.redo_stack.append(Undone(turn=turn, redo_request=redo_request))
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
        """The last turn in effect with a change at ``path``, above or below it (None if none);
        array positions are compared as each turn recorded them."""
        wanted = parse_payload_path(path)
        for turn in reversed(self.turns):
            if any(_related(tuple(change.path), wanted) for change in turn.changes):
                return turn
        return None

    # -- persistence ------------------------------------------------------------------------

    def to_json(self, *, include_secrets: bool = False) -> dict[str, Any]:
        """The session as JSON data (a ``SessionData``). A model payload holding secrets or
        excluded fields is refused (``UsageError``) unless ``include_secrets=True``."""
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
        return _sessionfile.SessionData(
            format=HISTORY_FORMAT,
            payload_type=_type_name(self.payload_type),
            payload=payload,
            turns=self.turns,
            redo=self.redo_stack,
        ).model_dump()

    @classmethod
    def from_json(
        cls,
        data: Any,
        *,
        payload_type: Any = None,
        summary_turns: int = 5,
        source: str = "session data",
    ) -> SessionState:
        """Read what ``to_json`` wrote, with the ``payload_type`` it was saved with; damaged
        data raises ``SessionFileError`` naming ``source`` and the place."""
        saved = _sessionfile.validate_session_data(data, source)
        if saved.payload_type and _type_name(payload_type) != saved.payload_type:
            given = _type_name(payload_type)
            raise UsageError(
                f"{source}: saved with payload_type {saved.payload_type}, loaded with "
                f"{given or 'none'}; pass payload_type= that class to load() (the payload "
                "would otherwise come back as a plain dict)."
            )
        payload = saved.payload
        try:
            if isinstance(payload_type, type) and issubclass(payload_type, BaseModel):
                payload = payload_type.model_validate(payload)
            return cls(
                payload,
                payload_type=payload_type,
                summary_turns=summary_turns,
                turns=saved.turns,
                redo=saved.redo,
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
            raise _sessionfile.session_error(source, "payload", str(exc)) from exc


def _type_name(payload_type: Any) -> str | None:
    """``module.QualName`` of a payload type, None for none."""
    if payload_type is None:
        return None
    module = getattr(payload_type, "__module__", None)
    name = getattr(payload_type, "__qualname__", None) or repr(payload_type)
    return f"{module}.{name}" if module else str(name)


def _cut(text: str) -> str:
    return clip(" ".join(text.split()), 200)
