"""What the batch test modules (``test_batch.py``, ``test_batch_jobs.py``) share: the model's
two replies, sync adapters on fake-server SDK clients closed after each test, and the
``agent-payload batch`` command's items file and arguments."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_payload.providers.anthropic import AnthropicModel
from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel
from agent_payload.testing import FakeProviderServer

GOOD = '{"updateElements":{"price":20}}'
BROKEN = '{"updateElementz":{"price":20}}'  # a misspelt bucket: sent back, never applied

_clients: list[Any] = []


def close_clients() -> Iterator[None]:
    """An autouse fixture of each module (``pytest.fixture(autouse=True)(close_clients)``):
    closes the clients ``make_model`` opened during the test."""
    yield
    while _clients:
        _clients.pop().close()


def make_model(server: FakeProviderServer, api: str) -> Any:
    """A sync adapter (``chat``, ``responses`` or ``anthropic``) on a fresh SDK client."""
    if api == "anthropic":
        client = server.anthropic_client(max_retries=0)
        _clients.append(client)
        return AnthropicModel(client, "claude-fake")
    client = server.openai_client(max_retries=0)
    _clients.append(client)
    return (OpenAIResponsesModel if api == "responses" else OpenAIChatModel)(client, "gpt-fake")


def write_items(path: Path, items: Iterable[dict[str, Any]]) -> Path:
    """``items`` as a JSONL items file at ``path``."""
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def batch_argv(tmp: Path, inputs: Path, *more: str, model: str = "openai:gpt-fake") -> list[str]:
    """``agent-payload batch`` on ``inputs`` with ``tmp/s.sqlite`` and ``tmp/o.jsonl``."""
    state, out = str(tmp / "s.sqlite"), str(tmp / "o.jsonl")
    return ["batch", "--model", model, "--input", str(inputs), "--state", state, "-o", out, *more]


def use_server(monkeypatch: pytest.MonkeyPatch, server: FakeProviderServer) -> None:
    """The command line's OpenAI client talks to ``server``."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
