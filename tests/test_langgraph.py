"""The payload in LangGraph state (``agent_payload.integrations.langgraph``), with the real
LangGraph, LangChain and OpenAI SDK against ``FakeProviderServer``: the payload is checkpointed
with the thread, every turn's model is shown the current payload, and the parallel calls of one
``AIMessage`` are combined as MERGE.md section 9 says (a collision goes back as that call's
error message)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from agent_payload import ConfigurationError, UsageError
from agent_payload.guards.versions import payload_version
from agent_payload.testing import FakeProviderServer, Reply

pytestmark = pytest.mark.slow

langgraph = pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import MemorySaver  # noqa: E402
from langgraph.errors import InvalidUpdateError  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from agent_payload.integrations.langgraph import (  # noqa: E402
    EDIT,
    PayloadChannel,
    PayloadState,
    change_request_tool,
    payload_message,
    payload_prompt,
    read_tools,
)

SKUS = "ABCDEF"
THREAD = {"configurable": {"thread_id": "invoice-7"}}


def lines(*skus: str) -> dict[str, Any]:
    return {"lines": [{"sku": s, "qty": 1} for s in skus]}


def skus(payload: dict[str, Any]) -> list[str]:
    return [line["sku"] + str(line["qty"]) for line in payload["lines"]]


def compile_graph(server: FakeProviderServer, saver: MemorySaver, tool: Any, **client: Any) -> Any:
    """A fresh graph each time (as after a restart): model node, ToolNode, the checkpointer."""
    llm = ChatOpenAI(
        model="gpt-5.4-mini", base_url=server.openai_base_url, api_key="test", **client
    ).bind_tools([tool])
    prompt = payload_prompt(tool)

    def agent(state: PayloadState) -> dict[str, Any]:
        return {"messages": [llm.invoke(prompt(state))]}

    graph = StateGraph(PayloadState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([tool]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def system_text(request: Any) -> str:
    return str(request.body["messages"][0]["content"])


def tool_messages(values: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in values["messages"] if isinstance(m, ToolMessage)]


def test_three_invocations_on_one_thread_keep_the_payload_in_the_checkpoint() -> None:
    """Each invocation through a freshly compiled graph and a new tool (as after a restart):
    only the checkpointer carries the payload from one to the next."""
    saver = MemorySaver()
    server = FakeProviderServer(
        [
            Reply.tool_call({"newElements": {"lines": [{"sku": "G", "qty": 1}]}}),
            "Added G.",
            # lines[6] exists only in the updated payload (the original has six lines)
            Reply.tool_call({"updateElements": {"lines": {"6": {"qty": 7}}}}),
            "Seven of G.",
            Reply.tool_calls(
                [
                    {"updateElements": {"lines": {"1": "DELETE"}}},  # B
                    {"updateElements": {"lines": {"4": {"qty": 99}}}},  # E, as the model saw it
                ]
            ),
            "Done.",
        ]
    )
    with server:
        out = compile_graph(server, saver, change_request_tool()).invoke(
            {"messages": [("user", "Add G")], "payload": lines(*SKUS)}, THREAD
        )
        assert skus(out["payload"]) == ["A1", "B1", "C1", "D1", "E1", "F1", "G1"]
        state = compile_graph(server, saver, change_request_tool()).get_state(THREAD).values
        assert state["payload"] == out["payload"]

        out = compile_graph(server, saver, change_request_tool()).invoke(
            {"messages": [("user", "Make it seven of G")]}, THREAD
        )
        assert skus(out["payload"]) == ["A1", "B1", "C1", "D1", "E1", "F1", "G7"]
        # the second turn's model was shown the payload with G in it (on the wire)
        second_turn = server.requests[2]
        assert '"sku":"G"' in system_text(second_turn).replace(" ", "")
        assert [m["role"] for m in second_turn.body["messages"]][-1] == "user"

        out = compile_graph(server, saver, change_request_tool()).invoke(
            {"messages": [("user", "Drop B, 99 of E")]}, THREAD
        )
        assert skus(out["payload"]) == ["A1", "C1", "D1", "E99", "F1", "G7"]
        state = compile_graph(server, saver, change_request_tool()).get_state(THREAD).values
        assert skus(state["payload"]) == ["A1", "C1", "D1", "E99", "F1", "G7"]
        assert [m.status for m in tool_messages(state)] == ["success"] * 4
        json.dumps(state["payload"])  # JSON data, as checkpointers want
    assert server.errors == []


def test_a_colliding_parallel_call_goes_back_as_its_own_error_message() -> None:
    saver = MemorySaver()
    tool = change_request_tool()
    server = FakeProviderServer(
        [
            Reply.tool_calls(
                [
                    {"updateElements": {"lines": {"1": "DELETE"}}},  # B
                    {"updateElements": {"lines": {"1": {"qty": 7}}}},  # B again: deleted since
                ]
            ),
            "Sorry.",
        ]
    )
    with server:
        out = compile_graph(server, saver, tool).invoke(
            {"messages": [("user", "...")], "payload": lines(*SKUS)}, THREAD
        )
    first, second = tool_messages(out)
    assert (first.status, second.status) == ("success", "error")
    assert "concurrent_change" in str(second.content)
    assert skus(out["payload"]) == ["A1", "C1", "D1", "E1", "F1"]
    # the correction reached the model, beside the other call's result
    sent = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert "concurrent_change" in sent[1]["content"] and "Applied" in sent[0]["content"]


def test_async_parallel_calls_combine_too() -> None:
    saver = MemorySaver()
    tool = change_request_tool()
    server = FakeProviderServer(
        [
            Reply.tool_calls(
                [
                    {"updateElements": {"lines": {"1": "DELETE"}}},
                    {"updateElements": {"lines": {"4": {"qty": 99}}}},
                    {"newElements": {"lines": {"5": [{"sku": "X", "qty": 1}]}}},  # before F
                ]
            ),
            "Done.",
        ]
    )

    async def run() -> Any:
        async with httpx.AsyncClient() as client:  # closed in its own event loop
            graph = compile_graph(server, saver, tool, http_async_client=client)
            start = {"messages": [("user", "...")], "payload": lines(*SKUS)}
            return await graph.ainvoke(start, THREAD)

    with server:
        out = asyncio.run(run())
    assert skus(out["payload"]) == ["A1", "C1", "D1", "E99", "X1", "F1"]


def call_with_state(tool: Any, args: dict[str, Any], payload: Any) -> Any:
    """One call as ``ToolNode`` makes it: the state injected beside the model's arguments."""
    message = AIMessage("", id="m1", tool_calls=[{"name": tool.name, "args": args, "id": "c1"}])
    state = {"messages": [message], "payload": payload}
    return tool.invoke({"name": tool.name, "args": {**args, "state": state}, "id": "c1",
                        "type": "tool_call"})  # fmt: skip


