"""``PayloadSession`` and ``AsyncPayloadSession``: one payload carried through many turns with an
agent, with undo, redo, ``why`` and save/load; the decisions are ``SessionState``'s, a late
turn is rebased (MERGE.md section 9). Guide: docs/tools-and-sessions.md."""

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
    """Everything but ``send``."""

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
        """The session as JSON data (what ``save`` writes)."""
        return self.state.to_json(include_secrets=include_secrets)

    def record(self, task: str, result: TurnResult, *, duration: float = 0.0) -> TurnRecord:
        """Record a turn of your own tool loop: a successful ``ToolResult`` (or ``AgentResult``)
        that started from the current payload."""
        return self.state.record(task, result, duration=duration, timestamp=self._now())

    def save(self, path: str | Path, *, include_secrets: bool = False) -> None:
        """Write ``to_json()`` to ``path`` atomically; a payload's secrets or excluded fields
        are refused (``UsageError``) unless ``include_secrets=True`` writes them in clear."""
        atomic_write_text(path, _sessionfile.dumps(self.to_json(include_secrets=include_secrets)))

    def _late_judge(self, base: Any, result: Any) -> Judge | None:
        """The judge of a turn whose ``base`` is no longer current (None: current or too old)."""
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

    def _run_args(self) -> dict[str, Any]:
        args = {"extra_instructions": self.state.summary(), "payload_type": self.state.payload_type}
        return {name: value for name, value in args.items() if value is not None}

    @classmethod
    def load(
        cls,
        path: str | Path,
        agent: Any,
        *,
        payload_type: Any = None,
        summary_turns: int = 5,
    ) -> Self:
        """A session continued from a file ``save`` wrote (damaged: ``SessionFileError``)."""
        state = SessionState.from_json(
            _sessionfile.read_session_file(path),
            payload_type=payload_type,
            summary_turns=summary_turns,
            source=os.fspath(path),
        )
        return cls(agent, state=state)


class PayloadSession(_SessionBase):
    """A payload edited over many turns by a ``PayloadAgent`` (``None``: only ``record``);
    ``summary_turns``: how many earlier turns the next prompt recalls."""

    def send(self, task: str) -> TurnRecord:
        """Run the agent on the current payload; record and return the turn."""
        base = self.state.payload
        self.state.check_before_turn()  # refusals come before the model call, not after it
        started = self._clock()
        result = self.agent.run(base, task, **self._run_args())
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
        result = await self.agent.run(base, task, **self._run_args())
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
