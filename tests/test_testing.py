"""``agent_payload.testing``: the scripted model, the fake provider server and the switch
that blocks real model requests."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import anthropic
import openai
import pytest

from agent_payload import testing
from agent_payload.errors import ProviderError
from agent_payload.providers.base import Message, ModelReply, ModelRequest
from agent_payload.testing import (
    FakeProviderServer,
    FakeRequest,
    Fault,
    Reply,
    ScriptedModel,
    ScriptExhaustedError,
    block_model_requests,
    model_requests_allowed,
)
from agent_payload.usage import Usage


def ask(text: str = "hello") -> ModelRequest:
    return ModelRequest(messages=(Message("system", "sys"), Message("user", text)))


@pytest.fixture
def server(fake_server: FakeProviderServer) -> FakeProviderServer:
    return fake_server


# --- ScriptedModel -------------------------------------------------------------------------------


def test_scripted_model_replays_and_records() -> None:
    """Replies come in order (str, ModelReply, exception) and every request is recorded, the
    one answered with an exception included."""
    own = ModelReply(text="own", finish_reason="length", truncated=True)
    model = ScriptedModel(["first", own, ProviderError("down", provider="test")])
    reply = model.request(ask("a"))
    assert (reply.text, reply.finish_reason, reply.truncated) == ("first", "stop", False)
    assert reply.usage.requests == 1 and reply.usage.output_tokens >= 1
    assert model.request(ask("b")) is own
    with pytest.raises(ProviderError, match="down"):
        model.request(ask("c"))
    assert [r.messages[1].content for r in model.requests] == ["a", "b", "c"]
    assert model.remaining == 0


def test_scripted_model_runs_out_loudly() -> None:
    """Asking once more than scripted raises ScriptExhaustedError saying how many replies the
    script held (an AssertionError: a test failure, not a library error)."""
    model = ScriptedModel(["only"])
    model.request(ask())
    with pytest.raises(ScriptExhaustedError, match="held only 1 replies"):
        model.request(ask())
    assert issubclass(ScriptExhaustedError, AssertionError)
    assert len(model.requests) == 2


def test_scripted_model_function_and_async() -> None:
    """A function script sees each ModelRequest; arequest shares the script with request."""

    def answer(request: ModelRequest) -> str:
        return request.messages[-1].content.upper()

    model = ScriptedModel(answer, model_name="echo")
    assert model.request(ask("abc")).text == "ABC"
    assert asyncio.run(model.arequest(ask("xyz"))).text == "XYZ"
    assert model.model_name == "echo" and model.provider == "test"
    assert len(model.requests) == 2


def test_scripted_model_rejects_bad_scripts() -> None:
    """A bare string (a common slip for [string]) and non-reply items are TypeErrors."""
    with pytest.raises(TypeError, match="wrap it in a list"):
        ScriptedModel("oops")
    with pytest.raises(TypeError, match="expected a str, a ModelReply"):
        ScriptedModel([42]).request(ask())  # type: ignore[list-item]


def test_scripted_model_usage_is_additive() -> None:
    """Estimated usage adds up like real usage (the agent sums it over attempts)."""
    model = ScriptedModel(["a" * 40, "b" * 40])
    total = model.request(ask()).usage + model.request(ask()).usage
    assert total.requests == 2
    assert total.output_tokens == 20
    assert isinstance(total, Usage)


# --- FakeProviderServer: scripting ---------------------------------------------------------------


def test_handler_answers_each_request_by_its_content() -> None:
    """With a handler, replies are computed from each request, so 50 concurrent async calls
    each get their own answer."""
    fake = FakeProviderServer(handler=lambda request: f"echo:{request.last_user_text}")

    async def one(client: Any, i: int) -> str:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"n{i}"}]
        )
        return str(completion.choices[0].message.content)

    async def main() -> list[str]:
        async with fake.openai_client(async_client=True, max_retries=0) as client:
            return await asyncio.gather(*(one(client, i) for i in range(50)))

    with fake:
        answers = asyncio.run(main())
    assert answers == [f"echo:n{i}" for i in range(50)]
    assert len(fake.requests) == 50
    assert sorted(r.index for r in fake.requests) == list(range(50))


def test_queue_first_then_handler() -> None:
    """Queued items are used first; the handler answers once the queue is empty."""
    fake = FakeProviderServer(["queued"], handler=lambda request: "from handler")
    with fake, fake.openai_client(max_retries=0) as client:
        texts = [
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            .choices[0]
            .message.content
            for _ in range(3)
        ]
    assert texts == ["queued", "from handler", "from handler"]


def test_exhausted_script_is_a_500_the_sdk_does_not_retry(server: FakeProviderServer) -> None:
    """With nothing left to answer, the server replies 500 with x-should-retry: false (so the
    SDK does not retry) and records a ScriptExhaustedError for the test to see."""
    with server.openai_client(max_retries=3) as client, pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert len(server.requests) == 1
    assert len(server.errors) == 1
    assert isinstance(server.errors[0], ScriptExhaustedError)


def test_handler_errors_and_bad_items_are_recorded() -> None:
    """A handler that raises or returns something that is not a script item answers 500 and
    records the error, instead of hanging the client."""
    items: list[Any] = [42]

    def handler(request: FakeRequest) -> Any:
        if items:
            return items.pop()
        raise RuntimeError("handler broke")

    with FakeProviderServer(handler=handler) as fake, fake.openai_client(max_retries=0) as client:
        for _ in range(2):
            with pytest.raises(openai.InternalServerError):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
    assert [type(e) for e in fake.errors] == [TypeError, RuntimeError]


def test_unknown_route_is_404(server: FakeProviderServer) -> None:
    """Routes the fake does not serve answer 404 (recorded) rather than a fake success."""
    with server.openai_client(max_retries=0) as client, pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="m", input="x")
    assert server.requests[0].path == "/v1/embeddings"
    assert server.requests[0].api == "unknown"


def test_slow_reply_within_the_timeout(server: FakeProviderServer) -> None:
    """Fault.delay(seconds, then=reply) answers late but answers."""
    server.add(Fault.delay(0.05, then="late but fine"))
    with server.openai_client(max_retries=0) as client:
        completion = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert completion.choices[0].message.content == "late but fine"


def test_close_wakes_delayed_answers() -> None:
    """Closing the server ends a pending delayed answer (the client sees a connection error)
    and leaves no handler thread behind."""
    fake = FakeProviderServer([Fault.delay(300)])
    outcome: list[BaseException] = []
    started = threading.Event()

    def client_call() -> None:
        with fake.openai_client(max_retries=0, timeout=600) as client:
            started.set()
            try:
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
            except openai.APIError as exc:
                outcome.append(exc)

    thread = threading.Thread(target=client_call)
    thread.start()
    started.wait()
    while not fake.requests:
        threading.Event().wait(0.01)
    fake.close()
    thread.join()
    assert len(outcome) == 1 and isinstance(outcome[0], openai.APIConnectionError)
    assert not fake._server.threads


def test_fault_constructors_are_data() -> None:
    """Faults are plain frozen data, comparable and printable, so scripts can be built and
    shown in parametrize ids."""
    assert Fault.status(429) == Fault.status(429)
    assert dict(Fault.status(429).headers) == {"retry-after-ms": "1"}
    assert dict(Fault.status(503, retry_after_ms=None).headers) == {}
    assert Fault.delay(2.5).seconds == 2.5
    assert Fault.reset().kind == "reset"
    assert Fault.cut_short().kind == "cut_short"
    assert Fault.not_json().content_type == "text/html"
    assert "status" in repr(Fault.status(500))
    with pytest.raises(AttributeError):
        Fault.reset().kind = "status"  # type: ignore[misc]


def test_server_rejects_a_bare_string_script(server: FakeProviderServer) -> None:
    """FakeProviderServer("text") and reset("text") are TypeErrors (a str is a sequence of
    characters)."""
    with pytest.raises(TypeError, match="wrap it in a list"):
        FakeProviderServer("oops")
    with pytest.raises(TypeError, match=r"reset\(replies\).*wrap it in a list"):
        server.reset("oops")


def test_reset_starts_the_server_afresh(server: FakeProviderServer) -> None:
    """reset() keeps the address and forgets everything else: the queue, the handler, the
    requests, the errors, the batch knobs; it wakes a delayed answer (whose client then sees
    the connection close) and the new script serves the next request."""
    server.reset([Fault.delay(300, then="too late")], handler=lambda request: "handled")
    server.batch_polls = 3
    outcome: list[BaseException] = []

    def client_call() -> None:
        with server.openai_client(max_retries=0, timeout=600) as client:
            try:
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
            except openai.APIError as exc:
                outcome.append(exc)

    thread = threading.Thread(target=client_call)
    thread.start()
    while not server.requests:
        threading.Event().wait(0.01)
    server.errors.append(RuntimeError("from the previous test"))
    url = server.url
    server.reset(["fresh"])
    thread.join()
    assert len(outcome) == 1 and isinstance(outcome[0], openai.APIConnectionError)
    assert (server.url, server.requests, server.errors, server.batch_polls) == (url, [], [], 0)
    with server.openai_client(max_retries=0) as client:
        completion = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert completion.choices[0].message.content == "fresh"
    assert [r.index for r in server.requests] == [0]
    with server.openai_client(max_retries=0) as client, pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert isinstance(server.errors[0], ScriptExhaustedError)  # the handler went too


# --- FakeProviderServer: shapes the SDKs parse ---------------------------------------------------


def test_tool_call_offered_but_not_forced(server: FakeProviderServer) -> None:
    """With tools offered under tool_choice "auto", a str is plain content and Reply.tool_call
    a tool call with finish_reason "tool_calls" (what a framework's tool loop expects)."""
    server.add("just text", Reply.tool_call({"a": 1}))
    tools = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]
    with server.openai_client(max_retries=0) as client:
        first, second = (
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], tools=tools
            ).choices[0]
            for _ in range(2)
        )
    assert first.message.content == "just text" and not first.message.tool_calls
    assert second.finish_reason == "tool_calls"
    call = second.message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "edit"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"a": 1}  # type: ignore[union-attr]