def test_typed_payload_and_options_reach_the_handler() -> None:
    from pydantic import BaseModel

    class Line(BaseModel):
        sku: str
        qty: int

    class Invoice(BaseModel):
        lines: list[Line]

    tool = change_request_tool(payload_type=Invoice)
    assert "qty" in json.dumps(tool.tool_call_schema)
    args = {"updateElements": {"lines": {"0": {"qty": "x"}}}}
    command = call_with_state(tool, args, lines("A"))
    (answer,) = command.update["messages"]
    assert answer.status == "error" and "payload" not in command.update
    tool = change_request_tool(payload_type=Invoice)  # a new record: the same ids again
    command = call_with_state(tool, {"updateElements": {"lines": {"0": {"qty": 5}}}}, lines("A"))
    assert command.update["payload"][EDIT]["payload"] == {"lines": [{"sku": "A", "qty": 5}]}


def test_a_call_seen_again_gets_its_first_answer() -> None:
    tool = change_request_tool()
    append = {"newElements": {"lines": [{"sku": "Z", "qty": 1}]}}
    first = call_with_state(tool, append, lines("A"))
    again = call_with_state(tool, append, lines("A"))  # the step run twice: one edit, not two
    assert first.update["payload"] == again.update["payload"]
    assert first.update["payload"][EDIT]["step"] == 1
    assert skus(first.update["payload"][EDIT]["payload"]) == ["A1", "Z1"]


def channel(value: Any) -> PayloadChannel:
    c = PayloadChannel()
    c.key = "payload"
    c.update([value])
    return c


def edit(turn: str, base: Any, step: int, payload: Any) -> dict[str, Any]:
    return {EDIT: {"turn": turn, "version": payload_version(base), "step": step,
                   "payload": payload}}  # fmt: skip


def test_channel_keeps_the_furthest_step_of_a_turn_whatever_the_order() -> None:
    c = channel(lines("A"))
    c.update(
        [edit("m", lines("A"), 2, lines("A", "B", "C")), edit("m", lines("A"), 1, lines("A", "B"))]
    )
    assert c.get() == lines("A", "B", "C")
    restored = PayloadChannel().from_checkpoint(c.checkpoint())
    assert restored.get() == lines("A", "B", "C")


def test_channel_refuses_edits_it_cannot_combine_and_changes_nothing() -> None:
    c = channel(lines("A"))
    with pytest.raises(InvalidUpdateError, match="2 model messages"):
        c.update([edit("m1", lines("A"), 1, lines("B")), edit("m2", lines("A"), 1, lines("C"))])
    with pytest.raises(InvalidUpdateError, match="nothing was applied"):
        c.update([edit("m1", lines("Q"), 1, lines("B"))])
    assert c.get() == lines("A")
    c.update([lines("N")])  # a plain write replaces the payload
    assert c.get() == lines("N")


