"""Malformed 200 responses: the real openai and anthropic SDKs, our adapters and the agent
against ``FakeProviderServer`` answering with a body of a shape the adapters do not understand
(``"message": null`` in a chat completion, an Anthropic message without ``content``, a
Responses body with ``"output": null`` ...), for every adapter and output mode, sync and async.

Each run ends with a ``ProviderError`` (HTTP 200, not retryable) whose message names the field
that was missing or wrong, chained to the underlying error; never a raw ``AttributeError`` or
``TypeError``; the caller's payload is unchanged.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from agent_payload.agent import AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import AgentPayloadError, ProviderError
from agent_payload.testing import FakeProviderServer, Fault

pytest.importorskip("openai")
pytest.importorskip("anthropic")

PAYLOAD: dict[str, Any] = {"status": "open", "items": [{"sku": "A", "qty": 1}]}
GOOD = '{"updateElements": {"status": "closed"}}'
_DELETE = object()

Body = dict[str, Any]


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[Body], Body]:
    """A transform setting (or, with ``_DELETE``, removing) one place of the good body."""

    def transform(body: Body) -> Body:
        node: Any = body
        for part in path[:-1]:
            node = node[part]
        if value is _DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return body

    return transform


# api -> name -> (transform, the field the error must name, output modes it applies to)
ALL = ("text", "tool", "json_schema")
MALFORMED: dict[str, dict[str, tuple[Callable[[Body], Body], str, tuple[str, ...]]]] = {
    "chat": {
        "message-null": (_set(("choices", 0, "message"), None), "choices[0].message", ALL),
        "message-missing": (
            _set(("choices", 0, "message"), _DELETE),
            "choices[0].message",
            ALL,
        ),
        "message-a-string": (_set(("choices", 0, "message"), "hi"), "choices[0].message", ALL),
        "choice-null": (_set(("choices", 0), None), "choices[0]", ALL),
        "usage-a-string": (_set(("usage",), "many"), "usage", ALL),
        "content-a-number": (
            _set(("choices", 0, "message", "content"), 5),
            "choices[0].message.content",
            ("text", "json_schema"),
        ),
        "arguments-null": (
            _set(("choices", 0, "message", "tool_calls", 0, "function", "arguments"), None),
            "function.arguments",
            ("tool",),
        ),
    },
    "responses": {
        "output-null": (_set(("output",), None), "output", ALL),
        "output-missing": (_set(("output",), _DELETE), "output", ALL),
        "output-item-null": (_set(("output", 0), None), "output[0]", ALL),
        "usage-a-string": (_set(("usage",), "many"), "usage", ALL),
        "content-null": (
            _set(("output", 0, "content"), None),
            "output[0].content",
            ("text", "json_schema"),
        ),
        "text-null": (
            _set(("output", 0, "content", 0, "text"), None),
            "output[0].content[0].text",
            ("text", "json_schema"),
        ),
        "arguments-null": (
            _set(("output", 0, "arguments"), None),
            "output[0].arguments",
            ("tool",),
        ),
    },
    "anthropic": {
        "content-missing": (_set(("content",), _DELETE), "content", ALL),
        "content-null": (_set(("content",), None), "content", ALL),
        "block-null": (_set(("content", 0), None), "content[0]", ALL),
        "usage-missing": (_set(("usage",), _DELETE), "usage", ALL),
        "input-tokens-null": (_set(("usage", "input_tokens"), None), "usage.input_tokens", ALL),
        "text-missing": (_set(("content", 0, "text"), _DELETE), "content[0].text", ("text",)),
        "tool-input-a-string": (
            _set(("content", 0, "input"), "x"),
            "content[0].input",
            ("tool", "json_schema"),
        ),
    },
}

CASES = [
    pytest.param(api, name, mode, id=f"{api}-{mode}-{name}")
    for api, bodies in MALFORMED.items()
    for name, (_, _, modes) in bodies.items()
    for mode in modes
]


def _client(server: FakeProviderServer, api: str, *, is_async: bool) -> Any:
    if api == "anthropic":
        return server.anthropic_client(async_client=is_async, max_retries=1)
    return server.openai_client(async_client=is_async, max_retries=1)


def _agent_model(api: str, client: Any) -> Any:
    if api == "responses":
        from agent_payload.providers.openai import OpenAIResponsesModel

        return OpenAIResponsesModel(client, "gpt-test")
    return client


def _run(server: FakeProviderServer, api: str, mode: str, *, is_async: bool) -> Any:
    """Run one agent against the server; return the result or the raised error."""
    payload = copy.deepcopy(PAYLOAD)
    kwargs: dict[str, Any] = {
        "model_name": {"chat": "gpt-test", "anthropic": "claude-test", "responses": None}[api],
        "output_mode": mode,
        "max_retries": 1,
    }
    try:
        if not is_async:
            with _client(server, api, is_async=False) as sdk:
                return PayloadAgent(_agent_model(api, sdk), **kwargs).run(payload, "close it")

        async def main() -> Any:
            async with _client(server, api, is_async=True) as sdk:
                agent = AsyncPayloadAgent(_agent_model(api, sdk), **kwargs)
                return await agent.run(payload, "close it")

        return asyncio.run(main())
    except AgentPayloadError as exc:
        return exc
    finally:
        assert payload == PAYLOAD


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("api", "name", "mode"), CASES)
def test_a_malformed_200_is_a_provider_error_naming_the_field(
    api: str, name: str, mode: str, is_async: bool
) -> None:
    """The malformed body ends the run with ProviderError (status 200, chained) naming the
    field; no raw AttributeError/TypeError escapes; the SDK does not retry a 200, so exactly
    one request was made."""
    transform, field, _ = MALFORMED[api][name]
    with FakeProviderServer([Fault.malformed(transform, then=GOOD), GOOD]) as server:
        result = _run(server, api, mode, is_async=is_async)
        assert server.errors == []
        assert len(server.requests) == 1
    assert isinstance(result, ProviderError), result
    assert result.status_code == 200
    assert result.__cause__ is not None
    assert field in str(result), str(result)
    assert "does not understand" in str(result)
    assert result.attempts == 1


@pytest.mark.parametrize("api", list(MALFORMED))
def test_the_same_bodies_well_formed_are_applied(api: str) -> None:
    """Control: the good answer the transforms start from is applied in every mode (so the
    errors above come from the damage, not from the setup)."""
    for mode in ALL:
        with FakeProviderServer([GOOD]) as server:
            result = _run(server, api, mode, is_async=False)
        assert not isinstance(result, Exception), (mode, result)
        assert result.payload["status"] == "closed"


def test_a_body_that_is_json_but_not_an_object() -> None:
    """A JSON array or null as the whole body is named as such (not "not JSON")."""
    for body in ([], None):
        with FakeProviderServer([Fault.malformed(lambda _b, v=body: v)]) as server:
            result = _run(server, "chat", "text", is_async=False)
        assert isinstance(result, ProviderError), result
        assert "instead of an object" in str(result)
        assert result.__cause__ is not None
