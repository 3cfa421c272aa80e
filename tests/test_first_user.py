"""Issue 18: what a first-time user meets. One test (at least) per bullet, through the public
API: async validators and hooks, the old marker out of habit, the tool loop's prompt, the token
estimate on a 10 MB payload, the event loop kept free, the CLI, the public names, the SDK param
types, and the advice messages."""

from __future__ import annotations

import asyncio
import gc
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
    PayloadAgent,
    PayloadSession,
    ProviderError,
    RetriesExhaustedError,
    RetryWithFeedback,
    UsageError,
)
from agent_payload.agent import Hooks
from agent_payload.cli import EXIT_FAILED, EXIT_OK, build_parser, main
from agent_payload.merge import choose_marker
from agent_payload.prompts import render_prompt
from agent_payload.providers import ModelReply
from agent_payload.render import format_diff, format_payload_path
from agent_payload.testing import FakeProviderServer, Fault, ScriptedModel

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
    with pytest.raises(ConfigurationError, match=r"validator .*check.* is an async function"):
        PayloadAgent(model, validators=[check])
    with pytest.raises(ConfigurationError, match=r"on_success .*AsyncPayloadAgent"):
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


def test_handler_prompt_picks_a_marker_that_avoids_the_task() -> None:
    """Issue 30: the handler re-picks its own marker (not yet handed out) like the agent; a
    marker the caller gave is kept and the task holding it is refused."""
    task = "set the method to DELETE"
    handler = ChangeRequestToolHandler({"method": "GET"})
    assert handler.marker == "DELETE"
    assert '"__DELETE__"' in handler.prompt(task).system
    assert handler.marker == "__DELETE__"
    given = ChangeRequestToolHandler({"method": "GET"}, marker="DELETE")
    with pytest.raises(ConfigurationError, match="'__DELETE__'"):
        given.prompt(task)
    fixed = ChangeRequestToolHandler(
        {"method": "GET"}, marker=choose_marker({"method": "GET"}, avoid=(task,))
    )
    assert '"__DELETE__"' in fixed.prompt(task).system


# --- the token estimate ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("o200k")
def test_rewrite_estimate_never_fails_on_a_10_mb_payload() -> None:
    """With bpe-openai installed (dev extra), a 10 MB payload used to raise "Input too long to
    encode safely" after the model replied; the estimate is now counted in pieces."""
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
        agent = AsyncPayloadAgent(model, validators=[record_thread], offload_nodes=offload_nodes)
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

    # What the earlier tests of the process left on the heap is frozen out of the collector:
    # a full collection of it holds the GIL for a long pause in either scenario, which would
    # measure the process's history rather than where the work runs. (It stays frozen, as
    # conftest.py freezes what collection built: unfreezing would thaw that too.)
    gc.collect()
    gc.freeze()
    on_loop_gap, on_loop_threads, loop_thread = asyncio.run(scenario(None))
    off_loop_gap, off_loop_threads, loop_thread = asyncio.run(scenario(0))
    assert on_loop_threads == {loop_thread}
    print(
        f"longest ticker gap: on the loop {on_loop_gap:.3f} s, worker thread {off_loop_gap:.3f} s"
    )
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


# --- the CLI -----------------------------------------------------------------------------------


def cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def _files(tmp_path: Path, payload_text: str, change: Any) -> tuple[Path, Path]:
    payload = tmp_path / "payload.json"
    payload.write_text(payload_text, encoding="utf-8")
    request = tmp_path / "change.json"
    request.write_text(json.dumps(change), encoding="utf-8")
    return payload, request


CONFLICTING = {
    "updateElements": {"items": [{}, {}, {"qty": 9}, "DELETE"], "status": "sent"},
    "reasoning": "ship it",
}


def test_cli_apply_is_all_or_nothing_by_default(tmp_path: Path) -> None:
    """A request with a conflict: the conflict is printed, exit 1, nothing printed or written;
    --lenient applies the rest (the 0.1 behaviour)."""
    text = json.dumps({"items": [{"qty": 1}, {"qty": 2}], "status": "draft"}, indent=2)
    payload, request = _files(tmp_path, text, CONFLICTING)
    status, out, err = cli("apply", str(payload), str(request), "-o", str(payload))
    assert status == EXIT_FAILED
    assert out == ""
    assert "placeholder_out_of_range" in err and "nothing was applied" in err
    assert payload.read_text(encoding="utf-8") == text
    status, out, err = cli("apply", str(payload), str(request), "--lenient")
    assert status == EXIT_OK
    assert json.loads(out)["status"] == "sent"
    assert "not applied" in err


