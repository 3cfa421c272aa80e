"""Concurrent edits in the tool handler (README "Concurrent edits", MERGE.md section 9): the
handler knows each call's base and rebases a late call over what was applied since, or sends it
back with ``concurrent_change``; ``FakeProviderServer`` answers with several tool calls in one
response in each API's shape, and a loop of the user's own passes the base it read."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from pydantic import BaseModel

from agent_payload import ChangeRequestToolHandler
from agent_payload.errors import ConfigurationError, RetryWithFeedback, UsageError
from agent_payload.testing import FakeProviderServer, Reply
from agent_payload.tools import BASE_VERSION


def six_lines() -> dict[str, Any]:
    return {"lines": [{"sku": s, "qty": n} for n, s in enumerate("ABCDEF", start=1)]}


DELETE_B = {"updateElements": {"lines": {"1": "DELETE"}}}
E_TO_99 = {"updateElements": {"lines": {"4": {"qty": 99}}}}
B_TO_7 = {"updateElements": {"lines": {"1": {"qty": 7}}}}


def skus(payload: Any) -> list[tuple[str, int]]:
    return [(line["sku"], line["qty"]) for line in payload["lines"]]


MEANT = [("A", 1), ("C", 3), ("D", 4), ("E", 99), ("F", 6)]


# --- the handler --------------------------------------------------------------------------------


def test_two_calls_written_against_one_version_land_where_the_model_saw_them() -> None:
    """The issue's case: call 1 deletes lines[1], call 2 sets lines[4].qty, both against
    version 0. Without a base, call 2 lands on F; with it, on E."""
    h = ChangeRequestToolHandler(six_lines())
    base = h.version
    first = h.handle(DELETE_B, base_version=base)
    second = h.handle(E_TO_99, base_version=base)
    assert not first.is_error and not second.is_error
    assert skus(h.payload) == MEANT
    assert (first.version, second.version, second.base_version) == (1, 2, 0)
    # what was applied (and recorded) is the rebased request
    assert second.change_request is not None
    assert second.change_request.to_wire() == {"updateElements": {"lines": {"3": {"qty": 99}}}}
    assert [str(c.path) for c in second.changes] == ["('lines', 3, 'qty')"]
    assert second.content.startswith(
        "Applied 1 change (written against version 0; 1 call was applied since, so the "
        "positions below are the payload's as it is now):\n- update lines[3].qty: 5 -> 99"
    )
    assert first.content.startswith("Applied 1 change:\n")
    # today's behaviour without a base, for contrast: the edit lands on F
    blind = ChangeRequestToolHandler(six_lines())
    blind.handle(DELETE_B)
    blind.handle(E_TO_99)
    assert skus(blind.payload)[-1] == ("F", 99)


def test_a_colliding_call_goes_back_with_the_other_edit_and_the_current_subtree() -> None:
    h = ChangeRequestToolHandler(six_lines())
    h.handle(DELETE_B, base_version=0)
    before = copy.deepcopy(h.payload)
    late = h.handle(B_TO_7, base_version=0)
    assert late.is_error and h.payload == before and h.version == 1
    (problem,) = late.problems
    assert problem.code == "concurrent_change"
    assert problem.path == 'updateElements.lines["1"].qty'
    assert "deleted lines[1] (as you saw it)" in late.content
    assert '{"sku": "B", "qty": 2}' in late.content  # what the other edit did
    assert problem.has_current and problem.current == before["lines"]  # the current subtree
    assert "Nothing of your request was applied" in late.content
    assert "The payload is now version 1" in late.content


def test_the_turn_key_gives_every_call_of_one_response_the_first_calls_base() -> None:
    h = ChangeRequestToolHandler(six_lines())
    h.handle({"updateElements": {"lines": {"0": {"qty": 10}}}}, turn="response 1")
    h.handle(DELETE_B, turn="response 2")
    h.handle(E_TO_99, turn="response 2")
    assert skus(h.payload) == [("A", 10), *MEANT[1:]]
    assert [r.base_version for r in h.results] == [0, 1, 1]


def test_the_model_passes_the_base_version_back_in_its_arguments() -> None:
    """A loop that cannot tell which calls go together: the tool result states the version,
    the model passes it back as base_version (JSON text or a mapping)."""
    h = ChangeRequestToolHandler(six_lines())
    h.handle(json.dumps({**DELETE_B, BASE_VERSION: 0}))
    result = h.handle({**E_TO_99, BASE_VERSION: 0})
    assert not result.is_error and skus(h.payload) == MEANT
    # the caller's base wins over the model's
    h2 = ChangeRequestToolHandler(six_lines())
    h2.handle(DELETE_B)
    h2.handle({**E_TO_99, BASE_VERSION: 1}, base_version=0)
    assert skus(h2.payload) == MEANT


@pytest.mark.parametrize("bad", [7, -1, "0", True, 1.5])
def test_a_base_version_from_the_model_that_names_no_version_goes_back(bad: Any) -> None:
    h = ChangeRequestToolHandler(six_lines())
    result = h.handle({**DELETE_B, BASE_VERSION: bad})
    assert result.is_error and h.payload == six_lines() and h.version == 0
    assert [p.code for p in result.problems] == ["base_version"]
    assert "0 to 0" in result.content


def test_a_base_version_from_the_caller_that_names_no_version_is_a_usage_error() -> None:
    h = ChangeRequestToolHandler(six_lines())
    with pytest.raises(UsageError, match="base_version=3 is not a version"):
        h.handle(DELETE_B, base_version=3)
    assert h.results == []


def test_a_base_older_than_the_history_goes_back_with_the_current_payload() -> None:
    """Documented: only the last ``history`` versions are kept; an older base cannot be
    mapped, so the call is sent back (never applied where it might not belong)."""
    h = ChangeRequestToolHandler(six_lines(), history=2)
    for qty in (10, 11, 12):
        h.handle({"updateElements": {"lines": {"0": {"qty": qty}}}})
    assert len(h._bases.past) == 2  # memory is bounded
    late = h.handle(E_TO_99, base_version=0)
    assert late.is_error and late.problems[0].code == "concurrent_change"
    assert "changed 3 times since" in late.content and "the last 2 versions" in late.content
    assert late.problems[0].current == h.payload
    ok = h.handle(E_TO_99, base_version=1)  # still kept
    assert not ok.is_error and h.payload["lines"][4]["qty"] == 99
    with pytest.raises(ConfigurationError, match="history"):
        ChangeRequestToolHandler({}, history=-1)


def test_a_rebased_call_is_judged_like_any_call_validation_and_validators() -> None:
    class Line(BaseModel):
        sku: str
        qty: int

    class Order(BaseModel):
        lines: list[Line]

    seen: list[Any] = []

    def at_most_50(order: Order) -> None:
        seen.append(order)
        if any(line.qty > 50 for line in order.lines):
            raise RetryWithFeedback("no line may hold more than 50")

    h = ChangeRequestToolHandler(Order.model_validate(six_lines()), validators=[at_most_50])
    h.handle(DELETE_B, base_version=0)
    refused = h.handle(E_TO_99, base_version=0)
    assert refused.is_error and "no line may hold more than 50" in refused.content
    # the validator saw the rebased edit on the current payload: E (not F) at 99
    assert [(line.sku, line.qty) for line in seen[-1].lines][3] == ("E", 99)
    wrong_type = h.handle({"updateElements": {"lines": {"4": {"qty": "many"}}}}, base_version=0)
    assert wrong_type.is_error and "lines[3].qty" in wrong_type.content
    assert h.version == 1


def test_identical_effects_are_not_a_collision() -> None:
    h = ChangeRequestToolHandler({"status": "draft", "lines": [1, 2, 3]})
    h.handle({"updateElements": {"status": "paid"}}, base_version=0)
    again = h.handle({"updateElements": {"status": "paid"}}, base_version=0)
    assert not again.is_error and h.payload["status"] == "paid"


def test_parallel_async_calls_with_an_async_validator_are_judged_one_at_a_time() -> None:
    """``ahandle`` serialises the calls (an async validator awaits between the merge and the
    verdict); both calls of one turn land where the model saw them."""

    async def slow_ok(payload: Any) -> None:
        await asyncio.sleep(0)

    h = ChangeRequestToolHandler(six_lines(), validators=[slow_ok])

    async def run() -> list[Any]:
        return await asyncio.gather(h.ahandle(DELETE_B, turn="t"), h.ahandle(E_TO_99, turn="t"))

    results = asyncio.run(run())
    assert [r.is_error for r in results] == [False, False]
    assert skus(h.payload) == MEANT


def test_the_prompt_and_the_tool_name_the_version_and_base_version() -> None:
    h = ChangeRequestToolHandler(six_lines())
    h.handle(DELETE_B)
    parts = h.prompt("Set E to 99")
    assert "version 1" in parts.user and f"{BASE_VERSION} 1" in parts.user
    tool = h.openai_tool()["function"]
    assert BASE_VERSION in tool["description"]
    assert tool["parameters"]["properties"][BASE_VERSION]["type"] == "integer"


# --- FakeProviderServer: several tool calls in one response -------------------------------------

PAIR = Reply.tool_calls([DELETE_B, E_TO_99])


def test_reply_tool_calls_checks_its_calls() -> None:
    with pytest.raises(TypeError, match="non-empty list"):
        Reply.tool_calls([])
    with pytest.raises(TypeError, match=r"Reply\.tool_call"):
        Reply.tool_calls([Reply.message("hi")])
    named = Reply.tool_calls([Reply.tool_call({"a": 1}, name="other"), {"b": 2}])
    assert [c.tool_name for c in named.calls] == ["other", None]


def test_chat_completions_loop_of_ones_own(fake_server: FakeProviderServer) -> None:
    """A loop of the user's own: the handler's version read before the model request is the
    base of every call of the reply (README "Concurrent edits")."""
    fake_server.reset([PAIR, "done"])
    h = ChangeRequestToolHandler(six_lines())
    parts = h.prompt("Remove B and make E 99")
    messages: list[Any] = [
        {"role": "system", "content": parts.system},
        {"role": "user", "content": parts.user},
    ]
    with fake_server.openai_client() as client:
        while True:
            base = h.version
            reply = client.chat.completions.create(
                model="m", messages=messages, tools=[h.openai_tool()]
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                break
            messages.append(message.model_dump(exclude_none=True))
            assert len(message.tool_calls) == 2
            for call in message.tool_calls:
                result = h.handle(call.function.arguments, base_version=base)
                messages.append(result.openai_message(call.id))
    assert skus(h.payload) == MEANT
    tool_results = [m for m in fake_server.requests[1].body["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 2 and "version 2" in tool_results[1]["content"]
    assert fake_server.errors == []


def test_responses_api_several_function_calls(fake_server: FakeProviderServer) -> None:
    fake_server.reset([Reply.tool_calls([DELETE_B, Reply.tool_call(E_TO_99, name="x")])])
    h = ChangeRequestToolHandler(six_lines())
    with fake_server.openai_client() as client:
        response = client.responses.create(model="m", input="go", tools=[h.responses_tool()])
    calls = [item for item in response.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["apply_change_request", "x"]
    assert len({c.call_id for c in calls}) == 2
    for call in calls:
        h.handle(call.arguments, base_version=0)
    assert skus(h.payload) == MEANT


def test_anthropic_several_tool_use_blocks(fake_server: FakeProviderServer) -> None:
    fake_server.reset([PAIR])
    h = ChangeRequestToolHandler(six_lines())
    with fake_server.anthropic_client() as client:
        message = client.messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "go"}],
            tools=[h.anthropic_tool()],
        )
    blocks = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and len(blocks) == 2
    assert blocks[0].input == DELETE_B and blocks[1].input == E_TO_99
    for block in blocks:  # the message id names the response the calls came from
        h.handle(block.input, turn=message.id)
    assert skus(h.payload) == MEANT


def test_a_turn_block_gives_its_calls_the_version_current_when_it_began() -> None:
    h = ChangeRequestToolHandler(six_lines())
    other = ChangeRequestToolHandler(six_lines())
    with h.turn() as base:
        assert base == 0
        h.handle(DELETE_B)
        other.handle(DELETE_B)  # another handler's calls are not in this block
        other.handle(E_TO_99)
        h.handle(E_TO_99, turn="ignored: the block says which response")
    assert skus(h.payload) == MEANT
    assert skus(other.payload)[-1] == ("F", 99)
    h.handle({"updateElements": {"lines": {"0": {"qty": 10}}}})  # after the block: current
    assert h.results[-1].base_version is None and h.payload["lines"][0]["qty"] == 10


def test_versions_false_leaves_the_version_to_a_host_that_numbers_its_own() -> None:
    """The MCP server numbers its file's versions itself: its handlers state none."""
    h = ChangeRequestToolHandler(six_lines(), versions=False)
    tool = h.anthropic_tool()
    assert BASE_VERSION not in tool["description"]
    assert BASE_VERSION not in tool["input_schema"]["properties"]
    assert "version" not in h.prompt("Set E to 99").user.rsplit("</task>", 1)[1]
    applied = h.handle(DELETE_B)
    assert "version" not in applied.content and applied.version == 1
    late = h.handle(E_TO_99, base_version=0)  # the caller's base still counts
    assert not late.is_error and skus(h.payload) == MEANT
    unknown = h.handle({**E_TO_99, BASE_VERSION: 0})  # not an argument of this tool
    assert unknown.is_error and "base_version" in unknown.content


