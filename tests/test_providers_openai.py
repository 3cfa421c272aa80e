"""The OpenAI adapters with the REAL openai SDK (sync and async) talking HTTP to
``FakeProviderServer``: no patching of the SDK or of our code.

Transport retries are the SDK's own (``max_retries``); the fake server's faults carry
``retry-after-ms: 1`` so those retries do not sleep.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from typing import Any

import openai
import pytest
from _provider_helpers import MODES, SCHEMA, ask, checked_server

from agent_payload.errors import ConfigurationError, ModelRequestsBlockedError, ProviderError
from agent_payload.providers.base import Message, ModelReply, ModelRequest
from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel
from agent_payload.testing import FakeProviderServer, Fault, Reply, block_model_requests

SSL = ssl.create_default_context()  # one context for the few clients built here
APIS = ["chat", "responses"]

STRICT_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}},
    "required": ["reasoning"],
    "additionalProperties": False,
}


def make_model(api: str, client: Any, **options: Any) -> OpenAIChatModel | OpenAIResponsesModel:
    cls = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    return cls(client, "gpt-test", **options)


def call(
    server: FakeProviderServer,
    api: str,
    mode: str,
    request: ModelRequest,
    *,
    model_options: dict[str, Any] | None = None,
    **client_options: Any,
) -> ModelReply:
    """One request through a fresh real client (closed afterwards)."""
    client_options.setdefault("max_retries", 0)
    if mode == "async":

        async def go() -> ModelReply:
            async with server.openai_client(async_client=True, **client_options) as client:
                return await make_model(api, client, **(model_options or {})).arequest(request)

        return asyncio.run(go())
    with server.openai_client(**client_options) as client:
        return make_model(api, client, **(model_options or {})).request(request)


def real_client(base_url: str, *, is_async: bool = False) -> Any:
    """A client aimed at a server that must never be reached in these tests."""
    if is_async:
        ahttp = openai.DefaultAsyncHttpxClient(verify=SSL)
        return openai.AsyncOpenAI(api_key="k", base_url=base_url, http_client=ahttp)
    http = openai.DefaultHttpxClient(verify=SSL)
    return openai.OpenAI(api_key="k", base_url=base_url, http_client=http)


server = pytest.fixture(checked_server, name="server")


# --- output modes --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_text_mode(server: FakeProviderServer, api: str, mode: str) -> None:
    """Text mode sends the conversation (system message as a message, or as Responses
    ``instructions``) and returns the reply text, finish reason, usage and model."""
    server.add(
        Reply.message('{"updateElements": {"name": "Ada"}}', input_tokens=11, output_tokens=7)
    )
    reply = call(server, api, mode, ask(max_tokens=300, temperature=0.0))
    assert reply.text == '{"updateElements": {"name": "Ada"}}'
    assert reply.usage.input_tokens == 11
    assert reply.usage.output_tokens == 7
    assert reply.usage.requests == 1
    assert reply.model_name == "gpt-test"
    assert not reply.truncated
    assert reply.refusal is None
    body = server.requests[0].body
    assert body["temperature"] == 0.0
    if api == "chat":
        assert server.requests[0].path == "/v1/chat/completions"
        assert reply.finish_reason == "stop"
        assert body["messages"][0] == {"role": "system", "content": "You edit payloads."}
        assert body["max_completion_tokens"] == 300
        assert "tools" not in body and "response_format" not in body
    else:
        assert server.requests[0].path == "/v1/responses"
        assert reply.finish_reason == "completed"
        assert body["instructions"] == "You edit payloads."
        assert body["input"] == [{"role": "user", "content": "Rename Bob to Ada."}]
        assert body["max_output_tokens"] == 300
        assert "tools" not in body and "text" not in body


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_tool_mode(server: FakeProviderServer, api: str, mode: str) -> None:
    """Tool mode offers one function tool with the schema, forces it with tool_choice, and
    returns the call's arguments as the reply text."""
    server.add(Reply.tool_call({"updateElements": {"name": "Ada"}}))
    reply = call(server, api, mode, ask("tool"))
    assert reply.text == '{"updateElements": {"name": "Ada"}}'
    body = server.requests[0].body
    assert server.requests[0].forced_tool == "apply_change_request"
    (tool,) = body["tools"]
    function = tool["function"] if api == "chat" else tool
    assert function["name"] == "apply_change_request"
    assert function["parameters"] == SCHEMA
    # the change-request schema is not strict-compatible: chat leaves the flag out, the
    # Responses API (strict by default) gets an explicit false
    assert function.get("strict") is (None if api == "chat" else False)
    if api == "chat":
        assert body["tool_choice"] == {
            "type": "function",
            "function": {"name": "apply_change_request"},
        }
    else:
        assert body["tool_choice"] == {"type": "function", "name": "apply_change_request"}


