"""Tool-call handlers: tool definitions, the handler, and full tool loops with the real SDKs
(OpenAI Chat Completions, the Responses API, Anthropic Messages) against FakeProviderServer."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload.errors import RetryWithFeedback
from agent_payload.report import Change, Finding
from agent_payload.schema import change_request_schema
from agent_payload.testing import FakeProviderServer, Reply
from agent_payload.tools import (
    DEFAULT_TOOL_NAME,
    ChangeRequestToolHandler,
    ToolResult,
    anthropic_tool,
    openai_tool,
    responses_tool,
    summarize_changes,
)


class Line(BaseModel):
    sku: str
    qty: int


class Invoice(BaseModel):
    number: str
    status: str
    lines: list[Line]


INVOICE = {
    "number": "INV-1",
    "status": "draft",
    "lines": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}],
}


# --- tool definitions --------------------------------------------------------------------------


def test_tool_definitions_have_each_api_shape_and_the_schema() -> None:
    """Chat Completions nests the function, Responses is flat, Anthropic uses input_schema;
    all three carry change_request_schema for the payload type, with the optional
    base_version (the version the call was written against), and name the marker."""
    schema = copy.deepcopy(change_request_schema(Invoice, marker="__DELETE__"))
    schema["properties"]["base_version"] = {
        "type": "integer",
        "minimum": 0,
        "description": "The payload version this change was written against (the prompt and "
        "every result of this tool state the current version). Positions are read in that "
        "version; edits applied since are taken into account.",
    }
    chat = openai_tool(Invoice, marker="__DELETE__")
    assert chat["type"] == "function"
    assert chat["function"]["name"] == DEFAULT_TOOL_NAME
    assert chat["function"]["parameters"] == schema
    assert '"__DELETE__"' in chat["function"]["description"]
    flat = responses_tool(Invoice, marker="__DELETE__", name="edit")
    assert (flat["type"], flat["name"], flat["parameters"]) == ("function", "edit", schema)
    assert flat["strict"] is False
    claude = anthropic_tool(Invoice, marker="__DELETE__")
    assert set(claude) == {"name", "description", "input_schema"}
    assert claude["input_schema"] == schema


def test_handler_picks_a_marker_the_data_does_not_hold() -> None:
    """A payload holding "DELETE" as data gets "__DELETE__" as the marker, in the tool too."""
    handler = ChangeRequestToolHandler({"method": "DELETE"})
    assert handler.marker == "__DELETE__"
    assert '"__DELETE__"' in handler.openai_tool()["function"]["description"]


def test_tool_description_and_schema_teach_insertion() -> None:
    """The description says how a newElements index map inserts, and the tool's schema admits
    one whose values are lists of whole items (MERGE.md section 8)."""
    tool = anthropic_tool(Invoice)
    assert '{"2": [items]} inserts the items before original element 2' in tool["description"]
    schema = tool["input_schema"]

    def deref(node: Any) -> Any:
        """Repeated sub-schemas are defined once in $defs (T0, T1, ...): look through them."""
        while isinstance(node, dict) and set(node) == {"$ref"} and "/T" in node["$ref"]:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        return node

    new_elements = schema["properties"]["newElements"]
    assert "index map inserts" in new_elements["description"]
    lines = deref(new_elements["properties"]["lines"])
    index_map = deref(lines["anyOf"][1])
    assert set(index_map) == {"type", "patternProperties", "additionalProperties"}
    [values] = index_map["patternProperties"].values()
    values = deref(values)
    assert [deref(v) for v in values["anyOf"]] == [
        {"type": "array", "items": {"$ref": "#/$defs/Line"}},
        {"$ref": "#/$defs/Line__new"},
    ]


def test_handle_applies_an_insertion() -> None:
    """A tool call that inserts in the middle is applied and summarized as an add."""
    handler = ChangeRequestToolHandler(json.loads(json.dumps(INVOICE)), payload_type=Invoice)
    result = handler.handle({"newElements": {"lines": {"1": [{"sku": "N", "qty": 3}]}}})
    assert not result.is_error, result.content
    assert [line["sku"] for line in result.payload["lines"]] == ["A", "N", "B"]
    assert "- add lines[1]" in result.content


# --- the handler -------------------------------------------------------------------------------


def test_handle_applies_and_summarizes() -> None:
    """Good arguments are applied; the content lists each change; the handler keeps the new
    payload for the next call and never touches the caller's payload."""
    original = json.loads(json.dumps(INVOICE))
    handler = ChangeRequestToolHandler(original)
    result = handler.handle('{"updateElements": {"status": "sent", "lines": [{}, {"qty": 5}]}}')
    assert not result.is_error
    assert result.payload["status"] == "sent"
    assert result.payload["lines"][1]["qty"] == 5
    assert "Applied 2 changes" in result.content
    assert "- update lines[1].qty: 2 -> 5" in result.content
    assert '- update status: "draft" -> "sent"' in result.content
    assert handler.payload is result.payload
    assert original == INVOICE
    second = handler.handle({"updateElements": {"lines": [{}, "DELETE"]}})
    assert second.payload["lines"] == [{"sku": "A", "qty": 1}]
    assert "- delete lines[1]" in second.content
    assert len(handler.results) == 2


