"""Payloads larger than the context through the tool handler and the framework tools (issue 29).

A 3 MB payload (30,000 lines) with ``max_payload_tokens=4000``: the prompt carries its outline,
the handler answers ``read_payload`` and ``find_in_payload`` (the agent's own reads), and a
wrong call's correction shows the array concerned within half the budget, not all of it. Each
framework drives its own loop against ``FakeProviderServer``: the model finds ``SKU-31337``
with ``find_in_payload``, then edits it; no request is over 80,000 characters.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import pytest

from agent_payload import ChangeRequestToolHandler, ConfigurationError
from agent_payload.testing import FakeProviderServer, Reply

BUDGET = 4_000
TASK = "Set the quantity of SKU-31337 to 99"
FIND = Reply.tool_call({"text": "SKU-31337"}, name="find_in_payload")
EDIT_ARGUMENTS = {
    "updateElements": {"lines": {"21337": {"qty": 99}}},
    "reasoning": "SKU-31337 is line 21337",
}
EDIT = Reply.tool_call(EDIT_ARGUMENTS, name="apply_change_request")
DONE = "Done: SKU-31337 has 99."


@functools.cache
def _big_text() -> str:
    lines = [
        {
            "sku": f"SKU-{10_000 + i}",
            "qty": i % 7,
            "note": f"line {i} of the goods receipt, checked and stored in bay 4",
        }
        for i in range(30_000)
    ]
    return json.dumps({"number": "GR-1", "lines": lines})


def big() -> dict[str, Any]:
    """A fresh 3 MB payload: 30,000 lines, SKU-31337 at lines[21337]."""
    payload: dict[str, Any] = json.loads(_big_text())
    return payload


def test_the_payload_is_three_megabytes() -> None:
    assert len(_big_text()) > 3_000_000


def test_a_large_payload_is_outlined_read_and_corrected_within_the_budget() -> None:
    payload = big()
    h = ChangeRequestToolHandler(payload, max_payload_tokens=BUDGET)
    assert h.outlined
    parts = h.prompt(TASK)
    assert "OUTLINE" in parts.user and "read_payload" in parts.user
    assert "find_in_payload" in parts.user
    assert len(parts.user) < 60_000, len(parts.user)
    assert [t["function"]["name"] for t in h.openai_read_tools()] == [
        "read_payload",
        "find_in_payload",
    ]
    assert [t["name"] for t in h.responses_read_tools()] == ["read_payload", "find_in_payload"]
    assert [t["name"] for t in h.anthropic_read_tools()] == ["read_payload", "find_in_payload"]

    found = h.call("find_in_payload", json.dumps({"text": ["SKU-31337", "SKU-10002"]}))
    assert not found.is_error
    assert "lines[21337].sku" in found.content and "lines[2].sku" in found.content
    read = h.read("read_payload", {"path": "lines", "start": 21330, "end": 21340, "keys": ["sku"]})
    assert "SKU-31337" in read.content and "note" not in read.content

    # A wrong index on the 30,000-element array: the correction is bounded, the payload kept.
    wrong = h.handle({"updateElements": {"lines": {"40000": {"qty": 99}}}})
    assert wrong.is_error and "index_out_of_range" in wrong.content
    assert len(wrong.content) < 20_000, len(wrong.content)
    assert h.payload is payload

    right = h.call("apply_change_request", EDIT_ARGUMENTS)
    assert not right.is_error, right.content
    assert h.payload["lines"][21337]["qty"] == 99
    assert payload["lines"][21337]["qty"] == 21337 % 7  # the caller's payload untouched


def test_a_bad_read_says_why_and_reads_are_limited_per_task() -> None:
    h = ChangeRequestToolHandler(big(), max_payload_tokens=BUDGET, max_reads=2)
    h.prompt(TASK)
    missing = h.read("read_payload", {"path": "lines[99999]"})
    assert missing.content.startswith("No value at lines[99999]: lines is an array of 30000")
    bad = h.read("find_in_payload", {"txt": "SKU"})
    assert bad.is_error and "unknown argument(s): txt" in bad.content
    over = h.read("find_in_payload", {"text": "x"})
    assert over.is_error and "no more reads" in over.content
    h.prompt(TASK)  # a new task: reads counted again
    assert not h.read("find_in_payload", {"text": "GR-1"}).is_error
    unknown = h.call("delete_everything", {})
    assert unknown.is_error and "apply_change_request" in unknown.content


def test_a_payload_that_fits_is_not_outlined() -> None:
    h = ChangeRequestToolHandler({"a": 1}, max_payload_tokens=BUDGET)
    assert not h.outlined
    assert h.openai_read_tools() == [] and h.read_tool_specs() == ()
    assert "OUTLINE" not in h.prompt("Set a to 2").user
    never = ChangeRequestToolHandler(big(), max_payload_tokens=None)
    assert not never.outlined


@pytest.mark.parametrize("value", [0, 10, "big", True, 1.5])
def test_max_payload_tokens_is_checked(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_payload_tokens"):
        ChangeRequestToolHandler({}, max_payload_tokens=value)


# --- the frameworks -----------------------------------------------------------------------


def check_run(h: ChangeRequestToolHandler, server: FakeProviderServer) -> None:
    assert server.errors == []
    assert h.payload["lines"][21337]["qty"] == 99
    assert len(server.requests) == 3
    sizes = [len(json.dumps(r.body)) for r in server.requests]
    assert max(sizes) < 80_000, sizes
    names = {
        t.get("name") or t["function"]["name"] for t in server.requests[0].body.get("tools", [])
    }
    assert names == {"apply_change_request", "read_payload", "find_in_payload"}
    # The find's answer reached the model.
    assert "lines[21337].sku" in json.dumps(server.requests[1].body)


@pytest.mark.slow
def test_pydantic_ai_finds_and_edits_in_a_large_payload(fake_server: FakeProviderServer) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from agent_payload.integrations.pydantic_ai import payload_tools

    fake_server.reset([FIND, EDIT, DONE])
    h = ChangeRequestToolHandler(big(), max_payload_tokens=BUDGET)
    parts = h.prompt(TASK)

    async def run() -> Any:
        async with fake_server.openai_client(async_client=True) as client:
            model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, instructions=parts.system, tools=payload_tools(h))
            return await agent.run(parts.user)

    assert asyncio.run(run()).output == DONE
    check_run(h, fake_server)


@pytest.mark.slow
def test_openai_agents_finds_and_edits_in_a_large_payload(fake_server: FakeProviderServer) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner

    from agent_payload.integrations.openai_agents import payload_tools

    fake_server.reset([FIND, EDIT, DONE])
    h = ChangeRequestToolHandler(big(), max_payload_tokens=BUDGET)
    parts = h.prompt(TASK)

    async def run() -> Any:
        async with fake_server.openai_client(async_client=True) as client:
            agent = Agent(
                name="editor",
                instructions=parts.system,
                tools=payload_tools(h),
                model=OpenAIChatCompletionsModel(model="gpt-test", openai_client=client),
            )
            config = RunConfig(tracing_disabled=True)
            return await Runner.run(agent, parts.user, run_config=config)

    assert asyncio.run(run()).final_output == DONE
    check_run(h, fake_server)


@pytest.mark.slow
def test_langgraph_tool_node_finds_and_edits_in_a_large_payload(
    fake_server: FakeProviderServer,
) -> None:
    from langchain_core.messages import ToolMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from agent_payload.integrations.langchain import payload_tools

    fake_server.reset([FIND, EDIT, DONE])
    h = ChangeRequestToolHandler(big(), max_payload_tokens=BUDGET)
    parts = h.prompt(TASK)
    tools = payload_tools(h)
    llm = ChatOpenAI(
        model="gpt-test",
        base_url=fake_server.openai_base_url,
        api_key="test",  # type: ignore[arg-type]
        max_retries=0,
    ).bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    out = graph.compile().invoke({"messages": [("system", parts.system), ("user", parts.user)]})

    assert out["messages"][-1].content == DONE
    check_run(h, fake_server)
    statuses = [m.status for m in out["messages"] if isinstance(m, ToolMessage)]
    assert statuses == ["success", "success"]


def test_payload_tools_of_a_payload_that_fits_is_the_change_request_tool_alone() -> None:
    from agent_payload.integrations.langchain import payload_tools

    assert [t.name for t in payload_tools(ChangeRequestToolHandler({"a": 1}))] == [
        "apply_change_request"
    ]
