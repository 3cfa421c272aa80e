"""The Anthropic adapter with the REAL anthropic SDK (sync and async) talking HTTP to
``FakeProviderServer``: no patching of the SDK or of our code."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from typing import Any

import anthropic
import pytest
from _provider_helpers import MODES, SCHEMA, ask, checked_server

from agent_payload.errors import ConfigurationError, ModelRequestsBlockedError, ProviderError
from agent_payload.providers.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.testing import FakeProviderServer, Fault, Reply, block_model_requests

SSL = ssl.create_default_context()  # one context for the few clients built here


def call(
    server: FakeProviderServer,
    mode: str,
    request: ModelRequest,
    *,
    model_options: dict[str, Any] | None = None,
    **client_options: Any,
) -> ModelReply:
    """One request through a fresh real client (closed afterwards)."""
    client_options.setdefault("max_retries", 0)
    options = model_options or {}
    if mode == "async":

        async def go() -> ModelReply:
            async with server.anthropic_client(async_client=True, **client_options) as client:
                return await AnthropicModel(client, "claude-test", **options).arequest(request)

        return asyncio.run(go())
    with server.anthropic_client(**client_options) as client:
        return AnthropicModel(client, "claude-test", **options).request(request)


def real_client(base_url: str, *, is_async: bool = False) -> Any:
    """A client aimed at a server that must never be reached in these tests."""
    if is_async:
        ahttp = anthropic.DefaultAsyncHttpxClient(verify=SSL)
        return anthropic.AsyncAnthropic(api_key="k", base_url=base_url, http_client=ahttp)
    http = anthropic.DefaultHttpxClient(verify=SSL)
    return anthropic.Anthropic(api_key="k", base_url=base_url, http_client=http)


server = pytest.fixture(checked_server, name="server")


# --- output modes --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_text_mode(server: FakeProviderServer, mode: str) -> None:
    """Text mode sends the system prompt apart (one text block marked for the prompt cache,
    the default) and the conversation as messages, and returns the text, stop reason, usage and
    model."""
    server.add(
        Reply.message('{"updateElements": {"name": "Ada"}}', input_tokens=13, output_tokens=5)
    )
    reply = call(server, mode, ask(max_tokens=300))
    assert reply.text == '{"updateElements": {"name": "Ada"}}'
    assert reply.finish_reason == "end_turn"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.requests) == (13, 5, 1)
    assert reply.model_name == "claude-test"
    assert not reply.truncated and reply.refusal is None
    request = server.requests[0]
    assert request.path == "/v1/messages"
    assert request.body["system"] == [
        {"type": "text", "text": "You edit payloads.", "cache_control": {"type": "ephemeral"}}
    ]
    assert request.body["messages"] == [{"role": "user", "content": "Rename Bob to Ada."}]
    assert request.body["max_tokens"] == 300
    assert "tools" not in request.body


def test_default_max_tokens_and_temperature(server: FakeProviderServer) -> None:
    """Without a request limit the adapter's max_tokens is sent (the API requires one), and a
    temperature travels in the body (through extra_body)."""
    server.add("a", "b")
    call(server, "sync", ask(temperature=0.3))
    call(server, "sync", ask(), model_options={"max_tokens": 1234})
    first, second = (r.body for r in server.requests)
    assert first["max_tokens"] == DEFAULT_MAX_TOKENS
    assert first["temperature"] == 0.3
    assert second["max_tokens"] == 1234
    assert "temperature" not in second


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("output_mode", ["tool", "json_schema"])
def test_tool_mode(server: FakeProviderServer, mode: str, output_mode: str) -> None:
    """Tool mode (and json_schema, which falls back to it) offers one tool with the schema as
    input_schema, forces it, and returns the tool_use input as a JSON string."""
    server.add(Reply.tool_call({"updateElements": {"name": "Ada"}}))
    reply = call(server, mode, ask(output_mode))
    assert json.loads(reply.text) == {"updateElements": {"name": "Ada"}}
    assert reply.finish_reason == "tool_use"
    body = server.requests[0].body
    (tool,) = body["tools"]
    assert tool["name"] == "apply_change_request"
    assert tool["input_schema"] == SCHEMA
    assert "strict" not in tool
    assert body["tool_choice"] == {
        "type": "tool",
        "name": "apply_change_request",
        "disable_parallel_tool_use": True,
    }


def test_tool_mode_reads_prose_when_no_tool_was_called(server: FakeProviderServer) -> None:
    """If the model answers with text instead of the tool, the text is the reply (the parser
    and the correction loop deal with it)."""
    server.add(Reply.message("I would rather explain."))
    assert call(server, "sync", ask("tool")).text == "I would rather explain."


# --- finish reasons ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_truncation(server: FakeProviderServer, mode: str) -> None:
    """stop_reason "max_tokens" marks the reply truncated, in text and in tool mode."""
    server.add(Reply.truncated('{"updateElements": {"na'), Reply.truncated('{"upd'))
    text_reply = call(server, mode, ask())
    tool_reply = call(server, mode, ask("tool"))
    for reply in (text_reply, tool_reply):
        assert reply.truncated
        assert reply.finish_reason == "max_tokens"
    assert text_reply.text == '{"updateElements": {"na'


@pytest.mark.parametrize("mode", MODES)
def test_refusal(server: FakeProviderServer, mode: str) -> None:
    """stop_reason "refusal" fills ModelReply.refusal with the refusal text."""
    server.add(Reply.refusal("I can't help with that."))
    reply = call(server, mode, ask())
    assert reply.finish_reason == "refusal"
    assert reply.refusal == "I can't help with that."
    assert not reply.truncated


def test_refusal_without_text_uses_the_explanation(server: FakeProviderServer) -> None:
    """A refusal with no text still yields a refusal (from stop_details or a stock message)."""
    server.add(Reply.refusal(""))
    reply = call(server, "sync", ask())
    assert reply.refusal is not None and "refus" in reply.refusal


# --- transport failures --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("status", "sdk_error"),
    [
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (529, anthropic.OverloadedError),
    ],
)
def test_status_errors_after_sdk_retries(
    server: FakeProviderServer, mode: str, status: int, sdk_error: type[Exception]
) -> None:
    """429, 500 and 529 are retried by the SDK (max_retries=2: three requests) and then
    surface as a retryable ProviderError chained to the SDK's exception."""
    server.add(Fault.status(status), Fault.status(status), Fault.status(status), "never sent")
    with pytest.raises(ProviderError) as caught:
        call(server, mode, ask(), max_retries=2)
    error = caught.value
    assert (error.status_code, error.retryable, error.provider) == (status, True, "anthropic")
    assert isinstance(error.__cause__, sdk_error)
    assert "injected" in str(error)  # the API's own message is carried over
    assert [r.retry_count for r in server.requests] == [0, 1, 2]