def test_cli_apply_and_run_take_the_payload_the_same_way(tmp_path: Path) -> None:
    payload, request = _files(tmp_path, '{"a": 1}', {"updateElements": {"a": 2}})
    assert (
        cli("apply", str(payload), str(request))[1]
        == cli("apply", "--payload", str(payload), str(request))[1]
    )
    with FakeProviderServer(['{"updateElements": {"a": 3}}'] * 2) as server:
        env = {"OPENAI_API_KEY": "test", "OPENAI_BASE_URL": server.openai_base_url}
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            positional = cli("run", "--model", "openai:gpt-x", str(payload), "set a to 3")
            named = cli("run", "--model", "openai:gpt-x", "--payload", str(payload), "set a to 3")
    assert positional[0] == named[0] == EXIT_OK
    assert json.loads(positional[1]) == json.loads(named[1]) == {"a": 3}


@pytest.mark.parametrize("indent", ["    ", "\t", None])
def test_cli_output_keeps_the_inputs_indentation(tmp_path: Path, indent: str | None) -> None:
    data = {"name": "x", "items": [1, 2]}
    text = json.dumps(data, indent=indent) + "\n"
    payload, request = _files(tmp_path, text, {"updateElements": {"name": "y"}})
    out = tmp_path / "out.json"
    status, _, err = cli("apply", str(payload), str(request), "-o", str(out))
    assert status == EXIT_OK, err
    assert (
        out.read_text(encoding="utf-8") == json.dumps({**data, "name": "y"}, indent=indent) + "\n"
    )


def test_cli_dry_run_shows_the_diff_and_reasoning_without_writing(tmp_path: Path) -> None:
    text = json.dumps({"items": [{"qty": 1}, {"qty": 2}], "status": "draft"}, indent=2)
    change = {"updateElements": {"status": "sent"}, "reasoning": "the customer paid"}
    payload, request = _files(tmp_path, text, change)
    status, out, err = cli("apply", str(payload), str(request), "--dry-run", "-o", str(payload))
    assert status == EXIT_OK
    assert out == '~ status: "draft" -> "sent"\n'
    assert "reasoning: the customer paid" in err and "dry run" in err
    assert payload.read_text(encoding="utf-8") == text


def test_cli_run_prints_the_reasoning_with_the_diff(tmp_path: Path) -> None:
    payload, _ = _files(tmp_path, '{"a": 1}', {})
    reply = '{"updateElements": {"a": 2}, "reasoning": "two is the answer"}'
    with FakeProviderServer([reply]) as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "test")
        mp.setenv("OPENAI_BASE_URL", server.openai_base_url)
        status, out, err = cli("run", "--model", "openai:gpt-x", str(payload), "set a", "--dry-run")
    assert status == EXIT_OK
    assert out == "~ a: 1 -> 2\n"
    assert "reasoning: two is the answer" in err


def test_cli_help_lists_the_new_options() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    apply_help = sub.choices["apply"].format_help()  # type: ignore[attr-defined]
    run_help = sub.choices["run"].format_help()  # type: ignore[attr-defined]
    for option in ("--lenient", "--dry-run", "--payload", "All or nothing"):
        assert option in apply_help, option
    for option in ("--dry-run", "--payload", "PAYLOAD TASK", "reasoning"):
        assert option in run_help, option


# --- what users reach for ----------------------------------------------------------------------


def test_format_diff_and_format_payload_path_are_public() -> None:
    result = agent_payload.apply_change_request(
        {"a": {"b": 1}, "c": [1]}, {"updateElements": {"a": {"b": 2}}, "newElements": {"c": [2]}}
    )
    assert format_diff(result) == "~ a.b: 1 -> 2\n+ c[1]: 2"
    assert format_diff(result.report.changes) == format_diff(result.report)
    assert format_payload_path(("items", 3, "price")) == "items[3].price"
    assert format_payload_path(("meta", "a.b")) == 'meta["a.b"]'


def test_payload_agent_takes_api_responses_with_ones_own_client() -> None:
    openai = pytest.importorskip("openai")
    with FakeProviderServer(['{"updateElements": {"a": 2}}']) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test")
        agent = PayloadAgent(client, model_name="gpt-x", api="responses")
        assert agent.run({"a": 1}, "set a").payload == {"a": 2}
        assert [r.path for r in server.requests] == ["/v1/responses"]
    with pytest.raises(ConfigurationError, match="api"):
        PayloadAgent(ScriptedModel([]), api="responses")