def test_handle_tolerates_model_syntax() -> None:
    """Arguments with JSON5 quirks and a wrapper are read by the tolerant parser."""
    handler = ChangeRequestToolHandler(dict(INVOICE))
    result = handler.handle("{changeRequest: {updateElements: {status: 'paid',},},}")
    assert not result.is_error
    assert result.payload["status"] == "paid"


def test_unreadable_arguments_are_an_error_and_change_nothing() -> None:
    """Arguments that are not JSON give is_error with a correction; the payload stays."""
    handler = ChangeRequestToolHandler(dict(INVOICE))
    result = handler.handle("I would change the status")
    assert result.is_error
    assert result.report is None
    assert result.payload is handler.payload
    assert handler.payload == INVOICE
    assert result.content.strip()


def test_conflicts_are_an_error_with_the_current_value_and_nothing_applied() -> None:
    """A call with a conflict applies nothing (not even its good parts); the content names
    the conflict's path and shows the current value so the model can fix it."""
    handler = ChangeRequestToolHandler(dict(INVOICE))
    result = handler.handle({"updateElements": {"status": "sent", "lines": {"7": {"qty": 1}}}})
    assert result.is_error
    assert [p.code for p in result.problems] == ["index_out_of_range"]
    assert "index_out_of_range" in result.content
    assert "updateElements.lines" in result.content
    assert handler.payload == INVOICE
    assert result.changes == []


def test_pydantic_payload_validation_errors_are_reported() -> None:
    """With a pydantic payload, a result that does not validate is an error naming the
    payload path; a valid call returns an instance of the same class."""
    handler = ChangeRequestToolHandler(Invoice.model_validate(INVOICE))
    bad = handler.handle({"updateElements": {"lines": [{"qty": "many"}]}})
    assert bad.is_error
    assert any(p.kind == "validation" and p.path == "lines[0].qty" for p in bad.problems)
    good = handler.handle({"updateElements": {"lines": [{"qty": 4}]}})
    assert isinstance(good.payload, Invoice)
    assert good.payload.lines[0].qty == 4


def test_payload_type_validates_plain_dicts_too() -> None:
    """A dict payload with a payload_type is validated against it after each call."""
    handler = ChangeRequestToolHandler(dict(INVOICE), payload_type=Invoice)
    result = handler.handle({"updateElements": {"status": None}})
    assert result.is_error
    assert any(p.path == "status" for p in result.problems)
    assert handler.payload == INVOICE


def test_guards_refuse_changes() -> None:
    """A guard's conflict finding refuses the call; the content says why."""

    def no_status(change: Change) -> list[Finding]:
        if change.path[:1] == ("status",):
            return [Finding("permission_denied", "status is read-only")]
        return []

    handler = ChangeRequestToolHandler(dict(INVOICE), guards=[no_status])
    result = handler.handle({"updateElements": {"status": "void"}})
    assert result.is_error
    assert "permission_denied" in result.content
    assert handler.payload == INVOICE


