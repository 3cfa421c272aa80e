"""OpenTelemetry spans of agent runs, with the real SDKs against FakeProviderServer and the
OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent_payload.agent import AsyncPayloadAgent, PayloadAgent
from agent_payload.errors import RetriesExhaustedError
from agent_payload.testing import FakeProviderServer

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("openai")
pytest.importorskip("anthropic")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

_EXPORTER = InMemorySpanExporter()
NAME = "agent_payload"  # our instrumentation scope (the anthropic SDK traces its calls too)


@pytest.fixture(scope="module", autouse=True)
def _provider() -> Iterator[None]:
    provider = otel_sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    # the global provider can be set once per process: keep ours (the exporter is cleared per
    # test) and leave it in place for the rest of this worker's tests (they record nothing)
    trace.set_tracer_provider(provider)
    yield


@pytest.fixture
def spans() -> InMemorySpanExporter:
    _EXPORTER.clear()
    return _EXPORTER


def _wire(request: dict[str, Any]) -> str:
    return json.dumps(request)


PAYLOAD = {"lines": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}]}


def _agent(fake_server: FakeProviderServer, api: str, is_async: bool) -> Any:
    kind = AsyncPayloadAgent if is_async else PayloadAgent
    if api == "anthropic":
        client = fake_server.anthropic_client(async_client=is_async, max_retries=0)
        return kind(client, model_name="claude-test")
    client = fake_server.openai_client(async_client=is_async, max_retries=0)
    return kind(client, model_name="gpt-test")


def _run(agent: Any, *args: Any, **kwargs: Any) -> Any:
    """One run, its client closed after (sync or async)."""
    client = agent.model.client
    if isinstance(agent, AsyncPayloadAgent):

        async def go() -> Any:
            async with client:
                return await agent.run(*args, **kwargs)

        return asyncio.run(go())
    with client:
        return agent.run(*args, **kwargs)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_a_two_attempt_run_gives_a_run_span_and_two_attempt_spans(
    fake_server: FakeProviderServer, spans: InMemorySpanExporter, api: str, is_async: bool
) -> None:
    fake_server.add(
        _wire({"updateElements": {"lines": {"sku": "C"}}}),  # shape_mismatch: corrected
        _wire({"updateElements": {"lines": {"1": {"qty": 5}}}, "reasoning": "qty"}),
    )
    result = _run(_agent(fake_server, api, is_async), PAYLOAD, "set B's qty to 5", run_id="run-1")
    assert result.attempts == 2

    finished = [s for s in spans.get_finished_spans() if s.instrumentation_scope.name == NAME]
    (root,) = [s for s in finished if s.parent is None]
    attempts = sorted((s for s in finished if s.parent is not None), key=lambda s: s.start_time)
    sdk_spans = [s for s in spans.get_finished_spans() if s.instrumentation_scope.name != NAME]
    attempt_ids = {s.context.span_id for s in attempts}
    assert all(s.parent.span_id in attempt_ids for s in sdk_spans)  # an SDK's own spans nest
    assert len(attempts) == 2 and all(s.parent.span_id == root.context.span_id for s in attempts)
    system = "anthropic" if api == "anthropic" else "openai"
    model = "claude-test" if api == "anthropic" else "gpt-test"

    assert root.name == "invoke_agent agent_payload"
    a = root.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.system"] == system and a["gen_ai.request.model"] == model
    assert a["agent_payload.run_id"] == "run-1"
    assert a["agent_payload.attempts"] == 2
    assert a["agent_payload.outcome"] == "accepted"
    assert a["agent_payload.changes"] == 1
    assert list(a["agent_payload.conflict_codes"]) == ["shape_mismatch"]
    assert a["gen_ai.usage.input_tokens"] == result.usage.input_tokens > 0
    assert a["gen_ai.usage.output_tokens"] == result.usage.output_tokens > 0

    first, second = (s.attributes for s in attempts)
    assert attempts[0].name == f"chat {model}"
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.system"] == system
    assert first["agent_payload.outcome"] == "retry"
    assert list(first["agent_payload.conflict_codes"]) == ["shape_mismatch"]
    assert second["agent_payload.outcome"] == "accepted"
    assert first["gen_ai.usage.input_tokens"] + second["gen_ai.usage.input_tokens"] == (
        result.usage.input_tokens
    )
    assert "gen_ai.usage.cache_read.input_tokens" in second
    for span in spans.get_finished_spans():  # no content unless the application opts in
        assert not any("messages" in key for key in span.attributes)
        assert "qty" not in json.dumps(dict(span.attributes))


def test_content_only_when_the_application_opts_in(
    fake_server: FakeProviderServer, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    fake_server.add(_wire({"updateElements": {"lines": {"1": {"qty": 5}}}}))
    _run(_agent(fake_server, "chat", False), PAYLOAD, "set B's qty to 5")
    (attempt,) = [
        s for s in spans.get_finished_spans() if s.parent is not None and s.name == "chat gpt-test"
    ]
    assert '"qty": 5' in attempt.attributes["gen_ai.output.messages"]
    assert "set B's qty to 5" in attempt.attributes["gen_ai.input.messages"]


def test_a_failed_run_ends_its_spans_with_the_error(
    fake_server: FakeProviderServer, spans: InMemorySpanExporter
) -> None:
    fake_server.add(*["no json here"] * 3)
    agent = PayloadAgent(
        fake_server.openai_client(max_retries=0), model_name="gpt-test", max_retries=1
    )
    with pytest.raises(RetriesExhaustedError):
        _run(agent, PAYLOAD, "anything")
    finished = [s for s in spans.get_finished_spans() if s.instrumentation_scope.name == NAME]
    (root,) = [s for s in finished if s.parent is None]
    assert root.attributes["agent_payload.outcome"] == "error"
    assert root.attributes["error.type"] == "RetriesExhaustedError"
    assert root.status.status_code == trace.StatusCode.ERROR
    assert [s.attributes["agent_payload.outcome"] for s in finished if s.parent] == [
        "retry",
        "retry",
    ]
