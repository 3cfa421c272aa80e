"""``FakeProviderServer`` streams: a request with ``"stream": true`` is answered with server-sent
events in its API's own format, read here by the real SDKs' streaming helpers (Chat Completions
``chat.completions.stream``, Responses ``responses.create(stream=True)`` / ``responses.stream``,
Anthropic ``messages.stream``), which must assemble the same reply as without streaming; faults
mid-stream fail the SDK's stream the way a broken provider does. Then the frameworks' own
streaming loops (the Agents SDK's ``Runner.run_streamed``, pydantic-ai's ``run_stream``, a
``messages.stream`` tool loop) apply a change request through the handler and end with the
scripted text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from agent_payload import ChangeRequestToolHandler
from agent_payload.testing import FakeProviderServer, Fault, Reply
from agent_payload.testing.script import CHUNK_CHARS

LONG = "A reply long enough to arrive in several pieces, one delta event each."
CHAT_TOOL = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}
RESPONSES_TOOL = {"type": "function", "name": "edit", "parameters": {"type": "object"}}
ANTHROPIC_TOOL = {"name": "edit", "input_schema": {"type": "object"}}
TWO_CALLS = Reply.tool_calls([{"a": 1}, Reply.tool_call({"b": "x" * 40}, name="other")])
CACHED = Reply.message(LONG, input_tokens=1000, output_tokens=20, cached_input_tokens=600)


@pytest.fixture
def oa(fake_server: FakeProviderServer) -> Iterator[Any]:
    """An OpenAI client on the fake server, without retries (closed after the test)."""
    with fake_server.openai_client(max_retries=0) as client:
        yield client


@pytest.fixture
def an(fake_server: FakeProviderServer) -> Iterator[Any]:
    """An Anthropic client on the fake server, without retries (closed after the test)."""
    with fake_server.anthropic_client(max_retries=0) as client:
        yield client


def chat(client: Any, **options: Any) -> Any:
    with client.chat.completions.stream(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], **options
    ) as stream:
        kinds = {event.type for event in stream}
        completion = stream.get_final_completion()
    return completion, kinds


# --- Chat Completions --------------------------------------------------------------------------


def test_chat_stream_text_in_pieces_with_a_usage_chunk(
    fake_server: FakeProviderServer, oa: Any
) -> None:
    """The SDK's helper assembles the text from content deltas; with include_usage the usage
    chunk carries the same usage as the plain answer (cached tokens included)."""
    fake_server.reset([CACHED, CACHED])
    client = oa
    completion, kinds = chat(client, stream_options={"include_usage": True})
    plain = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}]
    )
    assert "content.delta" in kinds
    assert completion.choices[0].message.content == LONG
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.model_dump() == plain.usage.model_dump()
    assert completion.usage.prompt_tokens_details.cached_tokens == 600
    raw = fake_server.requests[0]
    assert raw.body["stream"] is True and raw.stream


def test_chat_stream_raw_chunks(fake_server: FakeProviderServer, oa: Any) -> None:
    """The chunks themselves: a role chunk, content deltas of ``CHUNK_CHARS``, a finish chunk,
    no usage chunk unless asked for."""
    fake_server.reset([LONG])
    client = oa
    chunks = list(
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks[1:-1]]
    assert "".join(pieces) == LONG and max(map(len, pieces)) == CHUNK_CHARS
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)


def test_chat_stream_several_tool_calls_by_index(fake_server: FakeProviderServer, oa: Any) -> None:
    """Two calls in one response, each announced (id, name) then its arguments in pieces,
    told apart by index."""
    fake_server.reset([TWO_CALLS])
    completion, kinds = chat(oa, tools=[CHAT_TOOL])
    calls = completion.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("edit", {"a": 1}),
        ("other", {"b": "x" * 40}),
    ]
    assert len({c.id for c in calls}) == 2
    assert completion.choices[0].finish_reason == "tool_calls"
    assert "tool_calls.function.arguments.delta" in kinds


def test_chat_stream_refusal_and_truncation(fake_server: FakeProviderServer, oa: Any) -> None:
    """A refusal arrives as refusal deltas; a truncated reply ends with finish_reason
    "length"."""
    fake_server.reset([Reply.refusal("No."), Reply.truncated("cut he")])
    client = oa
    completion, kinds = chat(client)
    assert completion.choices[0].message.refusal == "No."
    assert "refusal.delta" in kinds
    chunks = list(
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert chunks[-1].choices[0].finish_reason == "length"
    # the SDK's helper refuses a completion cut by the limit, as with OpenAI itself
    fake_server.add(Reply.truncated("cut he"))
    with pytest.raises(openai.LengthFinishReasonError):
        chat(client)


# --- Responses ---------------------------------------------------------------------------------


def responses_events(client: Any, **options: Any) -> list[Any]:
    return list(client.responses.create(model="gpt-test", input="hi", stream=True, **options))


def test_responses_stream_text_events(fake_server: FakeProviderServer, oa: Any) -> None:
    """The Responses events in their order, numbered; the helper's final response has the
    text and the usage (cached tokens included)."""
    fake_server.reset([CACHED, CACHED])
    client = oa
    events = responses_events(client)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == LONG and len(deltas) > 1
    with client.responses.stream(model="gpt-test", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == LONG
    assert final.usage.input_tokens_details.cached_tokens == 600
    assert final.usage.input_tokens == 1000


def test_responses_stream_function_calls(fake_server: FakeProviderServer, oa: Any) -> None:
    """Two function_call items, each with argument deltas and a done event, gathered by the
    helper."""
    fake_server.reset([TWO_CALLS, TWO_CALLS])
    client = oa
    events = responses_events(client, tools=[RESPONSES_TOOL])
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(e.arguments) for e in done] == [{"a": 1}, {"b": "x" * 40}]
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert {e.output_index for e in deltas} == {0, 1}
    with client.responses.stream(model="gpt-test", input="hi", tools=[RESPONSES_TOOL]) as stream:
        final = stream.get_final_response()
    assert [(i.name, i.arguments) for i in final.output] == [
        ("edit", '{"a": 1}'),
        ("other", json.dumps({"b": "x" * 40})),
    ]


def test_responses_stream_refusal_and_incomplete(fake_server: FakeProviderServer, oa: Any) -> None:
    """A refusal arrives as refusal events; a truncated reply ends with response.incomplete
    (max_output_tokens)."""
    fake_server.reset([Reply.refusal("No."), Reply.truncated("cut he")])
    client = oa
    events = responses_events(client)
    assert [e.delta for e in events if e.type == "response.refusal.delta"] == ["No."]
    assert [e.refusal for e in events if e.type == "response.refusal.done"] == ["No."]
    assert events[-1].response.output[0].content[0].refusal == "No."
    events = responses_events(client)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert events[-1].response.output_text == "cut he"


# --- Anthropic Messages ------------------------------------------------------------------------


def anthropic_stream(client: Any, **options: Any) -> tuple[Any, list[str]]:
    with client.messages.stream(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "hi"}], **options
    ) as stream:
        kinds = [event.type for event in stream]
        return stream.get_final_message(), kinds


def test_anthropic_stream_text_and_usage(fake_server: FakeProviderServer, an: Any) -> None:
    """message_start to message_stop; the assembled message has the text, the stop reason
    and the plain answer's usage (cache reads included)."""
    fake_server.reset([CACHED, CACHED])
    client = an
    message, kinds = anthropic_stream(client)
    plain = client.messages.create(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "text" in kinds and "message_delta" in kinds
    assert message.content[0].text == LONG
    assert message.stop_reason == "end_turn"
    assert message.usage.model_dump() == plain.usage.model_dump()
    assert message.usage.cache_read_input_tokens == 600


def test_anthropic_stream_tool_use_blocks(fake_server: FakeProviderServer, an: Any) -> None:
    """Two tool_use blocks, each input arriving as input_json_delta pieces."""
    fake_server.reset([TWO_CALLS])
    message, kinds = anthropic_stream(an, tools=[ANTHROPIC_TOOL])
    assert [(b.name, b.input) for b in message.content] == [
        ("edit", {"a": 1}),
        ("other", {"b": "x" * 40}),
    ]
    assert message.stop_reason == "tool_use"
    assert "input_json" in kinds


def test_anthropic_stream_refusal_and_max_tokens(fake_server: FakeProviderServer, an: Any) -> None:
    """stop_reason "refusal" with its stop_details; "max_tokens" for a truncated reply."""
    fake_server.reset([Reply.refusal("No."), Reply.truncated("cut he")])
    client = an
    message, _ = anthropic_stream(client)
    assert (message.stop_reason, message.stop_details.explanation) == ("refusal", "No.")
    message, _ = anthropic_stream(client)
    assert (message.stop_reason, message.content[0].text) == ("max_tokens", "cut he")


# --- faults mid-stream ---------------------------------------------------------------------------


def test_a_cut_stream_is_a_connection_error_in_each_sdk(
    fake_server: FakeProviderServer, oa: Any, an: Any
) -> None:
    """A connection reset after a few events is each SDK's connection error, raised while
    reading."""
    fake_server.reset([Fault.stream_cut(3, then=LONG)] * 3)
    client = oa
    with pytest.raises(openai.APIConnectionError):
        chat(client)
    with pytest.raises(openai.APIConnectionError):
        responses_events(client)
    with pytest.raises(anthropic.APIConnectionError):
        anthropic_stream(an)
    assert len(fake_server.requests) == 3  # a stream that began is never retried by the SDK


def test_an_error_event_mid_stream(fake_server: FakeProviderServer, oa: Any, an: Any) -> None:
    """Each API's error event: the Chat SDK and the Anthropic SDK raise it, the Responses
    stream hands it over as an event."""
    fake_server.reset([Fault.stream_error(2, message="overloaded", then=LONG)] * 3)
    client = oa
    with pytest.raises(openai.APIError, match="overloaded"):
        chat(client)
    events = responses_events(client)
    assert [e.type for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1].message == "overloaded"
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
        anthropic_stream(an)


def test_stream_faults_on_a_request_that_does_not_stream(
    fake_server: FakeProviderServer, oa: Any
) -> None:
    """Without streaming, stream_cut is a reset and stream_error an HTTP 500."""
    fake_server.reset([Fault.stream_cut(), Fault.stream_error(message="down")])
    client = oa
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="gpt-test", messages=messages)
    with pytest.raises(openai.InternalServerError, match="down"):
        client.chat.completions.create(model="gpt-test", messages=messages)