def test_validators_can_ask_for_another_call() -> None:
    """A validator raising RetryWithFeedback refuses the call with its feedback."""

    def positive(payload: Any) -> None:
        if any(line["qty"] <= 0 for line in payload["lines"]):
            raise RetryWithFeedback("quantities must be positive", path="lines")

    handler = ChangeRequestToolHandler(dict(INVOICE), validators=[positive])
    result = handler.handle({"updateElements": {"lines": [{"qty": 0}]}})
    assert result.is_error
    assert "quantities must be positive" in result.content


def test_result_messages_for_each_api() -> None:
    """ToolResult renders the answer message/item/block each API expects."""
    result = ToolResult(payload={}, content="ok", is_error=True)
    assert result.openai_message("c1") == {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    assert result.responses_item("c2") == {
        "type": "function_call_output",
        "call_id": "c2",
        "output": "ok",
    }
    assert result.anthropic_block("t3") == {
        "type": "tool_result",
        "tool_use_id": "t3",
        "content": "ok",
        "is_error": True,
    }


# --- full tool loops with the real SDKs ---------------------------------------------------------

FIRST_CALL = {"updateElements": {"lines": [{}, {"qty": 7}]}, "reasoning": "B is now 7"}
BAD_CALL = {"updateElements": {"lines": {"9": {"qty": 1}}}}


def test_openai_chat_completions_tool_loop() -> None:
    """The model calls the tool twice (a conflict, then a good call) and finishes; each tool
    result goes back as a role "tool" message with the call's id, the error one first."""
    handler = ChangeRequestToolHandler(dict(INVOICE), payload_type=Invoice)
    script = [Reply.tool_call(BAD_CALL), Reply.tool_call(FIRST_CALL), "Done: B is now 7."]
    with FakeProviderServer(script) as server, server.openai_client(max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": "Set line B to 7"}]
        for _ in range(5):
            completion = client.chat.completions.create(
                model="gpt-test", messages=messages, tools=[handler.openai_tool()]
            )
            message = completion.choices[0].message
            if not message.tool_calls:
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = handler.handle(call.function.arguments)
                messages.append(result.openai_message(call.id))
        requests = server.requests
    assert message.content == "Done: B is now 7."
    assert handler.payload["lines"][1]["qty"] == 7
    assert [r.is_error for r in handler.results] == [True, False]
    assert len(requests) == 3
    assert requests[0].body["tools"][0]["function"]["name"] == DEFAULT_TOOL_NAME
    sent = requests[1].body["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == json.dumps(BAD_CALL)
    assert sent[2]["role"] == "tool"
    assert sent[2]["tool_call_id"] == sent[1]["tool_calls"][0]["id"]
    assert "index_out_of_range" in sent[2]["content"]
    last = requests[2].body["messages"][-1]
    assert last["role"] == "tool"
    assert "- update lines[1].qty: 2 -> 7" in last["content"]


def test_openai_responses_tool_loop() -> None:
    """Responses API: the function_call item and a function_call_output with the same call_id
    go back as input items; the model then answers with text."""
    handler = ChangeRequestToolHandler(dict(INVOICE))
    script = [Reply.tool_call(FIRST_CALL), "All set."]
    with FakeProviderServer(script) as server, server.openai_client(max_retries=0) as client:
        items: list[Any] = [{"role": "user", "content": "Set line B to 7"}]
        for _ in range(5):
            response = client.responses.create(
                model="gpt-test", input=items, tools=[handler.responses_tool()]
            )
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                break
            for call in calls:
                items.append(call.model_dump(exclude_none=True))
                items.append(handler.handle(call.arguments).responses_item(call.call_id))
        requests = server.requests
    assert response.output_text == "All set."
    assert handler.payload["lines"][1]["qty"] == 7
    assert len(requests) == 2
    assert requests[0].body["tools"][0]["name"] == DEFAULT_TOOL_NAME
    sent = requests[1].body["input"]
    assert sent[1]["type"] == "function_call"
    assert sent[2]["type"] == "function_call_output"
    assert sent[2]["call_id"] == sent[1]["call_id"]
    assert "Applied 1 change" in sent[2]["output"]


def test_anthropic_tool_loop() -> None:
    """Anthropic: the assistant's tool_use block goes back, then a user message with a
    tool_result block (tool_use_id, content, is_error) for each call."""
    handler = ChangeRequestToolHandler(dict(INVOICE))
    script = [Reply.tool_call(BAD_CALL), Reply.tool_call(FIRST_CALL), "Finished."]
    with FakeProviderServer(script) as server, server.anthropic_client(max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": "Set line B to 7"}]
        for _ in range(5):
            reply = client.messages.create(
                model="claude-test",
                max_tokens=1024,
                messages=messages,
                tools=[handler.anthropic_tool()],
            )
            uses = [block for block in reply.content if block.type == "tool_use"]
            if not uses:
                break
            messages.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in uses]}
            )
            messages.append(
                {
                    "role": "user",
                    "content": [handler.handle(b.input).anthropic_block(b.id) for b in uses],
                }
            )
        requests = server.requests
    assert reply.content[0].text == "Finished."
    assert handler.payload["lines"][1]["qty"] == 7
    assert len(requests) == 3
    assert requests[0].body["tools"][0]["input_schema"]["type"] == "object"
    first_result = requests[1].body["messages"][2]["content"][0]
    tool_use = requests[1].body["messages"][1]["content"][0]
    assert first_result["type"] == "tool_result"
    assert first_result["tool_use_id"] == tool_use["id"]
    assert first_result["is_error"] is True
    second_result = requests[2].body["messages"][-1]["content"][0]
    assert second_result["is_error"] is False
    assert "lines[1].qty" in second_result["content"]


@pytest.mark.parametrize("arguments", ["null", "[1, 2]"])
def test_arguments_that_are_not_an_object(arguments: str) -> None:
    """Arguments that are JSON but not a change request object are an error, not a crash."""
    handler = ChangeRequestToolHandler(dict(INVOICE))
    result = handler.handle(arguments)
    assert result.is_error
    assert result.report is None
    assert result.problems
    assert handler.payload == INVOICE


def test_summary_is_short_for_many_changes() -> None:
    """Long values are cut and a long list of changes ends with a count of the rest."""
    changes = [Change("add", ("items", i), new={"text": "x" * 100}) for i in range(25)]
    text = summarize_changes(changes, limit=3)
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith('- add items[0]: {"text":"xxx')
    assert lines[0].endswith("...")
    assert len(lines[0]) < 90
    assert lines[-1] == "- ... and 22 more"


def test_no_tool_claims_strict_mode() -> None:
    """Strict mode cannot express a change request (partials, index maps): no tool definition
    asks for it, and the Responses API's (strict unless told otherwise) says strict: false."""
    from agent_payload.tools import anthropic_tool, openai_tool, responses_tool

    assert "strict" not in openai_tool()["function"]
    assert responses_tool()["strict"] is False
    assert "strict" not in anthropic_tool()


def test_a_failed_call_after_good_ones_asks_only_for_its_own_part() -> None:
    """After an applied call, a refused call's tool result says earlier calls are kept and asks
    again only for this call's change (an obedient model must not apply the first call twice)."""
    from agent_payload.tools import ChangeRequestToolHandler

    handler = ChangeRequestToolHandler({"lines": [{"sku": "A"}]})
    assert not handler.handle('{"newElements":{"lines":[{"sku":"B"}]}}').is_error
    failed = handler.handle('{"updateElements":{"lines":{"5":{"sku":"Z"}}}}')
    assert failed.is_error
    assert "Changes from earlier successful calls are kept" in failed.content
    assert "still exactly as first shown" not in failed.content
    assert "does the whole task" not in failed.content
    assert handler.payload == {"lines": [{"sku": "A"}, {"sku": "B"}]}


def test_missing_or_odd_arguments() -> None:
    """A tool call without arguments is the model's error (an is_error result it can fix); a
    value that is neither text nor a mapping is the calling program's error (UsageError)."""
    import pytest

    from agent_payload.errors import UsageError
    from agent_payload.tools import ChangeRequestToolHandler

    handler = ChangeRequestToolHandler({"x": 1})
    result = handler.handle(None)  # type: ignore[arg-type]
    assert result.is_error and handler.payload == {"x": 1}
    with pytest.raises(UsageError, match="found int"):
        handler.handle(5)  # type: ignore[arg-type]