def test_a_session_records_a_rebased_call_as_applied_and_undoes_it() -> None:
    from agent_payload import PayloadSession

    h = ChangeRequestToolHandler(six_lines())
    session = PayloadSession(None, six_lines())
    with h.turn():
        for args in (DELETE_B, E_TO_99):
            session.record("Remove B, 99 of E", h.handle(args))
    assert skus(session.payload) == MEANT
    assert session.history[1].change_request == {"updateElements": {"lines": {"3": {"qty": 99}}}}
    session.undo()
    assert skus(session.payload) == [("A", 1), ("C", 3), ("D", 4), ("E", 5), ("F", 6)]


def test_the_agents_sdk_turn_is_unknown_when_the_model_counts_no_requests() -> None:
    """Every response of such a run would share one key (a base too old for all but the
    first): the calls are judged against the current payload instead."""
    from types import SimpleNamespace

    from agent_payload.integrations.openai_agents import _turn

    usage = SimpleNamespace(requests=0)
    assert _turn(SimpleNamespace(usage=usage)) is None
    usage.requests = 2
    assert _turn(SimpleNamespace(usage=usage)) == _turn(SimpleNamespace(usage=usage))
    assert _turn(SimpleNamespace(usage=usage)) != _turn(
        SimpleNamespace(usage=SimpleNamespace(requests=2))
    )