# --- the frameworks' streaming loops (issue 31's acceptance) -----------------------------------

slow = pytest.mark.slow  # imports an agent framework (1-4 s the first time)

WRONG = Reply.tool_call({"updateElements": {"lines": {"5": {"qty": 3}}}})
RIGHT = Reply.tool_call({"updateElements": {"lines": {"1": {"qty": 3}}}, "reasoning": "3 of B"})
TASK = "Make it three of B"
INVOICE = {"number": "INV-7", "lines": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}]}
DONE = "Done: three of B."


def assert_applied(h: ChangeRequestToolHandler, server: FakeProviderServer) -> None:
    assert h.payload["lines"][1]["qty"] == 3
    assert h.payload["lines"][0] == {"sku": "A", "qty": 1}
    assert all(r.stream for r in server.requests)
    assert server.errors == []


@slow
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_openai_agents_run_streamed(fake_server: FakeProviderServer, api: str) -> None:
    """Runner.run_streamed over either OpenAI API: the wrong call is sent back, the right
    one applied, the run ends with the scripted text."""
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, RunConfig, Runner

    from agent_payload.integrations.openai_agents import change_request_tool

    fake_server.reset([WRONG, RIGHT, DONE])
    h = ChangeRequestToolHandler(INVOICE)
    model_cls = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel

    async def run() -> tuple[Any, list[str]]:
        async with fake_server.openai_client(async_client=True) as client:
            agent = Agent(
                name="editor",
                instructions="Edit the invoice.",
                tools=[change_request_tool(h)],
                model=model_cls(model="gpt-test", openai_client=client),
            )
            result = Runner.run_streamed(agent, TASK, run_config=RunConfig(tracing_disabled=True))
            kinds = [event.type async for event in result.stream_events()]
            return result, kinds

    result, kinds = asyncio.run(run())
    assert result.final_output == DONE
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert [r.is_error for r in h.results] == [True, False]
    assert_applied(h, fake_server)


