"""The change request as a tool in the OpenAI Agents SDK, pydantic-ai and LangChain/LangGraph.

Each framework drives its own loop against ``FakeProviderServer`` through the real OpenAI
client: the model's first call addresses an element beyond the end of the array (the handler
refuses it), the framework sends the handler's text back, the second call is right. The tests
check the final payload, that the refusal's text reached the second request, that the tool's
schema is the handler's, and that the refusal is marked as an error where the framework can.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload import ChangeRequestToolHandler, ConfigurationError
from agent_payload.testing import FakeProviderServer, Reply

# Each test imports an agent framework (1-4 s the first time in a process): `make quick` skips them.
pytestmark = pytest.mark.slow


class Line(BaseModel):
    sku: str
    qty: int


class Invoice(BaseModel):
    number: str
    lines: list[Line]


WRONG = Reply.tool_call({"updateElements": {"lines": {"5": {"qty": 3}}}})
RIGHT = Reply.tool_call({"updateElements": {"lines": {"1": {"qty": 3}}}, "reasoning": "3 of B"})
TASK = "Make it three of B"


def invoice() -> Invoice:
    return Invoice(number="INV-7", lines=[Line(sku="A", qty=1), Line(sku="B", qty=2)])


def handler() -> ChangeRequestToolHandler:
    return ChangeRequestToolHandler(invoice())


@pytest.fixture
def server(fake_server: FakeProviderServer) -> Iterator[FakeProviderServer]:
    fake_server.reset([WRONG, RIGHT, "Done: three of B."])
    yield fake_server
    assert fake_server.errors == [], "the fake server's script went wrong"


def schema_of(h: ChangeRequestToolHandler) -> dict[str, Any]:
    parameters: dict[str, Any] = h.openai_tool()["function"]["parameters"]
    return parameters


def inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its (non-recursive) ``$ref``s replaced by their ``$defs`` and without
    ``title`` keywords (the payload model here has no field named title)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return walk(defs[node["$ref"].rsplit("/", 1)[1]])
        return {k: walk(v) for k, v in node.items() if k not in ("title", "$defs")}

    result: dict[str, Any] = walk(schema)
    return result


def tool_outputs(server: FakeProviderServer, index: int) -> list[str]:
    """The tool results (texts) in request ``index``, in either OpenAI API's shape."""
    body = server.requests[index].body
    if "messages" in body:
        return [m["content"] for m in body["messages"] if m.get("role") == "tool"]
    return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]


def assert_loop_went_right(h: ChangeRequestToolHandler, server: FakeProviderServer) -> None:
    assert h.payload == Invoice(number="INV-7", lines=[Line(sku="A", qty=1), Line(sku="B", qty=3)])
    assert [r.is_error for r in h.results] == [True, False]
    refusal = h.results[0].content
    assert "index_out_of_range" in refusal and "nothing in it was applied" in refusal
    assert len(server.requests) == 3
    assert tool_outputs(server, 0) == []
    # The handler's refusal, whole, is the tool result the second request carries.
    (second,) = tool_outputs(server, 1)
    assert refusal in (second if second.startswith("Your") else json.loads(second)["error"])
    assert tool_outputs(server, 2)[-1].startswith(h.results[1].content)


def without_module(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``import name`` (and its submodules) fail as if the package were not installed."""
    for module in list(sys.modules):
        if module == name or module.startswith(name + "."):
            monkeypatch.delitem(sys.modules, module)
    real_import = builtins.__import__

    def fake_import(module: str, *args: Any, **kwargs: Any) -> Any:
        if module == name or module.startswith(name + "."):
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        return real_import(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr(
        "importlib.import_module",
        lambda module, package=None: fake_import(module),
    )


# --- OpenAI Agents SDK -------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_openai_agents_runner_corrects_a_wrong_call(server: FakeProviderServer, api: str) -> None:
    from agents import (
        Agent,
        FunctionTool,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
    )

    from agent_payload.integrations.openai_agents import change_request_tool

    h = handler()
    tool = change_request_tool(h)
    assert isinstance(tool, FunctionTool)
    assert tool.name == "apply_change_request"
    assert tool.params_json_schema == schema_of(h)
    assert tool.strict_json_schema is False
    model_cls = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel

    async def run() -> Any:
        async with server.openai_client(async_client=True) as client:
            agent = Agent(
                name="editor",
                instructions="Edit the invoice.",
                tools=[tool],
                model=model_cls(model="gpt-test", openai_client=client),
            )
            return await Runner.run(agent, TASK, run_config=RunConfig(tracing_disabled=True))

    result = asyncio.run(run())
    assert result.final_output == "Done: three of B."
    assert_loop_went_right(h, server)
    sent = server.requests[0].body["tools"][0]
    assert (sent.get("parameters") or sent["function"]["parameters"]) == schema_of(h)


# --- pydantic-ai --------------------------------------------------------------------------------


def run_pydantic_ai(server: FakeProviderServer, tools: list[Any], **kwargs: Any) -> Any:
    """Run a pydantic-ai agent with ``tools`` on the fake server (its client closed after)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    deps_type = type(kwargs["deps"]) if "deps" in kwargs else type(None)

    async def run() -> Any:
        async with server.openai_client(async_client=True) as client:
            model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, tools=tools, deps_type=deps_type)
            return await agent.run(TASK, **kwargs)

    return asyncio.run(run())


