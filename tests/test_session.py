"""PayloadSession / AsyncPayloadSession: turns, compact prompts, undo/redo, why, history."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload.agent import AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import (
    InvalidPayloadError,
    RetriesExhaustedError,
    StalePayloadError,
    UsageError,
)
from agent_payload.session import (
    AsyncPayloadSession,
    PayloadSession,
    SessionState,
    TurnRecord,
    parse_payload_path,
)
from agent_payload.testing import ScriptedModel

ORDER = {
    "status": "draft",
    "items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}],
    "shipping": {"method": "standard", "address": {"city": "Oslo"}},
}

REPLIES = [
    '{"updateElements": {"status": "confirmed"}, "reasoning": "Confirmed by phone."}',
    '{"updateElements": {"items": [{}, {"qty": 5}]}, "reasoning": "Five of B."}',
    '{"updateElements": {"shipping": {"address": {"city": "Bergen"}}}, "reasoning": "Moved."}',
]


def _clock() -> Any:
    ticks = itertools.count()
    return lambda: float(next(ticks)) * 0.5


def _session(replies: list[str], payload: Any = None, **kwargs: Any) -> PayloadSession:
    model = ScriptedModel(replies)
    return PayloadSession(
        PayloadAgent(model, max_retries=0),
        json.loads(json.dumps(ORDER)) if payload is None else payload,
        clock=_clock(),
        now=lambda: "2026-11-29T12:00:00.000Z",
        **kwargs,
    )


def _model(session: PayloadSession | AsyncPayloadSession) -> ScriptedModel:
    model = session.agent.model
    assert isinstance(model, ScriptedModel)
    return model


# --- turns -------------------------------------------------------------------------------------


def test_send_records_the_turn() -> None:
    """A turn records the task, the applied request, the reasoning, the effective changes,
    usage, attempts, duration (from the injected clock) and the timestamp."""
    session = _session(REPLIES)
    turn = session.send("The customer confirmed")
    assert isinstance(turn, TurnRecord)
    assert turn.index == 1
    assert turn.task == "The customer confirmed"
    assert turn.change_request == {
        "updateElements": {"status": "confirmed"},
        "reasoning": "Confirmed by phone.",
    }
    assert turn.reasoning == "Confirmed by phone."
    assert [(c.op, c.path, c.old, c.new) for c in turn.changes] == [
        ("update", ("status",), "draft", "confirmed")
    ]
    assert turn.usage.requests == 1
    assert turn.usage.output_tokens > 0
    assert turn.attempts == 1
    assert turn.duration == 0.5
    assert turn.timestamp == "2026-11-29T12:00:00.000Z"
    assert session.payload["status"] == "confirmed"
    assert session.history == (turn,)


def test_each_turn_sends_the_current_payload_and_a_short_summary() -> None:
    """The second request holds one system and one user message: the payload as it is after
    turn 1 and a summary naming turn 1's task and reasoning, never turn 1's reply."""
    session = _session(REPLIES)
    session.send("The customer confirmed")
    session.send("Make it five of B")
    second = _model(session).requests[1]
    assert [m.role for m in second.messages] == ["system", "user"]
    text = "\n".join(m.content for m in second.messages)
    assert '"confirmed"' in text
    assert "Earlier turns of this session" in text
    assert "1. Task: The customer confirmed -- Done: Confirmed by phone. (1 change(s))" in text
    assert REPLIES[0] not in text


def test_summary_keeps_only_the_last_turns() -> None:
    """With summary_turns=1 only the previous turn is recalled (and the others counted)."""
    session = _session(REPLIES, summary_turns=1)
    for task in ("one", "two", "three"):
        session.send(task)
    summary = session.state.summary()
    assert summary is not None
    assert "3. Task: three" in summary
    assert "Task: one" not in summary
    assert "(2 earlier turn(s) not shown)" in summary


def test_a_failed_turn_leaves_the_session_unchanged() -> None:
    """When the agent fails, the error propagates and nothing is recorded."""
    session = _session(['{"updateElements": {"items": {"9": {"qty": 1}}}}'])
    with pytest.raises(RetriesExhaustedError):
        session.send("change item 9")
    assert session.payload == ORDER
    assert session.history == ()


# --- undo / redo -------------------------------------------------------------------------------


def test_undo_and_redo() -> None:
    """undo takes back the last turn (the payload is exactly as before it); redo applies it
    again; both return the turn; with nothing to undo or redo they return None."""
    session = _session(REPLIES)
    assert session.undo() is None
    session.send("confirm")
    after_one = json.loads(json.dumps(session.payload))
    second = session.send("five of B")
    assert session.undo() is second
    assert session.payload == after_one
    assert session.can_redo
    assert session.redo() is second
    assert session.payload["items"][1]["qty"] == 5
    assert session.redo() is None
    session.undo()
    session.undo()
    assert session.payload == ORDER
    assert session.history == ()
    assert session.undo() is None


def test_a_new_turn_clears_redo() -> None:
    """After an undo, sending a new task drops the undone turn for good."""
    session = _session(REPLIES)
    session.send("confirm")
    session.undo()
    session.send("five of B")
    assert not session.can_redo
    assert [t.index for t in session.history] == [2]
    assert session.payload["status"] == "draft"


def test_undo_restores_marker_strings_and_empty_objects() -> None:
    """Undo is exact even when the data holds marker strings and {} (it is computed with
    diff_payloads, which writes such values literally)."""
    payload = {"routes": [{"method": "DELETE", "meta": {}}], "x": "__DELETE__"}
    session = _session(
        ['{"updateElements": {"routes": [{"meta": {"k": 1}}], "x": 1}}'], payload=payload
    )
    session.send("change")
    assert session.payload == {"routes": [{"method": "DELETE", "meta": {"k": 1}}], "x": 1}
    session.undo()
    assert session.payload == {"routes": [{"method": "DELETE", "meta": {}}], "x": "__DELETE__"}


# --- why ---------------------------------------------------------------------------------------


def test_why_names_the_turn_that_changed_a_path() -> None:
    """why(path) gives the last turn in effect whose change is at, above or below the path."""
    session = _session(REPLIES)
    one, two, three = (session.send(t) for t in ("confirm", "five of B", "moved"))
    assert session.why("status") is one
    assert session.why("items[1].qty") is two
    assert session.why("items[1]") is two  # a change below the path
    assert session.why("items") is two
    assert session.why(("shipping", "address", "city")) is three
    assert session.why("shipping") is three
    assert session.why("items[0]") is None
    assert session.why("shipping.method") is None
    session.undo()
    assert session.why("shipping") is None  # undone turns do not count


def test_why_counts_a_container_change_for_paths_below_it() -> None:
    """A turn that replaced a whole subtree explains every path inside it."""
    session = _session(['{"replaceElements": {"shipping": {"method": "express"}}}'])
    turn = session.send("express, no address")
    assert session.why("shipping.address.city") is turn


def test_payload_paths_are_read_like_the_prompts_write_them() -> None:
    """Identifiers after dots, indices in brackets, other keys as JSON strings in brackets."""
    assert parse_payload_path('items[3].price["a.b"][0]') == ("items", 3, "price", "a.b", 0)
    assert parse_payload_path(["a", 1]) == ("a", 1)
    with pytest.raises(UsageError, match="cannot read the payload path"):
        parse_payload_path("items[x]")


# --- history on disk ---------------------------------------------------------------------------


def test_save_and_load(tmp_path: Path) -> None:
    """The history is JSON: a loaded session has the payload, the turns and the redo stack,
    answers why, undoes and redoes, and continues with new turns."""
    session = _session(REPLIES)
    session.send("confirm")
    session.send("five of B")
    session.send("moved")
    session.undo()
    file = tmp_path / "session.json"
    session.save(file)
    data = json.loads(file.read_text(encoding="utf-8"))
    assert data["format"] == "agent_payload.session"
    assert data["format_version"] == 1
    assert [t["task"] for t in data["turns"]] == ["confirm", "five of B"]
    assert data["turns"][1]["changes"] == [
        {"op": "update", "path": ["items", 1, "qty"], "old": 2, "new": 5}
    ]
    model = ScriptedModel(['{"updateElements": {"status": "paid"}}'])
    loaded = PayloadSession.load(file, PayloadAgent(model, max_retries=0))
    assert loaded.payload == session.payload
    assert loaded.history == session.history
    assert loaded.why("items[1].qty") == session.why("items[1].qty")
    redone = loaded.redo()
    assert redone is not None and redone.task == "moved"
    assert loaded.payload["shipping"]["address"]["city"] == "Bergen"
    loaded.undo()
    loaded.undo()
    loaded.undo()
    assert loaded.payload == ORDER
    turn = loaded.send("paid")
    assert turn.index == 4  # numbering continues after the saved turns
    assert loaded.to_json()["payload"]["status"] == "paid"


def test_loading_something_else_is_a_clear_error(tmp_path: Path) -> None:
    """A file that is not a saved session is refused, naming the format expected."""
    file = tmp_path / "other.json"
    file.write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(InvalidPayloadError, match=r"expected 'agent_payload\.session'"):
        PayloadSession.load(file, PayloadAgent(ScriptedModel([])))


# --- pydantic payloads and async ---------------------------------------------------------------


class Item(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    status: str
    items: list[Item]


def test_pydantic_payload(tmp_path: Path) -> None:
    """A pydantic payload stays an instance of its class through turns, undo and load."""
    order = Order(status="draft", items=[Item(sku="A", qty=1)])
    replies = [REPLIES[0], '{"newElements": {"items": [{"sku": "B", "qty": 5}]}}']
    session = _session(replies, payload=order)
    session.send("confirm")
    session.send("add five of B")
    assert isinstance(session.payload, Order)
    assert session.payload.status == "confirmed"
    session.undo()
    assert isinstance(session.payload, Order)
    assert session.payload.items == [Item(sku="A", qty=1)]
    session.save(tmp_path / "s.json")
    loaded = PayloadSession.load(tmp_path / "s.json", session.agent, payload_type=Order)
    assert loaded.payload == session.payload
    loaded.undo()
    assert loaded.payload == order


def test_async_session() -> None:
    """AsyncPayloadSession runs an AsyncPayloadAgent with the same records, undo and why."""

    async def main() -> AsyncPayloadSession:
        session = AsyncPayloadSession(
            AsyncPayloadAgent(ScriptedModel(REPLIES), max_retries=0),
            json.loads(json.dumps(ORDER)),
        )
        await session.send("confirm")
        await session.send("five of B")
        return session

    session = asyncio.run(main())
    assert [t.task for t in session.history] == ["confirm", "five of B"]
    assert session.why("items[1].qty") is session.history[1]
    session.undo()
    assert session.payload["items"][1]["qty"] == 2
    second = "\n".join(m.content for m in _model(session).requests[1].messages)
    assert second.count("Earlier turns of this session") == 1


def test_async_session_diffs_off_the_event_loop() -> None:
    """The undo request of a turn diffs the whole payload: AsyncPayloadSession computes it in a
    worker thread, so its event loop keeps serving other tasks meanwhile (issue 11)."""
    import sys
    import threading

    from agent_payload import _callables

    threads: set[int] = set()

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "diff_payloads":
            threads.add(threading.get_ident())

    payload = {"status": "draft", "items": [{"n": i} for i in range(2_000)]}
    reply = '{"updateElements": {"items": {"1000": {"n": -1}}}, "reasoning": "set"}'

    async def main() -> tuple[AsyncPayloadSession, int]:
        session = AsyncPayloadSession(
            AsyncPayloadAgent(ScriptedModel([reply]), max_retries=0), payload
        )
        loop_thread = threading.get_ident()
        # The async agent's one worker thread may already run (an earlier test started it):
        # install the profile there too, not only in threads started from now on.
        worker = _callables.worker()
        sys.setprofile(watch)
        threading.setprofile(watch)
        worker.submit(sys.setprofile, watch).result()
        try:
            await session.send("change item 1000")
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            worker.submit(sys.setprofile, None).result()
        return session, loop_thread

    session, loop_thread = asyncio.run(main())
    assert threads and loop_thread not in threads
    assert session.payload["items"][1000] == {"n": -1}
    session.undo()
    assert session.payload == payload


def test_a_turn_that_finished_after_an_undo_is_not_recorded() -> None:
    """If the payload changed while a turn ran, recording it raises StalePayloadError."""
    state = SessionState(json.loads(json.dumps(ORDER)))
    base = state.payload
    agent = PayloadAgent(ScriptedModel([REPLIES[0]]), max_retries=0)
    result = agent.run(base, "confirm")
    state.payload = {**ORDER, "status": "changed meanwhile"}
    with pytest.raises(StalePayloadError):
        state.record("confirm", result, duration=0.0, timestamp="t", base=base)
    assert state.turns == []
    assert state.payload["status"] == "changed meanwhile"


def test_loading_a_file_that_is_not_json_names_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """PayloadSession.load on a damaged file: UsageError with the file and position, not a bare
    JSONDecodeError."""
    import pytest

    from agent_payload.agent import PayloadAgent
    from agent_payload.errors import UsageError
    from agent_payload.session import PayloadSession
    from agent_payload.testing import ScriptedModel

    bad = tmp_path / "history.json"
    bad.write_text('{"format": ', encoding="utf-8")
    with pytest.raises(UsageError, match=r"history\.json: not a saved session.*line 1"):
        PayloadSession.load(bad, PayloadAgent(ScriptedModel([])))
