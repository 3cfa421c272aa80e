"""``agent_payload.providers.infer_model``: from what the user has to a ``Model``."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import anthropic
import openai
import pytest

from agent_payload.errors import ConfigurationError
from agent_payload.providers import Model, close_client, infer_model
from agent_payload.providers.anthropic import AnthropicModel
from agent_payload.providers.base import Message, ModelRequest
from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel
from agent_payload.testing import FakeProviderServer, ScriptedModel

HELLO = ModelRequest(messages=(Message("user", "hello"),))


@pytest.fixture
def server(fake_server: FakeProviderServer) -> FakeProviderServer:
    return fake_server


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, server: FakeProviderServer) -> pytest.MonkeyPatch:
    """Keys and base URLs in the environment, aimed at the fake server."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    return monkeypatch


def test_a_model_is_returned_as_is() -> None:
    """A Model (here the scripted fake) passes through unchanged."""
    model = ScriptedModel(["{}"])
    assert infer_model(model) is model


@pytest.mark.parametrize(
    ("spec", "cls", "path"),
    [
        ("openai:gpt-4.1-mini", OpenAIChatModel, "/v1/chat/completions"),
        ("openai-responses:gpt-4.1", OpenAIResponsesModel, "/v1/responses"),
        ("anthropic:claude-sonnet-4-6", AnthropicModel, "/v1/messages"),
        ("gpt-4o", OpenAIChatModel, "/v1/chat/completions"),
        ("claude-haiku-4-5", AnthropicModel, "/v1/messages"),
    ],
)
def test_provider_strings_build_clients_from_the_environment(
    env: pytest.MonkeyPatch, server: FakeProviderServer, spec: str, cls: type, path: str
) -> None:
    """'provider:model' strings (and bare gpt-/claude- names) build the SDK client from the
    environment (API key and base URL, read by the SDK itself) and the right adapter."""
    server.add("hi")
    model = infer_model(spec, max_retries=0)
    assert isinstance(model, cls)
    assert model.model_name == spec.split(":")[-1]
    assert model.request(HELLO).text == "hi"
    assert server.requests[0].path == path
    key = "sk-ant-test" if cls is AnthropicModel else "sk-test"
    headers = server.requests[0].headers
    assert key in (headers.get("authorization", "") + headers.get("x-api-key", ""))
    close_client(model)  # the client built from the string is the caller's to close
    assert model.client.is_closed()  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", ["openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-6"])
def test_async_client_flag(env: pytest.MonkeyPatch, server: FakeProviderServer, spec: str) -> None:
    """async_client=True builds AsyncOpenAI / AsyncAnthropic; the model serves arequest."""
    server.add("async hi")
    model = infer_model(spec, async_client=True, max_retries=0)
    assert isinstance(model.client, openai.AsyncOpenAI | anthropic.AsyncAnthropic)  # type: ignore[attr-defined]
    close_client(model)  # an async client is closed in its own event loop, not here
    assert not model.client.is_closed()  # type: ignore[attr-defined]
    close_client(ScriptedModel([]))  # a model without a client: nothing to close

    async def go() -> str:
        try:
            return (await model.arequest(HELLO)).text
        finally:
            await model.client.close()  # type: ignore[attr-defined]

    assert asyncio.run(go()) == "async hi"


def test_missing_openai_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without OPENAI_API_KEY the error says which variable to set."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        infer_model("openai:gpt-4.1-mini")


def test_sdk_clients_with_a_name(server: FakeProviderServer) -> None:
    """An SDK client plus a model name is wrapped in the matching adapter (api= picks the
    OpenAI API)."""
    with server.openai_client() as oclient, server.anthropic_client() as aclient:
        assert isinstance(infer_model(oclient, "gpt-x"), OpenAIChatModel)
        assert isinstance(infer_model(oclient, "gpt-x", api="responses"), OpenAIResponsesModel)
        wrapped = infer_model(aclient, "claude-x")
        assert isinstance(wrapped, AnthropicModel)
        assert isinstance(wrapped, Model)
        with pytest.raises(ConfigurationError, match="model name"):
            infer_model(oclient)
        with pytest.raises(ConfigurationError, match="client options"):
            infer_model(oclient, "gpt-x", max_retries=3)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("mistral:large", "unknown provider 'mistral'"),
        ("llama3", "cannot tell the provider"),
        ("openai:", "is empty"),
    ],
)
def test_bad_strings(spec: str, message: str) -> None:
    """Unknown providers, bare names of unknown families and empty names are
    ConfigurationErrors that show how to write it."""
    with pytest.raises(ConfigurationError, match=message):
        infer_model(spec)


def test_other_objects_are_refused() -> None:
    """Anything else is a ConfigurationError naming the type received."""
    with pytest.raises(ConfigurationError, match=r"builtins\.int"):
        infer_model(42)
    with pytest.raises(ConfigurationError, match="already names the model"):
        infer_model("openai:gpt-x", "gpt-y")
    with pytest.raises(ConfigurationError, match="used as it is"):
        infer_model(ScriptedModel([]), "name")


@pytest.mark.slow
def test_core_works_without_the_sdks() -> None:
    """With neither SDK importable, testing/schema/providers import fine, and asking for an
    adapter is a ConfigurationError that says which extra to install."""
    code = """
import sys
sys.modules["openai"] = None
sys.modules["anthropic"] = None
import agent_payload.providers, agent_payload.schema, agent_payload.testing
from agent_payload.errors import ConfigurationError
from agent_payload.providers import infer_model
for spec, extra in (("openai:gpt-4.1-mini", "openai"), ("anthropic:claude-haiku-4-5", "anthropic")):
    try:
        infer_model(spec)
    except ConfigurationError as exc:
        assert f"pip install 'agent-payload[{extra}]'" in str(exc), exc
        assert isinstance(exc.__cause__, ImportError)
    else:
        raise AssertionError("no error")
assert "openai" not in [m for m in sys.modules if sys.modules[m] is not None]
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