def assert_marked_as_retry(messages: list[Any], refusal: str) -> None:
    """The refusal is a tool return marked ``retried`` (pydantic-ai's ModelRetry), the good call
    a ``success``."""
    from pydantic_ai.messages import ToolReturnPart

    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_name, p.outcome) for p in returns] == [
        ("apply_change_request", "retried"),
        ("apply_change_request", "success"),
    ]
    assert returns[0].content == refusal


def test_pydantic_ai_agent_corrects_a_wrong_call(server: FakeProviderServer) -> None:
    from pydantic_ai import Tool

    from agent_payload.integrations.pydantic_ai import change_request_tool

    h = handler()
    tool = change_request_tool(h)
    assert isinstance(tool, Tool)
    assert tool.tool_def.parameters_json_schema == schema_of(h)
    result = run_pydantic_ai(server, [tool])
    assert result.output == "Done: three of B."
    assert_loop_went_right(h, server)
    assert_marked_as_retry(result.all_messages(), h.results[0].content)
    # pydantic-ai's OpenAI profile rewrites schemas on the way out (drops titles, adds empty
    # ``properties``); the change request's fields and buckets are what the handler gave.
    sent = server.requests[0].body["tools"][0]["function"]["parameters"]
    assert set(sent["properties"]) == set(schema_of(h)["properties"])
    assert sent["additionalProperties"] is False


def test_pydantic_ai_payload_per_run_from_deps(server: FakeProviderServer) -> None:
    """The handler comes from the run's deps; the tool schema is built from it for each step."""
    from pydantic_ai import RunContext

    from agent_payload.integrations.pydantic_ai import change_request_tool

    @dataclass
    class Deps:
        handler: ChangeRequestToolHandler

    def run_handler(ctx: RunContext[Deps]) -> ChangeRequestToolHandler:
        return ctx.deps.handler

    h = handler()
    result = run_pydantic_ai(server, [change_request_tool(run_handler)], deps=Deps(h))
    assert_loop_went_right(h, server)
    assert_marked_as_retry(result.all_messages(), h.results[0].content)
    sent = server.requests[0].body["tools"][0]["function"]["parameters"]
    # The typed payload's schema (not the untyped placeholder): its fields are listed.
    assert set(sent["properties"]["updateElements"]["properties"]) == {"number", "lines"}


def test_pydantic_ai_arguments_that_are_not_an_object_go_back_as_a_retry() -> None:
    """pydantic-ai checks only that the arguments are an object (else the call could not be
    made); the handler never sees them, and the run goes on."""
    from agent_payload.integrations.pydantic_ai import change_request_tool

    h = handler()
    with FakeProviderServer([Reply.tool_call("[1, 2]"), RIGHT, "Done."]) as fake:
        result = run_pydantic_ai(fake, [change_request_tool(h)])
        (refusal,) = tool_outputs(fake, 1)
    assert result.output == "Done."
    assert "Input should be an object" in refusal
    assert [r.is_error for r in h.results] == [False]
    assert h.payload.lines[1].qty == 3


def test_pydantic_ai_max_retries_ends_a_run_that_keeps_failing() -> None:
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    from agent_payload.integrations.pydantic_ai import change_request_tool

    h = handler()
    with (
        FakeProviderServer([WRONG, WRONG]) as fake,
        pytest.raises(UnexpectedModelBehavior, match="apply_change_request"),
    ):
        run_pydantic_ai(fake, [change_request_tool(h, max_retries=1)])
    assert h.payload == invoice()
    assert [r.is_error for r in h.results] == [True, True]


