"""How each adapter writes outline mode's tool calls and tool results (the request bodies of
``build_params``, pure) and reads the read calls back from each API's reply shape."""

from __future__ import annotations

from typing import Any

import pytest

from agent_payload.providers.base import Message, ModelRequest, ToolCall, ToolSpec

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

READ = ToolSpec("read_payload", "Read part of the payload.", {"type": "object"})
CALLS = (
    ToolCall("call_1", "read_payload", '{"path": "lines[3]"}'),
    ToolCall("call_2", "find_in_payload", '{"text": "SKU"}'),
)
CONVERSATION = (
    Message("system", "You edit payloads."),
    Message("user", "The outline..."),
    Message("assistant", "Let me look.", tool_calls=CALLS),
    Message("tool", "lines[3] (an object of 2 keys): {...}", tool_call_id="call_1"),
    Message("tool", "1 match", tool_call_id="call_2"),
)


def request(output_mode: str) -> ModelRequest:
    schema = {"type": "object"} if output_mode == "tool" else None
    return ModelRequest(
        messages=CONVERSATION,
        output_mode=output_mode,  # type: ignore[arg-type]
        schema=schema,
        tools=(READ,),
    )


def test_chat_completions_shapes() -> None:
    from agent_payload.providers.openai import OpenAIChatModel

    model = OpenAIChatModel(openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9"), "m")
    params = model.build_params(request("tool"))
    assert params["messages"][2] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_payload", "arguments": '{"path": "lines[3]"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "find_in_payload", "arguments": '{"text": "SKU"}'},
            },
        ],
    }
    assert params["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "lines[3] (an object of 2 keys): {...}",
    }
    names = [t["function"]["name"] for t in params["tools"]]
    assert names == ["apply_change_request", "read_payload"]
    assert params["tool_choice"] == "required"
    text = model.build_params(request("text"))
    assert [t["function"]["name"] for t in text["tools"]] == ["read_payload"]
    assert "tool_choice" not in text


def test_responses_shapes() -> None:
    from agent_payload.providers.openai import OpenAIResponsesModel

    model = OpenAIResponsesModel(openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9"), "m")
    params = model.build_params(request("tool"))
    items: list[dict[str, Any]] = params["input"]
    assert items[1:] == [
        {"role": "assistant", "content": "Let me look."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "read_payload",
            "arguments": '{"path": "lines[3]"}',
        },
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "find_in_payload",
            "arguments": '{"text": "SKU"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "lines[3] (an object of 2 keys): {...}",
        },
        {"type": "function_call_output", "call_id": "call_2", "output": "1 match"},
    ]
    assert [t["name"] for t in params["tools"]] == ["apply_change_request", "read_payload"]
    assert params["tool_choice"] == "required"


def test_anthropic_shapes() -> None:
    """Tool results share one user message, as the Messages API requires."""
    from agent_payload.providers.anthropic import AnthropicModel

    model = AnthropicModel(anthropic.Anthropic(api_key="x", base_url="http://127.0.0.1:9"), "m")
    params = model.build_params(request("tool"))
    assert params["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "read_payload",
                    "input": {"path": "lines[3]"},
                },
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "find_in_payload",
                    "input": {"text": "SKU"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": "lines[3] (an object of 2 keys): {...}",
                },
                {"type": "tool_result", "tool_use_id": "call_2", "content": "1 match"},
            ],
        },
    ]
    assert [t["name"] for t in params["tools"]] == ["apply_change_request", "read_payload"]
    assert params["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert "tool_choice" not in model.build_params(request("text"))


def test_without_read_tools_a_reply_is_read_as_before() -> None:
    """A request that offers no read tools gets no ``tool_calls`` back, and in tool mode any
    call's arguments are the text (the 0.1 behaviour)."""
    from openai.types.chat import ChatCompletion

    from agent_payload.providers.openai import OpenAIChatModel

    model = OpenAIChatModel(openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9"), "m")
    completion = ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_9",
                                "type": "function",
                                "function": {"name": "other", "arguments": "{}"},
                            }
                        ],
                    },
                }
            ],
        }
    )
    plain = ModelRequest(messages=CONVERSATION[:2], output_mode="tool", schema={})
    reply = model.parse_reply(completion, plain)
    assert reply.text == "{}" and reply.tool_calls == ()
    with_reads = model.parse_reply(completion, request("tool"))
    assert with_reads.text == "" and with_reads.tool_calls == (ToolCall("call_9", "other", "{}"),)