@pytest.mark.parametrize("api", APIS)
def test_tool_call_under_another_name(server: FakeProviderServer, api: str) -> None:
    """A reply whose only tool call has another name is still read (the model answered)."""
    server.add(Reply.tool_call({"x": 1}, name="other"))
    reply = call(server, api, "sync", ask("tool"))
    assert reply.text == '{"x": 1}'


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_json_schema_mode(server: FakeProviderServer, api: str, mode: str) -> None:
    """json_schema mode asks for structured outputs with the schema and returns the content."""
    server.add('{"reasoning": "ok"}')
    reply = call(server, api, mode, ask("json_schema"))
    assert reply.text == '{"reasoning": "ok"}'
    body = server.requests[0].body
    assert server.requests[0].output_mode == "json_schema"
    if api == "chat":
        response_format = body["response_format"]
        assert response_format["type"] == "json_schema"
        spec = response_format["json_schema"]
    else:
        spec = body["text"]["format"]
        assert spec["type"] == "json_schema"
    assert spec["name"] == "apply_change_request"
    assert spec["schema"] == SCHEMA
    assert spec["strict"] is False


@pytest.mark.parametrize("api", APIS)
def test_defaults_and_extra_are_passed_through(server: FakeProviderServer, api: str) -> None:
    """Constructor defaults go into every call and ModelRequest.extra overrides them."""
    server.add("a", "b")
    options = {"user": "u-1", "metadata": {"run": "1"}}
    call(server, api, "sync", ask(), model_options=options)
    call(server, api, "sync", ask(extra={"user": "u-2"}), model_options=options)
    bodies = [r.body for r in server.requests]
    assert [b.get("user") for b in bodies] == ["u-1", "u-2"]
    assert bodies[1]["metadata"] == {"run": "1"}


@pytest.mark.parametrize("api", APIS)
def test_unknown_option_is_a_configuration_error(server: FakeProviderServer, api: str) -> None:
    """An option the SDK method does not take is a ConfigurationError pointing at extra_body,
    raised before any request is sent."""
    with pytest.raises(ConfigurationError, match="extra_body"):
        call(server, api, "sync", ask(extra={"no_such_option": 1}))
    assert server.requests == []


def test_max_tokens_param_for_older_servers(server: FakeProviderServer) -> None:
    """max_tokens_param="max_tokens" sends the older parameter name (some compatible servers)."""
    server.add("ok")
    call(
        server, "chat", "sync", ask(max_tokens=50), model_options={"max_tokens_param": "max_tokens"}
    )
    body = server.requests[0].body
    assert body["max_tokens"] == 50
    assert "max_completion_tokens" not in body


# --- finish reasons ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_truncation(server: FakeProviderServer, api: str, mode: str) -> None:
    """A reply cut by the token limit is marked truncated (finish_reason "length" /
    Responses incomplete with "max_output_tokens"), in text and in tool mode."""
    server.add(Reply.truncated('{"updateElements": {"na'), Reply.truncated('{"upd'))
    text_reply = call(server, api, mode, ask())
    tool_reply = call(server, api, mode, ask("tool"))
    for reply in (text_reply, tool_reply):
        assert reply.truncated
        assert reply.finish_reason == ("length" if api == "chat" else "max_output_tokens")
    assert text_reply.text == '{"updateElements": {"na'
    assert tool_reply.text == '{"upd'


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_refusal(server: FakeProviderServer, api: str, mode: str) -> None:
    """A refusal (chat ``message.refusal``, Responses refusal content) lands in
    ModelReply.refusal, with no text."""
    server.add(Reply.refusal("I can't help with that."))
    reply = call(server, api, mode, ask("json_schema"))
    assert reply.refusal == "I can't help with that."
    assert reply.text == ""
    assert not reply.truncated


# --- transport failures --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("status", "sdk_error"),
    [(429, openai.RateLimitError), (500, openai.InternalServerError), (503, openai.APIStatusError)],
)
def test_status_errors_after_sdk_retries(
    server: FakeProviderServer, api: str, mode: str, status: int, sdk_error: type[Exception]
) -> None:
    """429 and 5xx are retried by the SDK (max_retries=2: the server sees three requests) and
    then surface as a retryable ProviderError chained to the SDK's exception."""
    server.add(Fault.status(status), Fault.status(status), Fault.status(status), "never sent")
    with pytest.raises(ProviderError) as caught:
        call(server, api, mode, ask(), max_retries=2)
    error = caught.value
    assert error.status_code == status
    assert error.retryable
    assert error.provider == "openai"
    assert isinstance(error.__cause__, sdk_error)
    assert f"HTTP {status}" in str(error)
    assert [r.retry_count for r in server.requests] == [0, 1, 2]
    assert server.remaining == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_rate_limit_then_success(server: FakeProviderServer, api: str, mode: str) -> None:
    """A 429 followed by a good reply is absorbed by the SDK's own retry: one reply, two HTTP
    requests, no error."""
    server.add(Fault.status(429), "fine")
    reply = call(server, api, mode, ask(), max_retries=1)
    assert reply.text == "fine"
    assert len(server.requests) == 2