def test_a_late_call_that_conflicts_with_its_own_base_goes_back_showing_the_current_payload() -> (
    None
):
    """Judged on its base first (lines[6] was past the end of the six lines the model saw);
    the value shown is the current one, which the model's next call is read against."""
    h = ChangeRequestToolHandler(six_lines())
    h.handle(DELETE_B, base_version=0)
    late = h.handle({"updateElements": {"lines": {"6": {"qty": 9}}}}, base_version=0)
    assert late.is_error and [p.code for p in late.problems] == ["index_out_of_range"]
    assert late.problems[0].message.startswith("in the payload as you saw it: ")
    assert "it has 6 elements" in late.content
    assert late.problems[0].current == h.payload["lines"]  # five lines, as they are now
    # in range in the base: rebased like any late call (F is at 4 now)
    ok = h.handle({"updateElements": {"lines": {"5": {"qty": 9}}}}, base_version=0)
    assert not ok.is_error and h.payload["lines"][4] == {"sku": "F", "qty": 9}


def test_the_judge_rebases_a_reply_written_against_its_base() -> None:
    from agent_payload import apply_change_request
    from agent_payload.judge import Judge

    base = six_lines()
    current = apply_change_request(base, DELETE_B).payload
    late = Judge(current, base=base, applied=[DELETE_B])
    verdict = late(json.dumps(E_TO_99))
    assert verdict.accepted and skus(verdict.payload) == MEANT
    assert verdict.change_request is not None
    assert verdict.change_request.to_wire() == {"updateElements": {"lines": {"3": {"qty": 99}}}}
    refused = late(json.dumps(B_TO_7))
    assert refused.status == "problems" and refused.codes == ("concurrent_change",)
    assert refused.stage == "merge" and refused.problems[0].current == current["lines"]
    assert base == six_lines()  # inputs untouched


