"""Issue 18: what a first-time user meets. One test (at least) per bullet, through the public
API: async validators and hooks, the old marker out of habit, the tool loop's prompt, the token
estimate on a 10 MB payload, the event loop kept free, the CLI, the public names, the SDK param
types, and the advice messages."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import agent_payload
from agent_payload import (
    AsyncPayloadAgent,
    ChangeRequestToolHandler,
    ConfigurationError,
    Hooks,
    PayloadAgent,
    PayloadSession,
    ProviderError,
    RetriesExhaustedError,
    RetryWithFeedback,
    UsageError,
    format_diff,
    format_payload_path,
    render_prompt,
)
from agent_payload.cli import EXIT_FAILED, EXIT_OK, build_parser, main
from agent_payload.providers import ModelReply
from agent_payload.testing import FakeProviderServer, Fault, Reply, ScriptedModel

ENDPOINTS = {
    "endpoints": [
        {"path": "/users", "method": "GET"},
        {"path": "/users/{id}", "method": "DELETE"},
        {"path": "/users", "method": "POST"},
    ]
}


# --- async validators and hooks ----------------------------------------------------------------


def test_async_validator_is_awaited_and_its_rejection_goes_back() -> None:
    """An async validator given to AsyncPayloadAgent is awaited on a real event loop: its
    RetryWithFeedback goes back to the model, the value it rejects is never applied."""
    seen: list[int] = []

    async def no_negative(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        seen.append(payload["qty"])
        if payload["qty"] < 0:
            raise RetryWithFeedback("qty must not be negative", path="qty")

    model = ScriptedModel(['{"updateElements": {"qty": -1}}', '{"updateElements": {"qty": 3}}'])
    agent = AsyncPayloadAgent(model, validators=[no_negative])
    result = asyncio.run(agent.run({"qty": 1}, "set qty"))
    assert result.payload == {"qty": 3}
    assert seen == [-1, 3]
    assert result.attempts == 2
    assert "qty must not be negative" in model.requests[1].messages[-1].content


def test_async_hooks_and_per_run_async_validator_are_awaited() -> None:
    events: list[str] = []

    async def on_request(attempt: int, request: Any, last: bool) -> None:
        events.append(f"request {attempt}")

    async def on_success(result: Any) -> None:
        events.append("success")

    async def check(payload: dict[str, Any]) -> None:
        events.append("validated")

    model = ScriptedModel(['{"updateElements": {"qty": 2}}'])
    agent = AsyncPayloadAgent(model, on_request=on_request)
    result = asyncio.run(
        agent.run({"qty": 1}, "set qty", validators=[check], hooks=Hooks(on_success=on_success))
    )
    assert result.payload == {"qty": 2}
    assert events == ["request 1", "validated", "success"]


def test_sync_agent_refuses_async_validators_and_hooks_at_construction() -> None:
    """PayloadAgent cannot await: an async validator or hook is a ConfigurationError when it
    is given (at construction, or at run() for per-run ones), before any request."""

    async def check(payload: Any) -> None:
        raise AssertionError("never awaited")

    async def hook(*args: Any) -> None: ...

    model = ScriptedModel([])
    with pytest.raises(ConfigurationError, match="validator 'test_sync_agent.*check'.*async"):
        PayloadAgent(model, validators=[check])
    with pytest.raises(ConfigurationError, match="on_success .*AsyncPayloadAgent"):
        PayloadAgent(model, on_success=hook)
    with pytest.raises(ConfigurationError, match="on_retry"):
        PayloadAgent(model, hooks=Hooks(on_retry=hook))
    with pytest.raises(ConfigurationError, match="validator"):
        PayloadAgent(model).run({"a": 1}, "task", validators=[check])
    assert model.requests == []


def test_tool_handler_awaits_async_validators_in_ahandle_and_refuses_them_in_handle() -> None:
    async def no_negative(payload: dict[str, Any]) -> None:
        if payload["qty"] < 0:
            raise RetryWithFeedback("qty must not be negative")

    handler = ChangeRequestToolHandler({"qty": 1}, validators=[no_negative])
    with pytest.raises(ConfigurationError, match="ahandle"):
        handler.handle('{"updateElements": {"qty": -1}}')

    async def loop() -> None:
        bad = await handler.ahandle('{"updateElements": {"qty": -1}}')
        assert bad.is_error and "qty must not be negative" in bad.content
        good = await handler.ahandle('{"updateElements": {"qty": 4}}')
        assert not good.is_error

    asyncio.run(loop())
    assert handler.payload == {"qty": 4}


def test_a_validator_raising_value_error_is_sent_back_like_pydantic() -> None:
    """A plain ValueError (or AssertionError) from a validator is a validation problem sent
    back to the model, as in pydantic's own validators; other exceptions propagate."""

    def positive(payload: dict[str, Any]) -> None:
        if payload["qty"] <= 0:
            raise ValueError("qty must be positive")

    model = ScriptedModel(['{"updateElements": {"qty": 0}}', '{"updateElements": {"qty": 2}}'])
    result = PayloadAgent(model, validators=[positive]).run({"qty": 1}, "set qty")
    assert result.payload == {"qty": 2}
    assert "qty must be positive" in model.requests[1].messages[-1].content

    def buggy(payload: Any) -> None:
        raise KeyError("oops")

    with pytest.raises(KeyError):
        PayloadAgent(ScriptedModel(['{"updateElements": {"qty": 2}}']), validators=[buggy]).run(
            {"qty": 1}, "set qty"
        )


def test_validators_receive_the_model_instance_for_model_payloads() -> None:
    class Order(BaseModel):
        qty: int

    received: list[Any] = []
    model = ScriptedModel(['{"updateElements": {"qty": 2}}'])
    PayloadAgent(model, validators=[received.append]).run(Order(qty=1), "set qty")
    assert received == [Order(qty=2)]


