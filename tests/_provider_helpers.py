"""Helpers shared by the provider adapter tests (``test_providers_openai.py``,
``test_providers_anthropic.py``): the request they send and the fake server they talk to."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent_payload.providers.base import Message, ModelRequest
from agent_payload.schema import change_request_schema
from agent_payload.testing import FakeProviderServer

MODES = ["sync", "async"]
SCHEMA = change_request_schema(None)


def ask(output_mode: str = "text", **kwargs: Any) -> ModelRequest:
    messages = (Message("system", "You edit payloads."), Message("user", "Rename Bob to Ada."))
    schema = SCHEMA if output_mode != "text" else None
    return ModelRequest(messages=messages, output_mode=output_mode, schema=schema, **kwargs)  # type: ignore[arg-type]


def checked_server(fake_server: FakeProviderServer) -> Iterator[FakeProviderServer]:
    """The body of each test module's ``server`` fixture
    (``server = pytest.fixture(checked_server, name="server")``): the session's fake server
    with an empty script (the ``fake_server`` fixture), whose script must have run without
    errors."""
    yield fake_server
    assert fake_server.errors == [], "the fake server's script went wrong"