def test_misuse_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="history"):
        change_request_tool(history=3)
    with pytest.raises(ConfigurationError, match="validators"):
        change_request_tool(validators=[42])  # checked when the tool is made, not at a call
    with pytest.raises(ConfigurationError, match="state_key"):
        change_request_tool("messages")
    tool = change_request_tool()
    call = {"name": tool.name, "args": {}, "id": "c1", "type": "tool_call"}
    with pytest.raises(UsageError, match="ToolNode"):
        tool.invoke(call)
    with pytest.raises(UsageError, match="'document'"):
        payload_message({"messages": []}, change_request_tool("document"))


def test_outline_mode_the_model_reads_then_edits_a_large_payload() -> None:
    big = {"lines": [{"sku": f"SKU-{i:05d}", "qty": 1} for i in range(5000)]}
    tool = change_request_tool()
    reads = read_tools(tool, max_payload_tokens=500)
    server = FakeProviderServer(
        [
            Reply.find_in_payload("SKU-03137"),
            Reply.tool_call({"updateElements": {"lines": {"3137": {"qty": 12}}}}, name=tool.name),
            "Done.",
        ]
    )
    llm = ChatOpenAI(model="gpt-5.4-mini", base_url=server.openai_base_url, api_key="test")
    llm = llm.bind_tools([tool, *reads])
    prompt = payload_prompt(tool, max_payload_tokens=500)

    def agent(state: PayloadState) -> dict[str, Any]:
        return {"messages": [llm.invoke(prompt(state))]}

    builder = StateGraph(PayloadState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([tool, *reads]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    with server:
        out = builder.compile().invoke({"messages": [("user", "12 of SKU-03137")], "payload": big})
    assert out["payload"]["lines"][3137] == {"sku": "SKU-03137", "qty": 12}
    assert "OUTLINE" in system_text(server.requests[0])
    found = next(m for m in server.requests[1].body["messages"] if m["role"] == "tool")
    assert "lines[3137].sku" in found["content"]


def test_payload_message_outlines_a_large_payload() -> None:
    big = {"lines": [{"sku": f"SKU-{i:05d}", "qty": 1} for i in range(5000)]}
    text = str(payload_message({"messages": [], "payload": big}, max_payload_tokens=500).content)
    assert "OUTLINE" in text and "SKU-02500" not in text
    assert "SKU-02500" in str(payload_message({"messages": [], "payload": big}).content)


def test_calls_are_judged_in_the_messages_order_whichever_runs_first() -> None:
    """The second call of a message running first judges the first one before itself: the
    collision always goes back to the later call (not to whichever thread won)."""
    tool = change_request_tool()
    delete_b = {"updateElements": {"lines": {"1": "DELETE"}}}
    seven_of_b = {"updateElements": {"lines": {"1": {"qty": 7}}}}
    calls = [
        {"name": tool.name, "args": delete_b, "id": "c1"},
        {"name": "other_tool", "args": {}, "id": "c0"},  # not this tool's: left alone
        {"name": tool.name, "args": seven_of_b, "id": "c2"},
    ]
    state = {"messages": [AIMessage("", id="m1", tool_calls=calls)], "payload": lines(*SKUS)}

    def run(call_id: str, args: dict[str, Any]) -> Any:
        return tool.invoke(
            {
                "name": tool.name,
                "args": {**args, "state": state},
                "id": call_id,
                "type": "tool_call",
            }
        )

    second = run("c2", seven_of_b)
    first = run("c1", delete_b)
    assert second.update["messages"][0].status == "error" and "payload" not in second.update
    assert "concurrent_change" in second.update["messages"][0].content
    assert skus(first.update["payload"][EDIT]["payload"]) == ["A1", "C1", "D1", "E1", "F1"]


def test_a_guards_confirmation_is_given_by_the_same_call_in_the_next_message() -> None:
    """A ``confirm`` finding sends the call back with before/after; the model confirms by
    sending the same call again, which comes in its next message (a new turn)."""
    from agent_payload.guards import DataLossGuard

    saver = MemorySaver()
    tool = change_request_tool(guards=[DataLossGuard("confirm")])
    drop_four = {"updateElements": {"lines": ["DELETE"] * 4 + [{}, {}]}}
    server = FakeProviderServer([Reply.tool_call(drop_four), Reply.tool_call(drop_four), "Done."])
    with server:
        out = compile_graph(server, saver, tool).invoke(
            {"messages": [("user", "Keep E and F only")], "payload": lines(*SKUS)}, THREAD
        )
    asked, confirmed = tool_messages(out)
    assert (asked.status, confirmed.status) == ("error", "success")
    assert skus(out["payload"]) == ["E1", "F1"]