# --- LangChain / LangGraph ---------------------------------------------------------------------


def test_langgraph_tool_node_corrects_a_wrong_call(server: FakeProviderServer) -> None:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from agent_payload.integrations.langchain import change_request_tool

    h = handler()
    tool = change_request_tool(h)
    assert isinstance(tool, BaseTool)
    assert tool.args_schema == schema_of(h)
    llm = ChatOpenAI(
        model="gpt-test",
        base_url=server.openai_base_url,
        api_key="test",  # type: ignore[arg-type]
        max_retries=0,
    ).bind_tools([tool])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([tool]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    out = graph.compile().invoke({"messages": [("user", TASK)]})

    assert out["messages"][-1].content == "Done: three of B."
    assert_loop_went_right(h, server)
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [(m.status, m.content) for m in tool_messages] == [
        ("error", h.results[0].content),
        ("success", h.results[1].content),
    ]
    # LangChain inlines ``$ref``s and drops titles on the way out: the same schema otherwise.
    sent = server.requests[0].body["tools"][0]["function"]["parameters"]
    assert inlined(sent) == inlined(schema_of(h))


def test_langchain_tool_invoked_with_a_tool_call_returns_the_handler_message() -> None:
    from langchain_core.messages import ToolMessage

    from agent_payload.integrations.langchain import change_request_tool

    h = handler()
    tool = change_request_tool(h)
    call = {"name": tool.name, "args": {"updateElements": {"number": "INV-8"}}, "id": "c1"}
    message = asyncio.run(tool.ainvoke({**call, "type": "tool_call"}))
    assert isinstance(message, ToolMessage)
    assert (message.status, message.content, message.tool_call_id) == (
        "success",
        h.results[0].content,
        "c1",
    )
    assert h.payload.number == "INV-8"
    bad = tool.invoke({**call, "args": {"updateElement": {"number": "X"}}, "type": "tool_call"})
    assert bad.status == "error" and "updateElement" in bad.content
    assert h.payload.number == "INV-8"


# --- shared behaviour ----------------------------------------------------------------------------

FRAMEWORKS = [
    ("openai_agents", "agents", "agents"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("langchain", "langchain_core", "langchain"),
]


@pytest.mark.parametrize(("module", "package", "extra"), FRAMEWORKS)
def test_a_missing_framework_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, extra: str
) -> None:
    import importlib

    integration = importlib.import_module(f"agent_payload.integrations.{module}")
    if module == "langchain":
        integration._tool_class.cache_clear()
        monkeypatch.setattr(integration, "_tool_class", integration._tool_class)
    without_module(monkeypatch, package)
    try:
        with pytest.raises(ConfigurationError, match=rf"pip install 'agent-payload\[{extra}\]'"):
            integration.change_request_tool(handler())
    finally:
        if module == "langchain":
            integration._tool_class.cache_clear()


@pytest.mark.parametrize(("module", "package", "extra"), FRAMEWORKS)
def test_a_name_other_than_the_handlers_is_refused(module: str, package: str, extra: str) -> None:
    """The handler's corrections tell the model to call the tool by the handler's name."""
    import importlib

    integration = importlib.import_module(f"agent_payload.integrations.{module}")
    with pytest.raises(
        ConfigurationError, match=r"name='edit'.*ChangeRequestToolHandler\(\.\.\., name='edit'\)"
    ):
        integration.change_request_tool(handler(), name="edit")
    h = ChangeRequestToolHandler({"a": 1}, name="edit")
    tool = integration.change_request_tool(h, name="edit", description="Edit the settings.")
    assert tool.name == "edit" and tool.description == "Edit the settings."
    with pytest.raises(ConfigurationError, match="ChangeRequestToolHandler"):
        integration.change_request_tool({"a": 1})


def test_pydantic_ai_per_run_handler_must_carry_the_tool_name() -> None:
    from pydantic_ai import RunContext

    from agent_payload.integrations.pydantic_ai import change_request_tool

    other = ChangeRequestToolHandler(invoice(), name="edit_invoice")

    def run_handler(ctx: RunContext[None]) -> ChangeRequestToolHandler:
        return other

    with (
        FakeProviderServer([RIGHT, "Done."]) as fake,
        pytest.raises(ConfigurationError, match="name='apply_change_request' differs"),
    ):
        run_pydantic_ai(fake, [change_request_tool(run_handler)])
    assert other.results == []


# --- parallel tool calls of one response (README "Concurrent edits", MERGE.md section 9) ------


class Order(BaseModel):
    lines: list[Line]


def six_lines() -> ChangeRequestToolHandler:
    return ChangeRequestToolHandler(
        Order(lines=[Line(sku=s, qty=n) for n, s in enumerate("ABCDEF", start=1)])
    )


DELETE_B = {"updateElements": {"lines": {"1": "DELETE"}}, "reasoning": "B goes"}
E_TO_99 = {"updateElements": {"lines": {"4": {"qty": 99}}}, "reasoning": "99 of E"}
B_TO_7 = {"updateElements": {"lines": {"1": {"qty": 7}}}, "reasoning": "7 of B"}
MEANT = [("A", 1), ("C", 3), ("D", 4), ("E", 99), ("F", 6)]
PARALLEL = [
    # (the second call, what the payload ends as, whether the second call is sent back)
    pytest.param(E_TO_99, MEANT, False, id="disjoint"),
    pytest.param(B_TO_7, [(s, n) for s, n in MEANT[:3]] + [("E", 5), ("F", 6)], True, id="collide"),
]


def lines_of(h: ChangeRequestToolHandler) -> list[tuple[str, int]]:
    return [(line.sku, line.qty) for line in h.payload.lines]


def assert_parallel_outcome(
    h: ChangeRequestToolHandler, server: FakeProviderServer, expected: Any, collides: bool
) -> None:
    assert lines_of(h) == expected
    assert [r.is_error for r in h.results] == [False, collides]
    assert [r.base_version for r in h.results] == [0, 0]
    outputs = tool_outputs(server, 1)
    assert len(outputs) == 2
    if collides:
        assert h.results[1].problems[0].code == "concurrent_change"
        sent = outputs[1] if outputs[1].startswith("Your") else json.loads(outputs[1])["error"]
        assert sent == h.results[1].content  # the second call's own result
        assert "deleted lines[1] (as you saw it)" in sent
    assert server.errors == []


@pytest.mark.parametrize(("second", "expected", "collides"), PARALLEL)
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_openai_agents_parallel_calls_share_one_base(
    fake_server: FakeProviderServer, api: str, second: Any, expected: Any, collides: bool
) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, RunConfig, Runner

    from agent_payload.integrations.openai_agents import change_request_tool

    fake_server.reset([Reply.tool_calls([DELETE_B, second]), "Done."])
    h = six_lines()
    model_cls = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel

    async def run() -> Any:
        async with fake_server.openai_client(async_client=True) as client:
            agent = Agent(
                name="editor",
                instructions="Edit the order.",
                tools=[change_request_tool(h)],
                model=model_cls(model="gpt-test", openai_client=client),
            )
            return await Runner.run(agent, TASK, run_config=RunConfig(tracing_disabled=True))

    assert asyncio.run(run()).final_output == "Done."
    assert_parallel_outcome(h, fake_server, expected, collides)


@pytest.mark.parametrize(("second", "expected", "collides"), PARALLEL)
def test_pydantic_ai_parallel_calls_share_one_base(
    fake_server: FakeProviderServer, second: Any, expected: Any, collides: bool
) -> None:
    from agent_payload.integrations.pydantic_ai import change_request_tool

    fake_server.reset([Reply.tool_calls([DELETE_B, second]), "Done."])
    h = six_lines()
    result = run_pydantic_ai(fake_server, [change_request_tool(h)])
    assert result.output == "Done."
    assert_parallel_outcome(h, fake_server, expected, collides)


@pytest.mark.parametrize(("second", "expected", "collides"), PARALLEL)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langgraph_tool_node_parallel_calls_share_one_base(
    fake_server: FakeProviderServer, mode: str, second: Any, expected: Any, collides: bool
) -> None:
    import openai
    from langchain_core.messages import ToolMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from agent_payload.integrations.langchain import change_request_tool

    fake_server.reset([Reply.tool_calls([DELETE_B, second]), "Done."])
    h = six_lines()
    tool = change_request_tool(h)

    def build(http_async_client: Any = None) -> Any:
        llm = ChatOpenAI(
            model="gpt-test",
            base_url=fake_server.openai_base_url,
            api_key="test",  # type: ignore[arg-type]
            max_retries=0,
            http_async_client=http_async_client,
        ).bind_tools([tool])

        def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [llm.invoke(state["messages"])]}

        async def aagent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await llm.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent if http_async_client is None else aagent)
        graph.add_node("tools", ToolNode([tool]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        return graph.compile()

    start = {"messages": [("user", TASK)]}

    async def run_async() -> Any:
        # its own async client, closed here: langchain-openai's default one is shared between
        # instances and bound to the event loop of the test that made it
        async with openai.DefaultAsyncHttpxClient() as http:
            return await build(http).ainvoke(start)

    out = build().invoke(start) if mode == "sync" else asyncio.run(run_async())

    assert out["messages"][-1].content == "Done."
    assert_parallel_outcome(h, fake_server, expected, collides)
    statuses = [m.status for m in out["messages"] if isinstance(m, ToolMessage)]
    assert statuses == ["success", "error" if collides else "success"]


# --- issue 31: arguments named like the framework's, async validators ---------------------------


async def at_most_50(order: Any) -> None:
    """An async validator: the async framework tools must await it (``ahandle``)."""
    await asyncio.sleep(0)
    if any(line.qty > 50 for line in order.lines):
        raise ValueError("no line may hold more than 50")


def test_pydantic_ai_arguments_holding_ctx_go_to_the_handler(
    fake_server: FakeProviderServer,
) -> None:
    """A "ctx" key in the model's arguments is the model's (an unknown field sent back), not a
    TypeError ending the run; for the handler's tool and the per-run tool alike."""
    from pydantic_ai import RunContext

    from agent_payload.integrations.pydantic_ai import change_request_tool

    @dataclass
    class Deps:
        handler: ChangeRequestToolHandler

    def run_handler(ctx: RunContext[Deps]) -> ChangeRequestToolHandler:
        return ctx.deps.handler

    for per_run in (False, True):
        fake_server.reset([Reply.tool_call({**RIGHT_ARGS, "ctx": 1}), RIGHT, "Done."])
        h = handler()
        tool = change_request_tool(run_handler if per_run else h)
        result = run_pydantic_ai(fake_server, [tool], deps=Deps(h))
        assert result.output == "Done."
        assert [r.is_error for r in h.results] == [True, False]
        assert "ctx" in h.results[0].content
        assert h.payload.lines[1].qty == 3


def test_openai_agents_tool_awaits_an_async_validator(fake_server: FakeProviderServer) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner

    from agent_payload.integrations.openai_agents import change_request_tool

    fake_server.reset([Reply.tool_call(E_TO_99), RIGHT_E, "Done."])
    h = ChangeRequestToolHandler(six_lines().payload, validators=[at_most_50])

    async def run() -> Any:
        async with fake_server.openai_client(async_client=True) as client:
            agent = Agent(
                name="editor",
                tools=[change_request_tool(h)],
                model=OpenAIChatCompletionsModel(model="gpt-test", openai_client=client),
            )
            return await Runner.run(agent, TASK, run_config=RunConfig(tracing_disabled=True))

    assert asyncio.run(run()).final_output == "Done."
    assert [r.is_error for r in h.results] == [True, False]
    assert "no line may hold more than 50" in h.results[0].content
    assert lines_of(h)[4] == ("E", 40)


def test_langchain_ainvoke_awaits_an_async_validator() -> None:
    from agent_payload.integrations.langchain import change_request_tool

    h = ChangeRequestToolHandler(six_lines().payload, validators=[at_most_50])
    tool = change_request_tool(h)
    call = {"name": tool.name, "id": "c1", "type": "tool_call"}
    refused = asyncio.run(tool.ainvoke({**call, "args": E_TO_99}))
    assert refused.status == "error" and "no line may hold more than 50" in refused.content
    applied = asyncio.run(tool.ainvoke({**call, "args": RIGHT_E_ARGS}))
    assert applied.status == "success" and lines_of(h)[4] == ("E", 40)
    with pytest.raises(ConfigurationError, match=r"await tool\.ainvoke"):
        tool.invoke({**call, "args": RIGHT_E_ARGS})  # sync invocation cannot await it


RIGHT_ARGS = {"updateElements": {"lines": {"1": {"qty": 3}}}, "reasoning": "3 of B"}
RIGHT_E_ARGS = {"updateElements": {"lines": {"4": {"qty": 40}}}}
RIGHT_E = Reply.tool_call(RIGHT_E_ARGS)