# --- the old marker out of habit ---------------------------------------------------------------


def test_old_marker_replacing_an_element_goes_back_naming_the_active_marker() -> None:
    """The data holds "DELETE" (an HTTP method), so the active marker is "__DELETE__"; a reply
    that still writes "DELETE" for an element is a stale_marker correction, never applied."""
    model = ScriptedModel(
        [
            '{"updateElements": {"endpoints": [{}, {}, "DELETE"]}}',
            '{"updateElements": {"endpoints": [{}, {}, "__DELETE__"]}}',
        ]
    )
    result = PayloadAgent(model).run(ENDPOINTS, "drop the POST endpoint")
    assert result.marker == "__DELETE__"
    assert result.attempts == 2
    correction = model.requests[1].messages[-1].content
    assert "stale_marker" in correction and '"__DELETE__"' in correction
    assert result.payload["endpoints"] == ENDPOINTS["endpoints"][:2]


def test_old_marker_inside_content_added_through_update_goes_back() -> None:
    handler = ChangeRequestToolHandler(ENDPOINTS)
    assert handler.marker == "__DELETE__"
    result = handler.handle('{"updateElements": {"product": {"1": "DELETE"}}}')
    assert result.is_error
    assert "stale_marker" in result.content and '"__DELETE__"' in result.content
    assert handler.payload == ENDPOINTS
    # newElements stays literal: the way to add data holding the text
    added = handler.handle('{"newElements": {"endpoints": [{"path": "/x", "method": "DELETE"}]}}')
    assert not added.is_error
    assert handler.payload["endpoints"][-1] == {"path": "/x", "method": "DELETE"}


# --- the tool loop's prompt --------------------------------------------------------------------


def test_handler_prompt_names_the_handlers_marker_and_tool() -> None:
    handler = ChangeRequestToolHandler(ENDPOINTS)
    parts = handler.prompt("drop the POST endpoint")
    tool = handler.anthropic_tool()
    assert '"__DELETE__"' in parts.system and '"__DELETE__"' in tool["description"]
    assert handler.name in parts.user
    # the defaults agree: render_prompt without marker= picks the same marker
    assert render_prompt(ENDPOINTS, "drop the POST endpoint").system == parts.system


# --- the token estimate ------------------------------------------------------------------------


@pytest.mark.slow
def test_rewrite_estimate_never_fails_on_a_10_mb_payload() -> None:
    """With bpe-openai installed (dev extra), a 10 MB payload used to raise "Input too long to
    encode safely" after the model replied; the estimate is now counted in pieces."""
    pytest.importorskip("bpe_openai")
    rows = [{"id": i, "name": f"customer {i}", "note": "x" * 40} for i in range(130_000)]
    payload = {"rows": rows}
    size = len(json.dumps(payload, separators=(",", ":")))
    assert size > 10_000_000
    model = ScriptedModel(['{"updateElements": {"rows": {"5": {"name": "Ada"}}}}'])
    result = PayloadAgent(model).run(payload, "rename customer 5 to Ada")
    assert result.payload["rows"][5]["name"] == "Ada"
    assert size / 8 < result.rewrite_tokens < size  # counted, not a crash and not zero


# --- the event loop is never stalled -----------------------------------------------------------


def _big_payload(tag: int) -> dict[str, Any]:
    """About 2 MB of JSON: 5,000 rows with a 400-character text each."""
    text = ("lorem ipsum dolor sit amet " * 15)[:400]
    return {"tag": tag, "rows": [{"id": i, "text": f"{tag}:{text}"} for i in range(5_000)]}


@pytest.mark.slow
def test_async_agent_works_off_the_event_loop_for_large_payloads() -> None:
    """Ten concurrent runs on ~2 MB payloads: rendering, parsing, merging and validation run in
    a worker thread (asserted by thread identity), and a ticker task on the same loop never
    waits as long as it does when the same runs work on the loop (the baseline, measured in the
    same test: no wall-clock constant)."""
    assert len(json.dumps(_big_payload(0))) > 2_000_000

    payloads = [_big_payload(n) for n in range(10)]

    async def scenario(offload_nodes: int | None) -> tuple[float, set[int], int]:
        loop_thread = threading.get_ident()
        threads: set[int] = set()

        def record_thread(payload: Any) -> None:
            threads.add(threading.get_ident())

        model = ScriptedModel(lambda request: '{"updateElements": {"rows": {"7": {"id": -7}}}}')
        agent = AsyncPayloadAgent(
            model, validators=[record_thread], offload_nodes=offload_nodes
        )
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        results = await asyncio.gather(*(agent.run(p, "set id of row 7") for p in payloads))
        done.set()
        await tick
        assert all(r.payload["rows"][7]["id"] == -7 for r in results)
        return max(gaps), threads, loop_thread

    on_loop_gap, on_loop_threads, loop_thread = asyncio.run(scenario(None))
    assert on_loop_threads == {loop_thread}
    off_loop_gap, off_loop_threads, loop_thread = asyncio.run(scenario(0))
    print(f"longest ticker gap: on the loop {on_loop_gap:.3f} s, worker thread {off_loop_gap:.3f} s")
    assert loop_thread not in off_loop_threads and off_loop_threads
    assert off_loop_gap < on_loop_gap / 2


def test_async_agent_default_threshold_keeps_small_payloads_on_the_loop() -> None:
    threads: set[int] = set()
    model = ScriptedModel(['{"updateElements": {"a": 2}}'])
    agent = AsyncPayloadAgent(model, validators=[lambda p: threads.add(threading.get_ident())])

    async def go() -> int:
        await agent.run({"a": 1}, "set a")
        return threading.get_ident()

    assert threads == {asyncio.run(go())}