def test_with_a_read_scope_a_collision_never_shows_what_the_other_edit_wrote() -> None:
    """``applied`` may come from a writer the scope did not judge: its values are not shown."""
    from agent_payload import ReadScope, apply_change_request
    from agent_payload.judge import Judge

    base = {"lines": [{"sku": s, "cost": 1000 + n} for n, s in enumerate("ABC")]}
    other = {"updateElements": {"lines": {"1": "DELETE"}}}  # removes cost 1001 with it
    current = apply_change_request(base, other).payload
    scope = ReadScope(exclude=["lines[*].cost"])
    verdict = Judge(current, base=base, applied=[other], read_scope=scope)(
        json.dumps({"updateElements": {"lines": {"1": {"sku": "b"}}}})
    )
    assert verdict.codes == ("concurrent_change",)
    text = verdict.feedback(output_mode="tool")
    assert "1001" not in text and "cost" not in text
    assert "another edit changed what this entry touches" in text


# --- sessions: a turn that finishes after others ------------------------------------------------


def _concurrent_sends(second: dict[str, Any]) -> tuple[Any, list[Any]]:
    """Two ``send``s of an ``AsyncPayloadSession`` started together from one payload."""
    from agent_payload import AsyncPayloadAgent, AsyncPayloadSession
    from agent_payload.providers.base import ModelRequest
    from agent_payload.testing import ScriptedModel

    def answer(request: ModelRequest) -> str:
        first = "Remove B" in request.messages[-1].content
        return json.dumps(DELETE_B if first else second)

    agent = AsyncPayloadAgent(ScriptedModel(answer), max_retries=0)
    session = AsyncPayloadSession(agent, six_lines())

    async def both() -> list[Any]:
        sends = (session.send("Remove B"), session.send("Change a line"))
        return await asyncio.gather(*sends, return_exceptions=True)

    return session, asyncio.run(both())


def test_a_session_turn_that_finished_after_another_is_rebased_over_it() -> None:
    session, outcomes = _concurrent_sends(E_TO_99)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    assert skus(session.payload) == MEANT
    assert [t.task for t in session.history] == ["Remove B", "Change a line"]
    assert session.history[1].change_request == {"updateElements": {"lines": {"3": {"qty": 99}}}}
    session.undo()
    session.undo()
    assert session.payload == six_lines()


def test_a_session_turn_colliding_with_one_recorded_meanwhile_raises_and_changes_nothing() -> None:
    from agent_payload.errors import ConcurrentChangeError

    session, outcomes = _concurrent_sends(B_TO_7)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentChangeError)
    assert "Send the task again" in str(errors[0])
    assert [c.code for c in errors[0].report.conflicts] == ["concurrent_change"]
    assert [t.task for t in session.history] == ["Remove B"]
    assert skus(session.payload) == [("A", 1), ("C", 3), ("D", 4), ("E", 5), ("F", 6)]