def test_session_records_turns_from_ones_own_tool_loop() -> None:
    handler = ChangeRequestToolHandler({"status": "draft", "items": [1]})
    session = PayloadSession(PayloadAgent(ScriptedModel([])), handler.payload)
    result = handler.handle('{"updateElements": {"status": "sent"}, "reasoning": "paid"}')
    turn = session.record("mark as sent", result)
    assert session.payload == {"status": "sent", "items": [1]}
    assert (turn.index, turn.reasoning, turn.attempts) == (1, "paid", 1)
    assert session.why("status") is turn
    session.undo()
    assert session.payload == {"status": "draft", "items": [1]}
    failed = handler.handle('{"updateElements": {"items": [{}, {}, {}, "DELETE"]}}')
    with pytest.raises(UsageError, match="is_error"):
        session.record("bad", failed)


def test_per_run_id_and_hooks_tag_each_run(caplog: pytest.LogCaptureFixture) -> None:
    tagged: list[tuple[str, int]] = []
    model = ScriptedModel(["not json", '{"updateElements": {"a": 2}}', "no", "no", "no"])
    agent = PayloadAgent(model, max_retries=2)

    def on_retry(attempt: int, problems: Any, last: bool) -> None:
        tagged.append(("req-1", attempt))

    caplog.set_level("DEBUG", logger="agent_payload")
    result = agent.run({"a": 1}, "set a", run_id="req-1", hooks=Hooks(on_retry=on_retry))
    assert result.run_id == "req-1"
    assert tagged == [("req-1", 1)]
    assert {getattr(r, "run_id", None) for r in caplog.records} == {"req-1"}
    with pytest.raises(RetriesExhaustedError) as failed:
        agent.run({"a": 1}, "set a", run_id="req-2")
    assert failed.value.run_id == "req-2"
    assert len(agent.run.__doc__ or "") > 0
    other = PayloadAgent(ScriptedModel(['{"updateElements": {"a": 2}}'])).run({"a": 1}, "set a")
    assert len(other.run_id) == 32


def test_provider_error_carries_the_http_status_code() -> None:
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    with FakeProviderServer([Fault.status(429), Fault.status(529)]) as server:
        chat = PayloadAgent(
            openai.OpenAI(base_url=server.openai_base_url, api_key="t", max_retries=0),
            model_name="gpt-x",
        )
        with pytest.raises(ProviderError) as rate_limited:
            chat.run({"a": 1}, "set a")
        messages = PayloadAgent(
            anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="t", max_retries=0),
            model_name="claude-x",
        )
        with pytest.raises(ProviderError) as overloaded:
            messages.run({"a": 1}, "set a")
    assert rate_limited.value.status_code == 429 and rate_limited.value.retryable
    assert overloaded.value.status_code == 529


def test_saved_session_records_its_payload_type(tmp_path: Path) -> None:
    class Ticket(BaseModel):
        title: str

    path = tmp_path / "session.json"
    model = ScriptedModel(['{"updateElements": {"title": "b"}}'])
    session = PayloadSession(PayloadAgent(model), Ticket(title="a"))
    session.send("rename")
    session.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))["payload_type"].endswith("Ticket")
    with pytest.raises(UsageError, match="payload_type"):
        PayloadSession.load(path, PayloadAgent(model))
    loaded = PayloadSession.load(path, PayloadAgent(model), payload_type=Ticket)
    assert loaded.payload == Ticket(title="b")


# --- types -------------------------------------------------------------------------------------


def test_tool_definitions_are_the_sdks_param_types_at_run_time_too() -> None:
    """Plain dicts at run time (what the SDKs take), typed as the SDKs' TypedDicts: the mypy
    test (test_typing_examples.py) passes them to messages.create(tools=...)."""
    handler = ChangeRequestToolHandler({"a": 1})
    assert handler.openai_tool()["type"] == "function"
    assert handler.anthropic_tool()["name"] == "apply_change_request"
    assert handler.responses_tool()["type"] == "function"


# --- advice ------------------------------------------------------------------------------------


def test_truncated_replies_exhausting_retries_say_to_raise_max_tokens() -> None:
    cut = ModelReply(text='{"updateElements": {"a"', finish_reason="length")
    agent = PayloadAgent(ScriptedModel([cut, cut]), max_retries=1, max_tokens=50)
    with pytest.raises(RetriesExhaustedError, match=r"raise max_tokens \(now 50\)"):
        agent.run({"a": 1}, "set a")


def test_tool_handler_first_failed_call_does_not_claim_earlier_changes() -> None:
    handler = ChangeRequestToolHandler({"items": [1, 2]})
    first = handler.handle('{"updateElements": {"items": [{}, {}, {}, "DELETE"]}}')
    assert first.is_error and "earlier successful calls" not in first.content
    assert not handler.handle('{"updateElements": {"items": [5]}}').is_error
    later = handler.handle('{"updateElements": {"items": [{}, {}, {}, "DELETE"]}}')
    assert later.is_error and "earlier successful calls are kept" in later.content
