"""``PayloadAgent(stream=True)`` / ``AsyncPayloadAgent(stream=True)``: the adapters stream the
reply through the real SDKs (Chat Completions, Responses, Anthropic Messages) from
``FakeProviderServer``, assemble the same ``ModelReply`` as without streaming, tell
``on_progress`` as the pieces arrive, and judge the reply only when it is whole; a stream that
breaks off is a retryable ``ProviderError`` with the payload untouched."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import pytest

from agent_payload import AsyncPayloadAgent, ConfigurationError, PayloadAgent, ProviderError
from agent_payload.agent import Hooks
from agent_payload.providers.anthropic import AnthropicModel
from agent_payload.providers.base import ModelReply, ToolSpec
from agent_payload.providers.openai import OpenAIChatModel, OpenAIResponsesModel
from agent_payload.testing import FakeProviderServer, Fault, Reply, ScriptedModel
from agent_payload.testing.script import CHUNK_CHARS
from tests._provider_helpers import ask

APIS = ["chat", "responses", "anthropic"]
PAYLOAD = {"name": "Bob", "tags": ["a", "b"]}
GOOD = '{"updateElements": {"name": "Ada Lovelace, Countess of Lovelace"}}'
BAD = '{"updateElements": {"tags": {"7": "z"}}}'  # index 7 is out of range: sent back


@pytest.fixture
def server(fake_server: FakeProviderServer) -> Iterator[FakeProviderServer]:
    yield fake_server
    assert fake_server.errors == [], "the fake server's script went wrong"


def client_for(server: FakeProviderServer, api: str, *, async_client: bool = False) -> Any:
    if api == "anthropic":
        return server.anthropic_client(async_client=async_client, max_retries=0)
    return server.openai_client(async_client=async_client, max_retries=0)


def agent_options(api: str) -> dict[str, Any]:
    if api == "anthropic":
        return {"model_name": "claude-test"}
    return {"model_name": "gpt-test", "api": api}


def model_for(client: Any, api: str) -> Any:
    if api == "anthropic":
        return AnthropicModel(client, "claude-test")
    cls = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    return cls(client, "gpt-test")


def run_sync(server: FakeProviderServer, api: str, **options: Any) -> Any:
    with client_for(server, api) as client:
        agent = PayloadAgent(client, **agent_options(api), **options)
        return agent.run(copy.deepcopy(PAYLOAD), "Rename Bob")


def run_async(server: FakeProviderServer, api: str, **options: Any) -> Any:
    async def run() -> Any:
        async with client_for(server, api, async_client=True) as client:
            agent = AsyncPayloadAgent(client, **agent_options(api), **options)
            return await agent.run(copy.deepcopy(PAYLOAD), "Rename Bob")

    return asyncio.run(run())


RUNS = {"sync": run_sync, "async": run_async}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("output_mode", ["text", "tool"])
def test_a_streamed_run_corrects_and_reports_progress(
    server: FakeProviderServer, api: str, mode: str, output_mode: str
) -> None:
    """Two attempts streamed (the first sent back): the same result as without streaming, and
    on_progress heard every piece of each attempt, counting up to the reply's length."""
    script = [Reply.message(BAD), Reply.message(GOOD, cached_input_tokens=3)]
    if output_mode == "tool":
        script = [Reply.tool_call(BAD), Reply.tool_call(GOOD, cached_input_tokens=3)]
    progress: list[tuple[int, int]] = []

    def on_progress(attempt: int, characters: int) -> None:
        progress.append((attempt, characters))

    async def on_progress_async(attempt: int, characters: int) -> None:
        await asyncio.sleep(0)
        progress.append((attempt, characters))

    hook = on_progress_async if mode == "async" else on_progress
    server.reset(script)
    streamed = RUNS[mode](server, api, stream=True, on_progress=hook, output_mode=output_mode)
    assert all(r.stream for r in server.requests)
    server.reset(script)
    plain = RUNS[mode](server, api, output_mode=output_mode)
    assert all("stream" not in r.body for r in server.requests)

    assert (
        streamed.payload
        == plain.payload
        == {**PAYLOAD, "name": "Ada Lovelace, Countess of Lovelace"}
    )
    assert streamed.attempts == plain.attempts == 2
    assert streamed.usage == plain.usage
    assert streamed.usage.cached_input_tokens == 3
    for attempt, reply in ((1, BAD), (2, GOOD)):
        counts = [n for a, n in progress if a == attempt]
        expected = [*range(CHUNK_CHARS, len(reply), CHUNK_CHARS), len(reply)]
        assert counts == expected


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "reply",
    [
        Reply.message(GOOD, input_tokens=50, output_tokens=9, cached_input_tokens=20),
        Reply.tool_call(GOOD, cache_write_input_tokens=7),
        Reply.tool_calls([Reply.tool_call({"path": "tags"}, name="read_payload"), GOOD]),
        Reply.refusal("I won't."),
        Reply.truncated('{"updateElements": {"na'),
        Reply.truncated('{"updateElements": {"na', kind="tool_call"),
    ],
    ids=["text", "tool", "tool_calls", "refusal", "truncated", "truncated_tool"],
)
def test_the_streamed_reply_is_the_reply(
    server: FakeProviderServer, api: str, reply: Reply
) -> None:
    """``stream_request`` assembles the ``ModelReply`` that ``request`` parses: text, tool calls
    (several), finish reason, truncation, refusal, usage with cached tokens, model name."""
    tools = (ToolSpec("read_payload", "Read a part.", {"type": "object"}),)
    output_mode = "text" if reply.kind in ("text", "refusal", "auto") else "tool"
    request = ask(output_mode, tools=tools if reply.calls else ())
    server.reset([reply, reply])
    with client_for(server, api) as client:
        model = model_for(client, api)
        plain: ModelReply = model.request(request)
        streamed: ModelReply = model.stream_request(request)

    def seen(r: ModelReply) -> tuple[Any, ...]:
        calls = [(c.name, c.arguments) for c in r.tool_calls]
        return (r.text, calls, r.finish_reason, r.truncated, r.refusal, r.usage, r.model_name)

    assert seen(streamed) == seen(plain)
    assert streamed.raw is not None


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "fault",
    [Fault.stream_cut(4, then=GOOD), Fault.stream_error(4, message="overloaded", then=GOOD)],
    ids=["cut", "error_event"],
)
def test_a_broken_stream_is_a_retryable_provider_error(
    server: FakeProviderServer, api: str, mode: str, fault: Fault
) -> None:
    """Whatever arrived before the break is not used: the run fails with a retryable
    ProviderError (the SDK never retries a stream that began), on_error is told, the caller's
    payload is untouched."""
    server.reset([fault])
    errors: list[BaseException] = []
    before = copy.deepcopy(PAYLOAD)
    with pytest.raises(ProviderError, match="streamed reply broke off after") as caught:
        RUNS[mode](server, api, stream=True, on_error=lambda exc, n: errors.append(exc))
    assert caught.value.retryable is True
    assert errors == [caught.value]
    assert len(server.requests) == 1
    assert before == PAYLOAD


