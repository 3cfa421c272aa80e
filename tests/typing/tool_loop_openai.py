"""An OpenAI Chat Completions tool loop, type-checked by ``mypy --strict`` in
``tests/test_readme_examples.py``: the tool definition and the tool results go to the real
SDK's typed parameters. (Also runnable: ``run(client)`` against ``FakeProviderServer``.)"""

from __future__ import annotations

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam
from openai.types.responses import ResponseInputParam, ToolParam

from agent_payload import ChangeRequestToolHandler
from agent_payload.tools import openai_tool, responses_tool


def run(client: openai.OpenAI, payload: dict[str, object], task: str) -> object:
    handler = ChangeRequestToolHandler(payload)
    prompt = handler.prompt(task)
    tools: list[ChatCompletionToolUnionParam] = [handler.openai_tool(), openai_tool()]
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": prompt.system},
        {"role": "user", "content": prompt.user},
    ]
    for _ in range(5):
        completion = client.chat.completions.create(
            model="gpt-5.4-mini", messages=messages, tools=tools
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in message.tool_calls
                    if call.type == "function"
                ],
            }
        )
        for call in message.tool_calls:
            if call.type == "function":
                messages.append(handler.handle(call.function.arguments).openai_message(call.id))
    return handler.payload


def responses_round(client: openai.OpenAI, payload: dict[str, object], task: str) -> object:
    handler = ChangeRequestToolHandler(payload)
    prompt = handler.prompt(task)
    tools: list[ToolParam] = [handler.responses_tool(), responses_tool()]
    items: ResponseInputParam = [{"role": "user", "content": prompt.user}]
    response = client.responses.create(
        model="gpt-5.4-mini", instructions=prompt.system, input=items, tools=tools
    )
    for item in response.output:
        if item.type == "function_call":
            items.append(handler.handle(item.arguments).responses_item(item.call_id))
    return handler.payload
