"""``run(commit=...)``, the hook through which a store commits an agent's accepted request inside
the run, and ``PayloadStore.edit`` / ``aedit`` built on it (issue 28)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload.agent import AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import (
    ConcurrentChangeError,
    ConfigurationError,
    RetriesExhaustedError,
)
from agent_payload.merge import rebase_change_request
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.result import AgentResult
from agent_payload.store import PayloadStore
from agent_payload.testing import ScriptedModel

SET_A = '{"updateElements":{"a":2}}'


def _collision() -> ConcurrentChangeError:
    try:
        rebase_change_request(
            {"a": 1}, [{"updateElements": {"a": 5}}], {"updateElements": {"a": 2}}
        )
    except ConcurrentChangeError as exc:
        return exc
    raise AssertionError("expected a collision")


def test_commit_returns_what_the_run_returns() -> None:
    seen: list[Any] = []

    def commit(result: AgentResult[Any]) -> None:
        seen.append(result.payload)

    result = PayloadAgent(ScriptedModel([SET_A])).run({"a": 1}, "set a", commit=commit)
    assert seen == [{"a": 2}] and result.payload == {"a": 2}


def test_a_collision_is_a_correction_judged_against_the_current_payload() -> None:
    """The commit raises ConcurrentChangeError with the current payload: the model gets the
    correction and its next reply is judged against that payload."""
    error = _collision()
    error.current, error.version = {"a": 5, "b": [1]}, "v2"
    calls: list[Any] = []

    def commit(result: AgentResult[Any]) -> AgentResult[Any] | None:
        calls.append(result.payload)
        if len(calls) == 1:
            raise error
        return None

    model = ScriptedModel([SET_A, '{"newElements":{"b":[7]}}'])
    result = PayloadAgent(model).run({"a": 1}, "set a", commit=commit)
    assert calls == [{"a": 2}, {"a": 5, "b": [1, 7]}]  # judged against the current payload
    assert result.attempts == 2
    correction = model.requests[1].messages[-1].content
    assert "concurrent_change" in correction and "Its current value in the payload:\n  5" in (
        correction
    )


def test_collisions_use_up_the_retries() -> None:
    def commit(result: AgentResult[Any]) -> None:
        raise _collision()

    with pytest.raises(RetriesExhaustedError) as caught:
        PayloadAgent(ScriptedModel([SET_A] * 2), max_retries=1).run({"a": 1}, "x", commit=commit)
    assert [p.code for p in caught.value.problems] == ["concurrent_change"]


def test_the_sync_agent_refuses_an_async_commit() -> None:
    async def commit(result: AgentResult[Any]) -> None:
        return None

    with pytest.raises(ConfigurationError, match="commit= returned an awaitable"):
        PayloadAgent(ScriptedModel([SET_A])).run({"a": 1}, "set a", commit=commit)


class _Gated:
    """An async model answering from ``replies``, each first attempt after ``before()``."""

    model_name = "gated"
    provider = "test"

    def __init__(self, replies: list[str], before: Any) -> None:
        self.inner = ScriptedModel(replies)
        self.before = before

    async def arequest(self, request: ModelRequest) -> ModelReply:
        if len(request.messages) == 2:
            await self.before()
        return await self.inner.arequest(request)


def test_aedit_with_async_agents(tmp_path: Path) -> None:
    """Two async agents read version 1 and set the same field; the second to commit is
    corrected in its run and its second reply lands."""
    store = PayloadStore(f"sqlite:///{tmp_path / 's.db'}")
    store.create("k", {"a": 1, "b": 1})

    async def main() -> tuple[AgentResult[Any], AgentResult[Any]]:
        second_asked, first_done = asyncio.Event(), asyncio.Event()

        async def wait_second() -> None:
            await second_asked.wait()

        async def after_first() -> None:
            second_asked.set()
            await first_done.wait()

        first_model = _Gated(['{"updateElements":{"a":10}}'], wait_second)
        second_model = _Gated(
            ['{"updateElements":{"a":20}}', '{"updateElements":{"b":20}}'], after_first
        )

        async def first() -> AgentResult[Any]:
            try:
                return await store.aedit("k", AsyncPayloadAgent(first_model), "a to 10")
            finally:
                first_done.set()

        second = store.aedit("k", AsyncPayloadAgent(second_model), "a to 20")
        one, two = await asyncio.gather(first(), second)
        return one, two

    one, two = asyncio.run(main())
    assert (one.attempts, two.attempts) == (1, 2)
    assert store.get("k").payload == {"a": 10, "b": 20} and store.get("k").version == 3
    assert two.payload == {"a": 10, "b": 20}
    store.close()


class Item(BaseModel):
    name: str
    qty: int


def test_edit_runs_with_the_keys_type(tmp_path: Path) -> None:
    """A typed key: the agent judges with its type (a wrong value is corrected before any
    commit), and edit and aedit refuse the other kind of agent."""
    with PayloadStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create("i", Item(name="x", qty=1))
        model = ScriptedModel(['{"updateElements":{"qty":"many"}}', '{"updateElements":{"qty":3}}'])
        result = store.edit("i", PayloadAgent(model), "three")
        assert result.attempts == 2 and store.get("i").payload == {"name": "x", "qty": 3}
        with pytest.raises(ConfigurationError, match="aedit"):
            store.edit("i", AsyncPayloadAgent(ScriptedModel([])), "x")
        with pytest.raises(ConfigurationError, match=r"store\.edit"):
            asyncio.run(store.aedit("i", PayloadAgent(ScriptedModel([])), "x"))


def test_later_corrections_say_the_payload_is_no_longer_as_first_shown() -> None:
    """After a collision moved the run to the current payload, a later correction (here an
    index out of range in it) does not claim the payload is still as first shown."""
    error = _collision()
    error.current, error.version = {"a": 5, "b": [1]}, "v2"
    calls: list[Any] = []

    def commit(result: AgentResult[Any]) -> None:
        calls.append(result.payload)
        if len(calls) == 1:
            raise error

    replies = [SET_A, '{"updateElements":{"b":{"3":7}}}', '{"newElements":{"b":[7]}}']
    model = ScriptedModel(replies)
    result = PayloadAgent(model, max_retries=2).run({"a": 1}, "set a", commit=commit)
    assert result.payload == {"a": 5, "b": [1, 7]} and result.attempts == 3
    third = model.requests[2].messages[-1].content
    assert "index_out_of_range" in third and "no longer exactly as first shown" in third
    assert "still exactly as first shown" not in third
