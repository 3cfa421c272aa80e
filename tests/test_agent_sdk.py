"""The agent with the REAL openai and anthropic SDKs, talking HTTP to ``FakeProviderServer``.

Nothing is patched: the SDK clients are pointed at the fake server on 127.0.0.1 and our
adapters, parser, merge and correction loop run as in production. Every scenario runs for
OpenAI Chat Completions, the OpenAI Responses API and Anthropic Messages, sync and async.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload.agent import AgentResult, AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import ConfigurationError, ProviderError, RetriesExhaustedError
from agent_payload.testing import FakeProviderServer, FakeRequest, Fault, Reply

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

APIS = ("chat", "responses", "anthropic")
MODES = ("sync", "async")


@pytest.fixture
def server(fake_server: FakeProviderServer) -> FakeProviderServer:
    return fake_server


def make_client(server: FakeProviderServer, api: str, *, is_async: bool, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    if api == "anthropic":
        return server.anthropic_client(async_client=is_async, **kw)
    return server.openai_client(async_client=is_async, **kw)


def make_model(api: str, client: Any) -> Any:
    """The adapter for ``api``: chat and anthropic through ``model_name`` inference, the
    Responses API through its explicit adapter."""
    if api == "responses":
        from agent_payload.providers.openai import OpenAIResponsesModel

        return OpenAIResponsesModel(client, "gpt-test")
    return client


def model_name(api: str) -> str | None:
    return {"chat": "gpt-test", "anthropic": "claude-test", "responses": None}[api]


def run_agent(
    server: FakeProviderServer,
    api: str,
    mode: str,
    payload: Any,
    task: str,
    *,
    agent: dict[str, Any] | None = None,
    client: dict[str, Any] | None = None,
    **run_kwargs: Any,
) -> AgentResult[Any]:
    """Build the client inside the mode's world (and close it there), run the agent once."""
    agent_kwargs = dict(agent or {})
    agent_kwargs.setdefault("model_name", model_name(api))
    if mode == "sync":
        with make_client(server, api, is_async=False, **(client or {})) as sdk:
            sync_agent = PayloadAgent(make_model(api, sdk), **agent_kwargs)
            return sync_agent.run(payload, task, **run_kwargs)

    async def main() -> AgentResult[Any]:
        async with make_client(server, api, is_async=True, **(client or {})) as sdk:
            async_agent = AsyncPayloadAgent(make_model(api, sdk), **agent_kwargs)
            return await async_agent.run(payload, task, **run_kwargs)

    return asyncio.run(main())