@slow
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_pydantic_ai_run_stream(fake_server: FakeProviderServer, api: str) -> None:
    """agent.run_stream over either OpenAI API: the change applied through the tool, the
    streamed output ends with the scripted text."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from agent_payload.integrations.pydantic_ai import change_request_tool

    fake_server.reset([WRONG, RIGHT, DONE])
    h = ChangeRequestToolHandler(INVOICE)
    model_cls = OpenAIChatModel if api == "chat" else OpenAIResponsesModel

    async def run() -> tuple[str, list[str]]:
        async with fake_server.openai_client(async_client=True) as client:
            model = model_cls("gpt-test", provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, tools=[change_request_tool(h)])
            async with agent.run_stream(TASK) as result:
                texts = [text async for text in result.stream_output(debounce_by=None)]
                return await result.get_output(), texts

    output, texts = asyncio.run(run())
    assert output == DONE and texts[-1] == DONE
    assert [r.is_error for r in h.results] == [True, False]
    assert_applied(h, fake_server)


def anthropic_tool_loop(
    client: Any, h: ChangeRequestToolHandler, messages: list[Any]
) -> tuple[Any, list[str]]:
    """A ``messages.stream`` tool loop: each turn streamed, its tool_use blocks handled."""
    texts: list[str] = []
    for _ in range(5):
        with client.messages.stream(
            model="claude-test", max_tokens=1024, messages=messages, tools=[h.anthropic_tool()]
        ) as stream:
            texts += list(stream.text_stream)
            message = stream.get_final_message()
        uses = [block for block in message.content if block.type == "tool_use"]
        if not uses:
            return message, texts
        messages.append({"role": "assistant", "content": [b.model_dump() for b in uses]})
        results = [h.handle(b.input).anthropic_block(b.id) for b in uses]
        messages.append({"role": "user", "content": results})
    raise AssertionError("the loop did not end")


def test_anthropic_messages_stream_tool_loop(fake_server: FakeProviderServer, an: Any) -> None:
    """A loop of messages.stream turns: tool_use blocks handled, results sent back, the last
    turn's text streamed."""
    fake_server.reset([WRONG, RIGHT, DONE])
    h = ChangeRequestToolHandler(INVOICE)
    client = an
    message, texts = anthropic_tool_loop(client, h, [{"role": "user", "content": TASK}])
    assert message.content[0].text == DONE and "".join(texts) == DONE
    assert [r.is_error for r in h.results] == [True, False]
    assert_applied(h, fake_server)