@pytest.mark.parametrize("api", APIS)
def test_client_errors_are_not_retryable(server: FakeProviderServer, api: str) -> None:
    """A 400 is not retried by the SDK and is a non-retryable ProviderError."""
    server.add(Fault.status(400, message="bad schema"), "never sent")
    with pytest.raises(ProviderError, match="bad schema") as caught:
        call(server, api, "sync", ask(), max_retries=2)
    assert caught.value.status_code == 400
    assert not caught.value.retryable
    assert len(server.requests) == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_timeout(server: FakeProviderServer, api: str, mode: str) -> None:
    """An answer slower than the client's timeout is a retryable ProviderError chained to the
    SDK's APITimeoutError (after the SDK's retry)."""
    server.add(Fault.delay(30), Fault.delay(30))
    with pytest.raises(ProviderError, match="timed out") as caught:
        call(server, api, mode, ask(), timeout=0.1, max_retries=1)
    assert isinstance(caught.value.__cause__, openai.APITimeoutError)
    assert caught.value.retryable
    assert len(server.requests) == 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", [Fault.reset(), Fault.cut_short()], ids=["reset", "cut_short"])
def test_broken_connections(server: FakeProviderServer, api: str, mode: str, fault: Fault) -> None:
    """A connection reset mid-body or a body cut short of its Content-Length is retried by
    the SDK, then a retryable ProviderError chained to APIConnectionError."""
    server.add(fault, fault)
    with pytest.raises(ProviderError, match="connection failed") as caught:
        call(server, api, mode, ask(), max_retries=1)
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)
    assert caught.value.retryable
    assert len(server.requests) == 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("content_type", ["text/html", "application/json"])
def test_body_that_is_not_json(
    server: FakeProviderServer, api: str, mode: str, content_type: str
) -> None:
    """A 200 whose body is not JSON (a proxy's HTML page, or broken JSON declared as JSON) is a
    ProviderError saying so, not a crash deep in our code."""
    server.add(Fault.not_json(content_type=content_type))
    with pytest.raises(ProviderError, match=r"not (valid )?JSON") as caught:
        call(server, api, mode, ask())
    assert caught.value.status_code == 200
    assert caught.value.__cause__ is not None  # every ProviderError is chained


# --- configuration and the blocking switch -------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_blocked_requests_to_real_servers(api: str) -> None:
    """Inside block_model_requests() a client aimed at a real server is refused before any
    network traffic, sync and async."""
    request = ask()
    with block_model_requests():
        with (
            real_client("https://api.openai.com/v1") as client,
            pytest.raises(ModelRequestsBlockedError, match="blocked"),
        ):
            make_model(api, client).request(request)

        async def go() -> None:
            async with real_client("https://example.com/v1", is_async=True) as aclient:
                await make_model(api, aclient).arequest(request)

        with pytest.raises(ModelRequestsBlockedError):
            asyncio.run(go())


def test_blocking_allows_loopback(server: FakeProviderServer) -> None:
    """The fake server on 127.0.0.1 stays usable while real requests are blocked."""
    server.add("local")
    with block_model_requests():
        assert call(server, "chat", "sync", ask()).text == "local"


def test_blocking_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS=0 blocks real requests without any code change."""
    monkeypatch.setenv("AGENT_PAYLOAD_ALLOW_MODEL_REQUESTS", "0")
    with (
        real_client("https://api.openai.com/v1") as client,
        pytest.raises(ModelRequestsBlockedError),
    ):
        OpenAIChatModel(client, "gpt-test").request(ask())


@pytest.mark.parametrize("api", APIS)
def test_wrong_client_kind(api: str) -> None:
    """A sync client cannot serve arequest, an async one cannot serve request, and anything
    else is refused at construction: ConfigurationError with what to do."""
    with (
        real_client("http://127.0.0.1:9/v1") as client,
        pytest.raises(ConfigurationError, match="AsyncOpenAI"),
    ):
        asyncio.run(make_model(api, client).arequest(ask()))

    async def go() -> None:
        async with real_client("http://127.0.0.1:9/v1", is_async=True) as aclient:
            with pytest.raises(ConfigurationError, match=re.escape("openai.OpenAI client")):
                make_model(api, aclient).request(ask())

    asyncio.run(go())
    with pytest.raises(ConfigurationError, match=re.escape("expected an openai.OpenAI")):
        make_model(api, object())


def test_responses_refuses_a_late_system_message() -> None:
    """The Responses API takes the system prompt apart; a system message after the first user
    message cannot be expressed and is a ConfigurationError naming the position."""
    request = ModelRequest(messages=(Message("user", "a"), Message("system", "b")))
    with (
        real_client("http://127.0.0.1:9/v1") as client,
        pytest.raises(ConfigurationError, match="position 1"),
    ):
        OpenAIResponsesModel(client, "m").build_params(request)


def test_model_protocol_properties() -> None:
    """The adapters expose name, provider and is_async as the Model protocol expects."""
    with real_client("http://127.0.0.1:9/v1") as client:
        model = OpenAIChatModel(client, "gpt-x")
        assert (model.model_name, model.provider, model.is_async) == ("gpt-x", "openai", False)
        with pytest.raises(ConfigurationError, match="model name"):
            OpenAIChatModel(client, "")