def wire(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


INVOICE = {
    "number": "INV-7",
    "customer": {"name": "Ada", "email": "ada@example.com"},
    "lines": [
        {"sku": "A", "qty": 1, "price": 10},
        {"sku": "B", "qty": 2, "price": 5},
    ],
    "notes": "net 30",
}


class Line(BaseModel):
    sku: str
    qty: int
    price: int


class Customer(BaseModel):
    name: str
    email: str


class Invoice(BaseModel):
    number: str
    customer: Customer
    lines: list[Line]
    notes: str


def invoice() -> dict[str, Any]:
    return copy.deepcopy(INVOICE)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_clean_run(server: FakeProviderServer, api: str, mode: str) -> None:
    """One good reply through the real SDK: the updated payload, usage from the provider's
    numbers, one HTTP request carrying the system prompt and the payload."""
    server.add(wire({"updateElements": {"lines": [{}, {"qty": 3}]}, "reasoning": "more B"}))
    payload = invoice()
    result = run_agent(server, api, mode, payload, "three of B")
    assert result.payload["lines"][1] == {"sku": "B", "qty": 3, "price": 5}
    assert payload == INVOICE
    assert result.reasoning == "more B"
    assert result.attempts == 1 and result.usage.requests == 1
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    (request,) = server.requests
    roles = [role for role, _ in request.messages]
    assert roles[0] == "system" and "INV-7" in request.text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_malformed_reply_fixed_on_retry(server: FakeProviderServer, api: str, mode: str) -> None:
    """A prose reply is corrected: the second HTTP request carries the bad reply and the
    correction, and the fixed reply is applied."""
    server.add(
        "I changed the email for you!", wire({"updateElements": {"customer": {"email": "a@b.c"}}})
    )
    result = run_agent(server, api, mode, invoice(), "new email a@b.c")
    assert result.payload["customer"]["email"] == "a@b.c"
    assert result.attempts == 2
    first, second = server.requests
    assert len(second.messages) == len(first.messages) + 2
    assert "I changed the email for you!" in second.text
    assert "discarded" in second.last_user_text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_merge_conflict_fixed_on_retry(server: FakeProviderServer, api: str, mode: str) -> None:
    """A shape conflict goes back naming its path and the current subtree; the next reply is
    applied."""
    server.add(
        wire({"updateElements": {"lines": {"sku": "C"}}}),
        wire({"newElements": {"lines": [{"sku": "C", "qty": 1, "price": 1}]}}),
    )
    result = run_agent(server, api, mode, invoice(), "add a line C")
    correction = server.requests[1].last_user_text
    assert "updateElements.lines" in correction and '"sku":"B"' in correction.replace(" ", "")
    assert [line["sku"] for line in result.payload["lines"]] == ["A", "B", "C"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_validation_error_fixed_on_retry(server: FakeProviderServer, api: str, mode: str) -> None:
    """A pydantic payload whose merge fails validation is corrected; the result is an
    ``Invoice``."""
    server.add(
        wire({"updateElements": {"lines": [{"qty": "many"}]}}),
        wire({"updateElements": {"lines": [{"qty": 4}]}}),
    )
    result = run_agent(server, api, mode, Invoice.model_validate(INVOICE), "four of A")
    assert "lines[0].qty" in server.requests[1].last_user_text
    assert isinstance(result.payload, Invoice) and result.payload.lines[0].qty == 4


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_retries_exhausted(server: FakeProviderServer, api: str, mode: str) -> None:
    """Bad replies until the retries run out: ``RetriesExhaustedError`` with the attempts, the
    summed usage and the last reply; the payload is untouched."""
    server.add("no", "still no")
    payload = invoice()
    with pytest.raises(RetriesExhaustedError) as info:
        run_agent(server, api, mode, payload, "edit", agent={"max_retries": 1})
    error = info.value
    assert error.attempts == 2 and error.usage.requests == 2
    assert error.last_reply == "still no" and error.replies == ["no", "still no"]
    assert payload == INVOICE


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_truncated_reply_not_applied(server: FakeProviderServer, api: str, mode: str) -> None:
    """A reply cut by the token limit is never applied; the correction asks for a smaller
    change request and the next reply is applied."""
    server.add(
        Reply.truncated(wire({"replaceElements": {"notes": "cut"}})),
        wire({"updateElements": {"notes": "net 60"}}),
    )
    result = run_agent(server, api, mode, invoice(), "net 60")
    assert result.payload["notes"] == "net 60"
    assert result.attempts == 2
    assert "smaller" in server.requests[1].last_user_text.lower()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("status", [429, 500])
def test_transport_errors_surface_after_sdk_retries(
    server: FakeProviderServer, api: str, mode: str, status: int
) -> None:
    """429 and 500 are retried by the SDK (max_retries=2: three HTTP requests) and then
    surface as ``ProviderError`` chained to the SDK's exception; our loop does not retry."""
    server.add(Fault.status(status), Fault.status(status), Fault.status(status), "{}")
    with pytest.raises(ProviderError) as info:
        run_agent(server, api, mode, invoice(), "edit", client={"max_retries": 2})
    assert info.value.status_code == status
    assert info.value.__cause__ is not None
    assert len(server.requests) == 3
    assert server.remaining == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_tool_call_mode(server: FakeProviderServer, api: str, mode: str) -> None:
    """In tool mode the request forces the change-request tool with a schema; the tool call's
    arguments are applied."""
    server.add(Reply.tool_call({"updateElements": {"notes": "paid"}}))
    result = run_agent(server, api, mode, invoice(), "mark paid", agent={"output_mode": "tool"})
    (request,) = server.requests
    assert request.output_mode == "tool"
    assert request.forced_tool == "apply_change_request"
    assert result.payload["notes"] == "paid"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_json_schema_mode(server: FakeProviderServer, api: str, mode: str) -> None:
    """Structured outputs: OpenAI requests carry a json_schema format (Chat and Responses),
    Anthropic falls back to a forced tool call; the reply is applied either way."""
    server.add(wire({"updateElements": {"notes": "paid"}}))
    result = run_agent(
        server,
        api,
        mode,
        invoice(),
        "mark paid",
        agent={"output_mode": "json_schema"},
        payload_type=Invoice,
    )
    expected = "tool" if api == "anthropic" else "json_schema"
    assert server.requests[0].output_mode == expected
    assert result.payload["notes"] == "paid"


@pytest.mark.parametrize("mode", MODES)
def test_refusal_then_success(server: FakeProviderServer, mode: str) -> None:
    """A provider refusal is answered with a correction once; the next reply is applied."""
    server.add(Reply.refusal(), wire({"updateElements": {"notes": "ok"}}))
    result = run_agent(server, "chat", mode, invoice(), "notes ok")
    assert result.payload["notes"] == "ok"
    assert "declined" in server.requests[1].last_user_text


@pytest.mark.slow
def test_200_concurrent_async_runs() -> None:
    """200 concurrent async runs against one fake server (the answer is a function of the
    request; every fifth run first gets a malformed reply) each end with their own payload."""

    def handler(request: FakeRequest) -> str:
        marker = request.text.split("RUN-")[1]
        number = int(marker[: len(marker) - len(marker.lstrip("0123456789"))])
        first_try = len(request.messages) <= 2
        if number % 5 == 0 and first_try:
            return "```json\n{not valid"
        return wire({"updateElements": {"value": number * 3}})

    fake = FakeProviderServer(handler=handler)

    async def main() -> list[AgentResult[dict[str, Any]]]:
        async with fake.openai_client(async_client=True, max_retries=0, timeout=60.0) as sdk:
            agent = AsyncPayloadAgent(sdk, model_name="gpt-test")
            return await asyncio.gather(
                *(agent.run({"id": f"RUN-{i}", "value": i}, "triple value") for i in range(200))
            )

    try:
        results = asyncio.run(main())
    finally:
        fake.close()
    assert [r.payload for r in results] == [{"id": f"RUN-{i}", "value": 3 * i} for i in range(200)]
    assert sum(r.attempts for r in results) == 200 + 40
    assert fake.errors == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_model_string_builds_client_from_environment(
    server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch, provider: str, mode: str
) -> None:
    """``"openai:MODEL"`` / ``"anthropic:MODEL"`` build the SDK client from the environment
    (API key and base URL), a sync one for PayloadAgent and an async one for
    AsyncPayloadAgent."""
    prefix = provider.upper()
    monkeypatch.setenv(f"{prefix}_API_KEY", "test")
    base = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    monkeypatch.setenv(f"{prefix}_BASE_URL", base)
    server.add(wire({"updateElements": {"notes": "env"}}))
    spec = f"{provider}:fake-model"
    if mode == "sync":
        sync_agent = PayloadAgent(spec)
        try:
            result = sync_agent.run(invoice(), "notes env")
        finally:
            sync_agent.model.client.close()  # type: ignore[attr-defined]
    else:

        async def main() -> AgentResult[Any]:
            async_agent = AsyncPayloadAgent(spec)
            try:
                return await async_agent.run(invoice(), "notes env")
            finally:
                await async_agent.model.client.close()  # type: ignore[attr-defined]

        result = asyncio.run(main())
    assert result.payload["notes"] == "env"
    assert server.requests[0].model_name == "fake-model"


def test_sync_agent_refuses_async_client_and_back() -> None:
    """A sync agent given an async SDK client (and the reverse) fails at construction, saying
    which agent to use."""
    with pytest.raises(ConfigurationError, match="use AsyncPayloadAgent"):
        PayloadAgent(openai.AsyncOpenAI(api_key="test"), model_name="gpt-test")
    with pytest.raises(ConfigurationError, match="use PayloadAgent"):
        AsyncPayloadAgent(anthropic.Anthropic(api_key="test"), model_name="claude-test")