def test_request_helpers_for_chat_tool_loops(server: FakeProviderServer) -> None:
    """FakeRequest reads the conversation of a chat tool loop: roles, texts, the tool result,
    the forced tool and the output mode."""
    server.add(Reply.tool_call({"a": 1}))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "edit it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "edit", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "applied 1 change"},
    ]
    tools = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]
    with server.openai_client(max_retries=0) as client:
        client.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            tool_choice="required",
        )
    request = server.requests[0]
    assert [role for role, _ in request.messages] == ["system", "user", "assistant", "tool"]
    assert request.last_user_text == "applied 1 change"
    assert request.tools == ["edit"]
    assert request.forced_tool == "edit"
    assert request.output_mode == "tool"
    assert request.retry_count == 0
    assert request.model_name == "m"
    assert "edit it" in request.text


def test_request_helpers_for_responses_and_anthropic(server: FakeProviderServer) -> None:
    """The same helpers read Responses input items (function_call_output) and Anthropic
    blocks (tool_use, tool_result), and see the forced tool in both APIs."""
    server.add(Reply.tool_call({"b": 2}), Reply.tool_call({"c": 3}))
    with server.openai_client(max_retries=0) as client:
        response = client.responses.create(
            model="m",
            instructions="sys",
            input=[
                {"role": "user", "content": "edit"},
                {"type": "function_call", "call_id": "c1", "name": "edit", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "done"},
            ],
            tools=[{"type": "function", "name": "edit", "parameters": {}, "strict": False}],
            tool_choice={"type": "function", "name": "edit"},
        )
    assert response.output[0].type == "function_call"
    with server.anthropic_client(max_retries=0) as aclient:
        message = aclient.messages.create(
            model="claude-haiku-4-5",
            max_tokens=100,
            system="sys",
            messages=[
                {"role": "user", "content": "edit"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "edit", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok!"}],
                },
            ],
            tools=[{"name": "edit", "input_schema": {"type": "object"}}],
            tool_choice={"type": "tool", "name": "edit"},
        )
    assert message.content[0].type == "tool_use"
    assert message.stop_reason == "tool_use"
    responses_request, messages_request = server.requests
    assert responses_request.messages[0] == ("system", "sys")
    assert responses_request.last_user_text == "done"
    assert responses_request.forced_tool == "edit"
    assert messages_request.messages[0] == ("system", "sys")
    assert messages_request.last_user_text == "ok!"
    assert messages_request.forced_tool == "edit"