@pytest.mark.parametrize("mode", MODES)
def test_overload_then_success(server: FakeProviderServer, mode: str) -> None:
    """A 529 followed by a good reply is absorbed by the SDK's retry."""
    server.add(Fault.status(529), "fine")
    assert call(server, mode, ask(), max_retries=1).text == "fine"
    assert len(server.requests) == 2


def test_bad_request_is_not_retryable(server: FakeProviderServer) -> None:
    """A 400 is not retried and is a non-retryable ProviderError with the API's message."""
    server.add(Fault.status(400, message="max_tokens: too large"), "never sent")
    with pytest.raises(ProviderError, match="max_tokens: too large") as caught:
        call(server, "sync", ask(), max_retries=2)
    assert not caught.value.retryable
    assert len(server.requests) == 1


@pytest.mark.parametrize("mode", MODES)
def test_timeout(server: FakeProviderServer, mode: str) -> None:
    """A slow answer beyond the client's timeout is a retryable ProviderError chained to
    APITimeoutError."""
    server.add(Fault.delay(30))
    with pytest.raises(ProviderError, match="timed out") as caught:
        call(server, mode, ask(), timeout=0.1)
    assert isinstance(caught.value.__cause__, anthropic.APITimeoutError)
    assert caught.value.retryable


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", [Fault.reset(), Fault.cut_short()], ids=["reset", "cut_short"])
def test_broken_connections(server: FakeProviderServer, mode: str, fault: Fault) -> None:
    """A reset connection or a body cut short is retried by the SDK, then a retryable
    ProviderError chained to APIConnectionError."""
    server.add(fault, fault)
    with pytest.raises(ProviderError, match="connection failed") as caught:
        call(server, mode, ask(), max_retries=1)
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)
    assert len(server.requests) == 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("content_type", ["text/html", "application/json"])