@pytest.mark.parametrize("api", APIS)
def test_a_stream_that_ends_early_is_a_retryable_provider_error(
    server: FakeProviderServer, api: str
) -> None:
    """A stream closed cleanly before its last event (no finish_reason, no
    response.completed, no message_stop) is as broken as a cut one."""
    server.reset([Fault.stream_cut(6, then=GOOD, clean=True)])
    with client_for(server, api) as client:
        model = model_for(client, api)
        with pytest.raises(ProviderError, match="broke off") as caught:
            model.stream_request(ask())
    assert caught.value.retryable is True


def test_the_next_run_after_a_broken_stream_applies_the_change(server: FakeProviderServer) -> None:
    """A broken stream leaves nothing behind: the next run applies the change whole."""
    server.reset([Fault.stream_cut(4, then=GOOD), GOOD])
    with pytest.raises(ProviderError):
        run_sync(server, "chat", stream=True)
    result = run_sync(server, "chat", stream=True)
    assert result.payload["name"] == "Ada Lovelace, Countess of Lovelace"


class _NoStreaming:
    """A model of one's own that does not stream."""

    model_name = "mine"
    provider = "mine"

    def request(self, request: Any) -> ModelReply:
        return ModelReply(GOOD)


def test_stream_option_is_checked() -> None:
    """stream must be a bool, and the model able to stream; the sync agent refuses an async
    on_progress."""
    with pytest.raises(ConfigurationError, match="stream: expected True or False"):
        PayloadAgent(ScriptedModel([GOOD]), stream="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"cannot stream.*no stream_request\(\)"):
        PayloadAgent(_NoStreaming(), stream=True)
    assert PayloadAgent(_NoStreaming()).run(PAYLOAD, "Rename").payload["name"].startswith("Ada")

    async def hook(attempt: int, characters: int) -> None:
        return None

    with (
        FakeProviderServer() as fake,
        fake.openai_client() as client,
        pytest.raises(ConfigurationError, match="on_progress"),
    ):
        PayloadAgent(client, model_name="gpt-test", stream=True, on_progress=hook)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_scripted_model_streams_offline(mode: str) -> None:
    """``ScriptedModel`` streams too (no HTTP): on_progress hears each piece of each reply."""
    progress: list[tuple[int, int]] = []
    model = ScriptedModel([BAD, GOOD])
    if mode == "sync":
        agent = PayloadAgent(model, stream=True, on_progress=lambda a, n: progress.append((a, n)))
        result = agent.run(PAYLOAD, "Rename Bob")
    else:

        async def hook(attempt: int, characters: int) -> None:
            progress.append((attempt, characters))

        result = asyncio.run(
            AsyncPayloadAgent(model, stream=True, on_progress=hook).run(PAYLOAD, "Rename Bob")
        )
    assert result.attempts == 2
    assert progress[-1] == (2, len(GOOD))
    assert [n for a, n in progress if a == 1] == [16, 32, len(BAD)]


@pytest.mark.slow  # about 2 s each: the server is slow on purpose
@pytest.mark.parametrize("api", APIS)
def test_a_slow_server_streams_within_the_read_timeout(
    server: FakeProviderServer, api: str
) -> None:
    """A server that takes longer than the client's read timeout for the whole reply (its
    events 0.1 s apart, about a second in all, against a 0.5 s timeout) fails the request
    without streaming and answers it with streaming: each event arrives well within the timeout."""
    server.reset([Fault.trickle(0.1, then=GOOD)] * 2)
    if api == "anthropic":
        client = server.anthropic_client(max_retries=0, timeout=0.5)
    else:
        client = server.openai_client(max_retries=0, timeout=0.5)
    with client:
        with pytest.raises(ProviderError, match="timed out"):
            PayloadAgent(client, **agent_options(api)).run(PAYLOAD, "Rename Bob")
        progress: list[int] = []
        agent = PayloadAgent(
            client, **agent_options(api), stream=True, on_progress=lambda a, n: progress.append(n)
        )
        result = agent.run(PAYLOAD, "Rename Bob")
    assert result.payload["name"] == "Ada Lovelace, Countess of Lovelace"
    assert progress[-1] == len(GOOD)


@pytest.mark.parametrize("api", APIS)
def test_outline_mode_reads_are_streamed_too(server: FakeProviderServer, api: str) -> None:
    """A payload over the budget: the outline, a read (a streamed tool call of read_payload,
    answered), then the change request, all streamed; on_progress hears both requests."""
    payload = {"lines": [{"sku": f"SKU-{i:04d}", "note": "x" * 80} for i in range(400)]}
    change = '{"updateElements": {"lines": {"250": {"sku": "NEW"}}}}'
    server.reset([Reply.read_payload("lines[250]"), change])
    progress: list[int] = []
    with client_for(server, api) as client:
        agent = PayloadAgent(
            client,
            **agent_options(api),
            stream=True,
            max_payload_tokens=2_000,
            on_progress=lambda attempt, characters: progress.append(characters),
        )
        result = agent.run(payload, "Rename line 250 to NEW")
    assert result.payload["lines"][250]["sku"] == "NEW"
    assert result.outlined and result.reads == 1
    assert [r.stream for r in server.requests] == [True, True]
    assert "SKU-0250" in server.requests[1].text  # the read was answered
    assert progress[-1] == len(change)


def test_a_runs_own_hooks_hear_the_progress_too() -> None:
    """``run(hooks=Hooks(on_progress=...))``: called after the agent's own, per piece."""
    heard: list[str] = []
    agent = PayloadAgent(
        ScriptedModel([GOOD]), stream=True, on_progress=lambda a, n: heard.append(f"agent {n}")
    )
    agent.run(PAYLOAD, "Rename", hooks=Hooks(on_progress=lambda a, n: heard.append(f"run {n}")))
    assert heard[:4] == ["agent 16", "run 16", "agent 32", "run 32"]
    assert heard[-1] == f"run {len(GOOD)}"