def test_anthropic_prose_when_a_tool_reply_is_not_an_object(server: FakeProviderServer) -> None:
    """Anthropic tool input is always an object, so a forced-tool reply that is not a JSON
    object is sent as a text block (the closest real behaviour)."""
    server.add("not json at all")
    with server.anthropic_client(max_retries=0) as client:
        message = client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
            tools=[{"name": "edit", "input_schema": {"type": "object"}}],
            tool_choice={"type": "tool", "name": "edit"},
        )
    assert message.content[0].type == "text"
    assert message.stop_reason == "end_turn"


def test_anthropic_status_error_shape(server: FakeProviderServer) -> None:
    """Anthropic errors carry the API's error body (type and message) and a request id."""
    server.add(Fault.status(529, message="busy"))
    with (
        server.anthropic_client(max_retries=0) as client,
        pytest.raises(anthropic.OverloadedError) as caught,
    ):
        client.messages.create(
            model="claude-haiku-4-5", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.api_message == "busy"
    assert caught.value.type == "overloaded_error"
    assert caught.value.request_id


# --- the blocking switch -------------------------------------------------------------------------


def test_block_model_requests_restores_the_previous_state() -> None:
    """The context manager blocks inside and restores on exit, nested and as a decorator (the
    suite itself runs inside block_model_requests(), see conftest.py, so this test starts from an
    explicitly allowed state)."""
    with block_model_requests(False):
        assert model_requests_allowed()
        with block_model_requests():
            assert not model_requests_allowed()
            with block_model_requests(False):
                assert model_requests_allowed()
            assert not model_requests_allowed()
        assert model_requests_allowed()

        @block_model_requests()
        def inside() -> bool:
            return model_requests_allowed()

        assert inside() is False
        assert model_requests_allowed()
    assert not model_requests_allowed()  # back to the suite-wide block


def test_global_switch_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """ALLOW_MODEL_REQUESTS = False and AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0 both block."""
    monkeypatch.setattr(testing, "ALLOW_MODEL_REQUESTS", False)
    assert not model_requests_allowed()
    monkeypatch.setattr(testing, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS", "false")
    assert not model_requests_allowed()
    monkeypatch.setenv("AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS", "1")
    assert model_requests_allowed()