def test_body_that_is_not_json(server: FakeProviderServer, mode: str, content_type: str) -> None:
    """A 200 whose body is not JSON is a ProviderError saying so."""
    server.add(Fault.not_json(content_type=content_type))
    with pytest.raises(ProviderError, match=r"not (valid )?JSON") as caught:
        call(server, mode, ask())
    assert caught.value.status_code == 200
    assert caught.value.__cause__ is not None  # every ProviderError is chained


# --- configuration and the blocking switch -------------------------------------------------------


def test_blocked_requests_to_real_servers() -> None:
    """Inside block_model_requests() a client aimed at the real API is refused, sync and async."""
    with block_model_requests():
        with (
            real_client("https://api.anthropic.com") as client,
            pytest.raises(ModelRequestsBlockedError, match="anthropic"),
        ):
            AnthropicModel(client, "claude-test").request(ask())

        async def go() -> None:
            async with real_client("https://api.anthropic.com", is_async=True) as aclient:
                await AnthropicModel(aclient, "claude-test").arequest(ask())

        with pytest.raises(ModelRequestsBlockedError):
            asyncio.run(go())


def test_wrong_client_kind() -> None:
    """Sync vs async mismatches and foreign objects are ConfigurationErrors saying what to pass."""
    with (
        real_client("http://127.0.0.1:9") as client,
        pytest.raises(ConfigurationError, match="AsyncAnthropic"),
    ):
        asyncio.run(AnthropicModel(client, "c").arequest(ask()))

    async def go() -> None:
        async with real_client("http://127.0.0.1:9", is_async=True) as aclient:
            with pytest.raises(ConfigurationError, match=re.escape("anthropic.Anthropic client")):
                AnthropicModel(aclient, "c").request(ask())

    asyncio.run(go())
    with pytest.raises(ConfigurationError, match=re.escape("expected an anthropic.Anthropic")):
        AnthropicModel(object(), "c")


def test_missing_credentials_is_a_configuration_error(
    server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client without any credentials fails with a ConfigurationError naming
    ANTHROPIC_API_KEY, before a request is sent."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    http = anthropic.DefaultHttpxClient(verify=SSL)
    with anthropic.Anthropic(
        api_key=None, base_url=server.anthropic_base_url, http_client=http
    ) as client:
        try:
            AnthropicModel(client, "c").request(ask())
        except ConfigurationError as exc:
            assert "ANTHROPIC_API_KEY" in str(exc)
            assert server.requests == []
        else:  # the SDK found credentials elsewhere (a config file): nothing to check here
            pytest.skip("the anthropic SDK found credentials outside the environment")


def test_model_protocol_properties() -> None:
    """name, provider and is_async are exposed as the Model protocol expects."""
    with real_client("http://127.0.0.1:9") as client:
        model = AnthropicModel(client, "claude-x")
        assert (model.model_name, model.provider, model.is_async) == (
            "claude-x",
            "anthropic",
            False,
        )


def test_context_window_stop_is_truncation() -> None:
    """stop_reason "model_context_window_exceeded" also means the reply was cut: truncated."""
    message = anthropic.types.Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": '{"upd'}],
            "stop_reason": "model_context_window_exceeded",
            "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 3},
        }
    )
    with real_client("http://127.0.0.1:9") as client:
        reply = AnthropicModel(client, "claude-test").parse_reply(message, ask())
    assert reply.truncated
    assert reply.usage.input_tokens == 8  # cached input counts as input
