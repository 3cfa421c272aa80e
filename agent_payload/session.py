"""``PayloadSession``: carry one payload through many turns of a conversation with an agent.

::

    session = PayloadSession(agent, invoice)
    session.send("Add a line for 3 hours of consulting at 120 EUR")
    session.send("Mark the invoice as sent")
    session.undo()                                  # back to before "Mark the invoice as sent"
    session.why("lineItems[2].quantity")            # the turn (task, reasoning) that set it
    session.save("invoice-session.json")
    PayloadSession.load("invoice-session.json", agent)

Each ``send(task)`` runs the agent on the **current** payload with a short summary of the
earlier turns (their tasks and reasoning, never their payloads or replies), so the prompt
stays the size of one turn however long the session gets. Each turn is recorded as a
``TurnRecord``: the task, the change request applied, the model's reasoning, the effective
changes, token usage, the number of attempts, the duration and the time.

Undo and redo go through change requests, not stored copies of the payload: when a turn is
recorded, the session also records the change request that undoes it
(``diff.undo_change_request``, exact for any JSON); ``undo()`` merges that request into the
current payload and keeps the turn on a redo stack with the request that redoes it
(``diff.diff_payloads(before, after)``). A saved history therefore holds the current payload
plus one small request per turn, not one payload per turn. A new ``send`` clears the redo
stack. ``why(path)`` answers from the turns in effect (undone turns do not count).

``AsyncPayloadSession`` is the same with ``await session.send(task)``; both share every
decision in ``SessionState`` (``agent_payload._session_state``: pure, no I/O).

A turn that finishes after others (concurrent ``send``s, an ``undo`` meanwhile) was written
against the payload it started from: its change request is rebased over the changes recorded
since (MERGE.md section 9) and judged again on the current payload with the agent's guards,
validators and read scope, then recorded; a collision (or a refusal on the current payload)
raises ``ConcurrentChangeError`` and the session is unchanged. A turn that started more than
``HISTORY_KEPT`` (32) changes back, or from a payload set from outside, raises
``StalePayloadError`` as before.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

from agent_payload import _callables, _sessionfile
from agent_payload._files import atomic_write_text
from agent_payload._session_state import HISTORY_FORMAT as HISTORY_FORMAT
from agent_payload._session_state import (
    SessionState,
    TurnRecord,
    TurnResult,
    _now,
    _undo_wire,
    parse_payload_path,
)
from agent_payload.errors import ConcurrentChangeError
from agent_payload.judge import Judge, Verdict
from agent_payload.report import MergeReport

__all__ = [
    "AsyncPayloadSession",
    "PayloadSession",
    "SessionState",
    "TurnRecord",
    "TurnResult",
    "parse_payload_path",
]


class _SessionBase:
    """What the sync and async sessions share (everything but ``send``)."""

    def __init__(
        self,
        agent: Any,
        payload: Any = None,
        *,
        payload_type: Any = None,
        summary_turns: int = 5,
        clock: Callable[[], float] = time.perf_counter,
        now: Callable[[], str] = _now,
        state: SessionState | None = None,
    ) -> None:
        self.agent = agent
        self.state = state or SessionState(
            payload, payload_type=payload_type, summary_turns=summary_turns
        )
        self._clock = clock
        self._now = now

    @property
    def payload(self) -> Any:
        """The current payload (the same kind as given: dict, list or pydantic model)."""
        return self.state.payload

    @property
    def history(self) -> tuple[TurnRecord, ...]:
        """The turns in effect, oldest first (undone turns are not part of it)."""
        return tuple(self.state.turns)

    @property
    def can_undo(self) -> bool:
        return bool(self.state.turns)

    @property
    def can_redo(self) -> bool:
        return bool(self.state.redo_stack)

    def undo(self) -> TurnRecord | None:
        """Take back the last turn; returns it (None when there is nothing to undo)."""
        return self.state.undo()

    def redo(self) -> TurnRecord | None:
        """Apply again the last undone turn; returns it (None when there is nothing to redo)."""
        return self.state.redo()

    def why(self, path: str | Sequence[str | int]) -> TurnRecord | None:
        """Which turn (task, reasoning) last changed ``path`` (see ``SessionState.why``)."""
        return self.state.why(path)

    def to_json(self, *, include_secrets: bool = False) -> dict[str, Any]:
        """The session as JSON data (payload, turns, redo stack, payload type name); secrets
        and excluded values as for ``save``."""
        return self.state.to_json(include_secrets=include_secrets)

    def record(self, task: str, result: TurnResult, *, duration: float = 0.0) -> TurnRecord:
        """Record a turn from your own tool loop: ``result`` is a successful ``ToolResult``
        of a ``ChangeRequestToolHandler`` that started from this session's current payload
        (or an ``AgentResult``); the session's payload becomes ``result.payload`` and the turn
        joins the history (undo, redo, why, save). Raises ``UsageError`` for a result that
        applied nothing (``is_error``)."""
        return self.state.record(task, result, duration=duration, timestamp=self._now())

    def save(self, path: str | Path, *, include_secrets: bool = False) -> None:
        """Write ``to_json()`` to ``path`` (UTF-8, indented), atomically: if the write fails
        (disk full, a file-size limit, a read-only file) ``FileWriteError`` names the path and
        an earlier save there is exactly as it was.

        A pydantic payload holding secrets (``SecretStr``) or ``Field(exclude=True)`` values
        is refused before anything is written (``UsageError`` naming them: its JSON form would
        save the mask ``"**********"`` and drop the excluded values), unless
        ``include_secrets=True``: their values are then written in clear, and ``load`` gives
        them back. Protect such a file as you would the secrets."""
        atomic_write_text(path, _sessionfile.dumps(self.to_json(include_secrets=include_secrets)))

    def _late_judge(self, base: Any, result: Any) -> Judge | None:
        """The judge of a turn that started from ``base`` when the session has moved on since
        (None: ``base`` is current, or too old to rebase: ``record`` then refuses it)."""
        since = self.state.since(base)
        if not since:
            return None
        return Judge(
            self.state.payload,
            marker=getattr(result, "marker", None),
            payload_type=self.state.payload_type,
            validators=getattr(self.agent, "validators", ()),
            guards=getattr(self.agent, "guards", ()),
            read_scope=getattr(self.agent, "read_scope", None),
            base=base,
            applied=since,
        )

    def _rebased(self, task: str, result: Any, verdict: Verdict) -> Any:
        """The late turn's result as rebased and judged on the current payload."""
        if verdict.status != "accepted":
            problems = "; ".join(f"{p.path}: {p.message}" for p in verdict.problems)
            raise ConcurrentChangeError(
                f"session: the turn {task!r} finished after other changes were recorded and "
                f"could not be applied over them ({verdict.message or problems}); the session is "
                "unchanged. Send the task again.",
                report=verdict.report or MergeReport(),
            )
        return dataclasses.replace(
            result,
            payload=verdict.payload,
            change_request=verdict.change_request,
            report=verdict.report,
        )

    def _run_args(self, task: str) -> dict[str, Any]:
        args: dict[str, Any] = {}
        summary = self.state.summary()
        if summary:
            args["extra_instructions"] = summary
        if self.state.payload_type is not None:
            args["payload_type"] = self.state.payload_type
        return args

    @classmethod
    def load(
        cls,
        path: str | Path,
        agent: Any,
        *,
        payload_type: Any = None,
        summary_turns: int = 5,
    ) -> Self:
        """A session continued from a file written by ``save``. A damaged file (not UTF-8, not
        JSON, cut short, nested too deeply, a field missing or of the wrong type, no payload, a
        newer format) raises ``SessionFileError`` naming the file, the place and the fault."""
        state = SessionState.from_json(
            _sessionfile.read_session_file(path),
            payload_type=payload_type,
            summary_turns=summary_turns,
            source=os.fspath(path),
        )
        return cls(agent, state=state)