def test_anthropic_stream_cut_mid_tool_call_applies_nothing(
    fake_server: FakeProviderServer, an: Any
) -> None:
    """The tool call's stream is cut after its first argument pieces: the SDK raises, the handler
    never sees the half call, and the turn asked again applies it whole."""
    fake_server.reset([Fault.stream_cut(5, then=RIGHT), RIGHT, DONE])
    h = ChangeRequestToolHandler(INVOICE)
    client = an
    messages: list[Any] = [{"role": "user", "content": TASK}]
    with pytest.raises(anthropic.APIConnectionError):
        anthropic_tool_loop(client, h, messages)
    assert h.payload == INVOICE and h.results == []
    message, _ = anthropic_tool_loop(client, h, messages)
    assert message.content[0].text == DONE
    assert [r.is_error for r in h.results] == [False]
    assert_applied(h, fake_server)


@slow
def test_openai_agents_run_streamed_cut_mid_stream(fake_server: FakeProviderServer) -> None:
    """A stream cut while the model writes its tool call ends the run with the SDK's
    connection error; the payload is untouched."""
    from agents import Agent, OpenAIResponsesModel, RunConfig, Runner

    from agent_payload.integrations.openai_agents import change_request_tool

    fake_server.reset([Fault.stream_cut(4, then=RIGHT)])
    h = ChangeRequestToolHandler(INVOICE)

    async def run() -> None:
        async with fake_server.openai_client(async_client=True, max_retries=0) as client:
            agent = Agent(
                name="editor",
                tools=[change_request_tool(h)],
                model=OpenAIResponsesModel(model="gpt-test", openai_client=client),
            )
            result = Runner.run_streamed(agent, TASK, run_config=RunConfig(tracing_disabled=True))
            async for _ in result.stream_events():
                pass

    with pytest.raises(openai.APIConnectionError):
        asyncio.run(run())
    assert h.payload == INVOICE and h.results == []


@slow
def test_pydantic_ai_run_stream_error_event_mid_stream(fake_server: FakeProviderServer) -> None:
    """The API's error event in the middle of the tool call: pydantic-ai raises its
    ModelHTTPError with the event's error, the handler never sees the half call."""
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from agent_payload.integrations.pydantic_ai import change_request_tool

    fake_server.reset([Fault.stream_error(4, message="overloaded", then=RIGHT)])
    h = ChangeRequestToolHandler(INVOICE)

    async def run() -> str:
        async with fake_server.openai_client(async_client=True, max_retries=0) as client:
            model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, tools=[change_request_tool(h)])
            async with agent.run_stream(TASK) as result:
                return await result.get_output()

    with pytest.raises(ModelHTTPError, match="overloaded"):
        asyncio.run(run())
    assert h.payload == INVOICE and h.results == []