class PayloadSession(_SessionBase):
    """A payload edited over many turns by a ``PayloadAgent`` (see the module docstring).

    ``agent`` is anything with ``run(payload, task, **options) -> AgentResult`` (``None`` for
    a session that only records turns from your own tool loop with ``record``);
    ``summary_turns`` how many earlier turns the next prompt recalls (default 5);
    ``clock``/``now`` are injectable for tests (duration and timestamp of each turn).
    """

    def send(self, task: str) -> TurnRecord:
        """Run the agent on the current payload; record and return the turn. On failure the
        agent's error propagates and the session is unchanged."""
        base = self.state.payload
        self.state.check_before_turn()  # refusals come before the model call, not after it
        started = self._clock()
        result = self.agent.run(base, task, **self._run_args(task))
        duration = self._clock() - started
        late = self._late_judge(base, result)
        if late is not None:  # other changes were recorded while it ran (MERGE.md section 9)
            verdict = _callables.drive(
                late.steps(result.change_request), "PayloadSession.send", "use AsyncPayloadSession"
            )
            result, base = self._rebased(task, result, verdict), late.payload
        return self.state.record(task, result, duration=duration, timestamp=self._now(), base=base)


class AsyncPayloadSession(_SessionBase):
    """``PayloadSession`` for an ``AsyncPayloadAgent``: ``await session.send(task)``."""

    async def send(self, task: str) -> TurnRecord:
        """Run the agent on the current payload; record and return the turn."""
        base = self.state.payload
        self.state.check_before_turn()  # refusals come before the model call, not after it
        started = self._clock()
        result = await self.agent.run(base, task, **self._run_args(task))
        duration = self._clock() - started
        while True:
            late = self._late_judge(base, result)
            if late is not None:  # other changes were recorded while it ran (MERGE.md section 9)
                verdict = await _callables.adrive(late.steps(result.change_request), offload=False)
                result, base = self._rebased(task, result, verdict), late.payload
            # The undo request diffs the whole payload: off the event loop, in the async agent's
            # one worker thread.
            undo = await _callables.off_loop(_undo_wire, base, result.payload)
            if base is self.state.payload or self.state.since(base) is None:
                return self.state.record(
                    task,
                    result,
                    duration=duration,
                    timestamp=self._now(),
                    base=base,
                    undo_request=undo,
                )
            # another turn was recorded while this one was judged: rebase over it too
