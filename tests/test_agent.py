"""PayloadAgent / AsyncPayloadAgent with a scripted model: the correction loop end to end.

Most tests run twice, through the sync and the async agent (the ``run`` fixture), since both
are drivers around the same pure state and must behave the same.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import BaseModel, Field
from tenacity import AsyncRetrying, Retrying, stop_after_attempt

from agent_payload.agent import AgentResult, AsyncPayloadAgent, Hooks, PayloadAgent
from agent_payload.errors import (
    ConfigurationError,
    InvalidPayloadError,
    ModelReplyError,
    ProviderError,
    RefusalError,
    RetriesExhaustedError,
    RetryWithFeedback,
    UsageError,
)
from agent_payload.providers.base import ModelReply, ModelRequest
from agent_payload.report import Change, Finding, Problem
from agent_payload.testing import ScriptedModel
from agent_payload.usage import Usage, estimate_tokens

Runner = Callable[..., AgentResult[Any]]


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Runner:
    """``run(model, payload, task, agent={...}, **run_kwargs)`` through either agent."""

    def sync_run(model: Any, payload: Any, task: str, agent: Any = None, **kw: Any) -> Any:
        return PayloadAgent(model, **(agent or {})).run(payload, task, **kw)

    def async_run(model: Any, payload: Any, task: str, agent: Any = None, **kw: Any) -> Any:
        return asyncio.run(AsyncPayloadAgent(model, **(agent or {})).run(payload, task, **kw))

    return sync_run if request.param == "sync" else async_run


def wire(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


CUSTOMER = {
    "name": "Ada",
    "tags": ["vip", "early"],
    "address": {"city": "Paris", "zip": "75001"},
    "orders": [{"id": 1, "total": 10}, {"id": 2, "total": 20}],
}


def customer() -> dict[str, Any]:
    return copy.deepcopy(CUSTOMER)


class Order(BaseModel):
    id: int
    total: int


class Customer(BaseModel):
    name: str
    tags: list[str]
    address: dict[str, str]
    orders: list[Order]


# --- the happy path ----------------------------------------------------------------------------


def test_clean_run_returns_updated_copy(run: Runner) -> None:
    """One good reply: the merged payload comes back (a dict for a dict), with the change
    request, report, reasoning, one attempt, its usage, the raw reply; the caller's dict is
    untouched and the first request is system + user naming the task and the marker."""
    payload = customer()
    reply = wire({"updateElements": {"address": {"city": "Lyon"}}, "reasoning": "moved"})
    model = ScriptedModel([reply])
    result = run(model, payload, "Ada moved to Lyon")
    assert payload == CUSTOMER
    assert isinstance(result.payload, dict)
    assert result.payload["address"] == {"city": "Lyon", "zip": "75001"}
    assert result.payload["orders"] == CUSTOMER["orders"]
    assert result.reasoning == "moved"
    assert result.attempts == 1
    assert result.replies == (reply,)
    assert result.usage == model_usage(model, [reply])
    assert [c.path for c in result.changes] == [("address", "city")]
    assert result.change_request.update_elements == {"address": {"city": "Lyon"}}
    assert result.marker == "DELETE"
    (request,) = model.requests
    assert [m.role for m in request.messages] == ["system", "user"]
    assert "Ada moved to Lyon" in request.messages[1].content
    assert '"DELETE"' in request.messages[0].content + request.messages[1].content
    assert request.output_mode == "text" and request.schema is None


def model_usage(model: ScriptedModel, replies: Sequence[str]) -> Usage:
    """What ScriptedModel reports for these replies to the recorded requests."""
    total = Usage()
    for request, text in zip(model.requests, replies, strict=True):
        prompt = "".join(m.content for m in request.messages)
        total = total + Usage(max(1, (len(prompt) + 3) // 4), max(1, (len(text) + 3) // 4), 1)
    return total


def test_result_shares_nothing_with_the_input(run: Runner) -> None:
    """Changing the returned payload never reaches the caller's payload (independent copy)."""
    payload = customer()
    result = run(ScriptedModel([wire({"updateElements": {"name": "Eve"}})]), payload, "rename")
    result.payload["orders"][0]["total"] = 999
    result.payload["address"]["city"] = "Nowhere"
    result.payload["tags"].append("x")
    assert payload == CUSTOMER


def test_list_payload_comes_back_as_list(run: Runner) -> None:
    """A payload whose root is an array is returned as a list."""
    payload = [{"id": 1}, {"id": 2}]
    model = ScriptedModel([wire({"updateElements": [{}, {"id": 3}]})])
    result = run(model, payload, "renumber the second")
    assert result.payload == [{"id": 1}, {"id": 3}]
    assert payload == [{"id": 1}, {"id": 2}]


def test_pydantic_in_pydantic_out(run: Runner) -> None:
    """A pydantic payload comes back as a new instance of the same class; the caller's
    instance is unchanged; the class's schema is in the prompt."""
    payload = Customer.model_validate(customer())
    model = ScriptedModel([wire({"updateElements": {"orders": [{}, {"total": 25}]}})])
    result = run(model, payload, "order 2 costs 25")
    assert type(result.payload) is Customer
    assert result.payload.orders[1].total == 25
    assert payload.orders[1].total == 20
    assert "total" in model.requests[0].messages[1].content


def test_rewrite_tokens_compared_with_change_tokens(run: Runner) -> None:
    """On a large payload with a small edit, a full rewrite is estimated to cost many times
    the change request."""
    payload = {"items": [{"id": i, "label": f"item number {i}"} for i in range(200)]}
    model = ScriptedModel([wire({"updateElements": {"items": {"150": {"label": "x"}}}})])
    result = run(model, payload, "relabel item 150")
    assert result.payload["items"][150]["label"] == "x"
    assert result.rewrite_tokens > 20 * result.change_tokens > 0
    assert result.tokens_saved == result.rewrite_tokens - result.change_tokens


def test_rewrite_tokens_count_the_result_as_minified_json_by_alias(run: Runner) -> None:
    """``rewrite_tokens`` is counted when first read (a run does not write and tokenize the
    whole result for it): the estimate of the result's minified JSON, by alias for a model,
    the same on every read and on a copy."""

    class Line(BaseModel):
        model_config = {"populate_by_name": True}
        unit_price: int = Field(alias="unitPrice")

    class Order(BaseModel):
        lines: list[Line]

    order = Order(lines=[Line(unit_price=i) for i in range(50)])
    model = ScriptedModel([wire({"updateElements": {"lines": {"3": {"unitPrice": 99}}}})])
    result = run(model, order, "line 4 costs 99")
    text = result.payload.model_dump_json(by_alias=True)
    assert '"unitPrice":99' in text
    assert result.rewrite_tokens == estimate_tokens(text) == result.rewrite_tokens
    assert copy.deepcopy(result).rewrite_tokens == result.rewrite_tokens
    assert "rewrite_tokens" not in repr(result)  # a count is not part of what the result is


# --- corrections -------------------------------------------------------------------------------


def test_malformed_reply_fixed_on_retry(run: Runner) -> None:
    """A reply that is not a change request is sent back with a correction; the second attempt
    sends the original messages, the bad reply as the assistant and the correction as the user,
    and its good reply is applied."""
    bad = "Sure! I will update the city for you."
    good = wire({"updateElements": {"address": {"city": "Lyon"}}})
    model = ScriptedModel([bad, good])
    result = run(model, customer(), "Ada moved to Lyon")
    assert result.attempts == 2
    assert result.replies == (bad, good)
    assert result.payload["address"]["city"] == "Lyon"
    first, second = model.requests
    assert second.messages[:2] == first.messages
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    assert second.messages[2].content == bad
    assert "discarded" in second.messages[3].content
    assert result.usage == model_usage(model, [bad, good])


def test_merge_conflict_fixed_on_retry(run: Runner) -> None:
    """A conflicting request is not applied; the correction names the conflict's
    change-request path and shows the current subtree; the next reply is applied alone."""
    conflicting = wire({"updateElements": {"tags": {"first": "gold"}, "name": "Eve"}})
    good = wire({"updateElements": {"tags": ["gold"]}})
    model = ScriptedModel([conflicting, good])
    result = run(model, customer(), "make the first tag gold")
    correction = model.requests[1].messages[3].content
    assert "updateElements.tags" in correction
    assert '"early"' in correction  # the current value of tags is shown
    assert result.payload["tags"] == ["gold", "early"]
    assert result.payload["name"] == "Ada"  # nothing of the conflicting request applied


def test_validation_error_fixed_on_retry_dict_with_payload_type(run: Runner) -> None:
    """With ``payload_type``, a merged dict that does not validate goes back with the payload
    path and the offending value; the dict result stays a dict."""
    bad = wire({"updateElements": {"orders": [{}, {"total": "lots"}]}})
    good = wire({"updateElements": {"orders": [{}, {"total": 99}]}})
    model = ScriptedModel([bad, good])
    result = run(model, customer(), "raise order 2", payload_type=Customer)
    correction = model.requests[1].messages[3].content
    assert "orders[1].total" in correction
    assert "lots" in correction
    assert isinstance(result.payload, dict)
    assert result.payload["orders"][1]["total"] == 99


def test_validation_error_fixed_on_retry_pydantic(run: Runner) -> None:
    """A pydantic payload whose merge does not validate is corrected the same way."""
    payload = Customer.model_validate(customer())
    bad = wire({"updateElements": {"orders": [{}, {"total": "lots"}]}})
    good = wire({"updateElements": {"orders": [{}, {"total": 99}]}})
    model = ScriptedModel([bad, good])
    result = run(model, payload, "raise order 2")
    assert "orders[1].total" in model.requests[1].messages[3].content
    assert result.payload.orders[1].total == 99
    assert payload.orders[1].total == 20


def test_user_validator_retry_with_feedback(run: Runner) -> None:
    """A validator raising ``RetryWithFeedback`` sends its message back; agent-level and
    run-level validators both run, on the merged payload of the kind returned."""
    seen: list[Any] = []

    def no_empty_name(payload: Any) -> None:
        seen.append(payload)
        if not payload["name"]:
            raise RetryWithFeedback("name must not be empty; keep Ada's name", path="name")

    def always_ok(payload: Any) -> None:
        seen.append("agent-level")

    model = ScriptedModel(
        [wire({"updateElements": {"name": ""}}), wire({"updateElements": {"name": "Ada L."}})]
    )
    result = run(
        model,
        customer(),
        "full name",
        agent={"validators": [always_ok]},
        validators=[no_empty_name],
    )
    assert "keep Ada's name" in model.requests[1].messages[3].content
    assert result.payload["name"] == "Ada L."
    assert seen.count("agent-level") == 2
    assert [p["name"] for p in seen if isinstance(p, dict)] == ["", "Ada L."]


def test_truncated_reply_never_applied(run: Runner) -> None:
    """A reply cut by the token limit is not applied even if it parses; the correction asks for
    a smaller change request."""
    cut = ModelReply(
        text=wire({"updateElements": {"name": "Cut"}}),
        finish_reason="length",
        truncated=True,
        usage=Usage(10, 5, 1),
    )
    good = wire({"updateElements": {"name": "Eve"}})
    model = ScriptedModel([cut, good])
    result = run(model, customer(), "rename")
    assert result.payload["name"] == "Eve"
    assert result.attempts == 2
    correction = model.requests[1].messages[3].content.lower()
    assert "cut off" in correction or "smaller" in correction


def test_truncated_reply_with_no_retry_left_leaves_payload(run: Runner) -> None:
    """With no retry left, a truncated reply ends in ``RetriesExhaustedError`` (kind
    ``truncated``), never in a partially applied payload."""
    payload = customer()
    cut = ModelReply(text=wire({"replaceElements": {"name": "X"}}), truncated=True)
    with pytest.raises(RetriesExhaustedError) as info:
        run(ScriptedModel([cut]), payload, "rename", agent={"max_retries": 0})
    assert [p.kind for p in info.value.problems] == ["truncated"]
    assert payload == CUSTOMER


def test_refusal_retried_once_then_reported(run: Runner) -> None:
    """A first refusal is answered with a correction; a second one stops the run with
    ``RefusalError`` although retries remain."""
    refusal = ModelReply(text="", refusal="I can't help with that.", finish_reason="stop")
    model = ScriptedModel([refusal, refusal, wire({"updateElements": {"name": "Eve"}})])
    with pytest.raises(RefusalError) as info:
        run(model, customer(), "rename", agent={"max_retries": 5})
    assert len(model.requests) == 2
    assert "can't help" in str(info.value)
    assert model.remaining == 1


def test_refusal_then_good_reply(run: Runner) -> None:
    """After one refusal a good reply is applied."""
    refusal = ModelReply(text="", refusal="No.", finish_reason="refusal")
    model = ScriptedModel([refusal, wire({"updateElements": {"name": "Eve"}})])
    result = run(model, customer(), "rename")
    assert result.payload["name"] == "Eve"
    assert "declined the task" in model.requests[1].messages[3].content


# --- running out ---------------------------------------------------------------------------------


def test_retries_exhausted_carries_details(run: Runner) -> None:
    """Out of retries: the error has the attempts, the usage summed over all of them, the last
    reply, the last problems and every reply; the caller's payload is untouched; the error is
    chained to the last reply's error."""
    payload = customer()
    replies = ["nope", "still nope", "{not json"]
    model = ScriptedModel(replies)
    with pytest.raises(RetriesExhaustedError) as info:
        run(model, payload, "rename", agent={"max_retries": 2})
    error = info.value
    assert error.attempts == 3
    assert error.usage == model_usage(model, replies)
    assert error.last_reply == "{not json"
    assert error.replies == replies
    assert error.problems and all(isinstance(p, Problem) for p in error.problems)
    assert isinstance(error.__cause__, ModelReplyError)
    assert "unchanged" in str(error)
    assert payload == CUSTOMER


def test_token_budget_stops_early(run: Runner) -> None:
    """A token budget stops the loop as soon as it is spent, with the same error, although
    retries remain."""
    model = ScriptedModel(["nope"] * 6)
    with pytest.raises(RetriesExhaustedError) as info:
        run(model, customer(), "rename", agent={"max_retries": 5, "token_budget": 1})
    assert info.value.attempts == 1
    assert len(model.requests) == 1
    assert "budget" in str(info.value)


def test_conversation_size_is_constant_over_ten_attempts(run: Runner) -> None:
    """Attempt k sends the original messages plus only the last failed reply and its
    correction: from attempt 2 to 10 the conversation has the same messages and size."""
    model = ScriptedModel(["this is not JSON"] * 10)
    with pytest.raises(RetriesExhaustedError):
        run(model, customer(), "rename", agent={"max_retries": 9})
    assert len(model.requests) == 10
    sizes = {(len(r.messages), sum(len(m.content) for m in r.messages)) for r in model.requests[1:]}
    assert len(sizes) == 1
    ((count, _),) = sizes
    assert count == 4
    first = model.requests[0].messages
    assert all(r.messages[:2] == first for r in model.requests)


def test_provider_error_propagates_without_retry(run: Runner) -> None:
    """A transport failure is not retried by the loop: it propagates at once."""
    failure = ProviderError("rate limited (HTTP 429)", provider="test", status_code=429)
    model = ScriptedModel([failure, wire({"updateElements": {"name": "Eve"}})])
    errors: list[tuple[BaseException, int]] = []
    with pytest.raises(ProviderError) as info:
        run(
            model,
            customer(),
            "rename",
            agent={"max_retries": 3, "on_error": lambda e, a: errors.append((e, a))},
        )
    assert len(model.requests) == 1
    assert errors == [(info.value, 1)]


def test_retries_are_logged(run: Runner, caplog: pytest.LogCaptureFixture) -> None:
    """Each retry and the failed run are logged at INFO on the agent_payload logger."""
    caplog.set_level(logging.DEBUG, logger="agent_payload")
    with pytest.raises(RetriesExhaustedError):
        run(ScriptedModel(["bad", "worse"]), customer(), "rename", agent={"max_retries": 1})
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "agent_payload"]
    assert [level for level, _ in records if level != "DEBUG"] == ["INFO", "INFO", "INFO"]
    assert "attempt 1" in records[1][1] and "unchanged" in records[-1][1]


def test_user_retrying_policy(run: Runner) -> None:
    """A tenacity policy given as ``max_retries`` sets the number of attempts; its catch-all
    retry condition does not make transport errors retried."""
    policy = Retrying(stop=stop_after_attempt(3))
    model = ScriptedModel(["a", "b", "c", "d"])
    with pytest.raises(RetriesExhaustedError) as info:
        run(model, customer(), "rename", agent={"max_retries": policy})
    assert info.value.attempts == 3
    failure = ProviderError("down", provider="test", status_code=500)
    model = ScriptedModel([failure, "x"])
    with pytest.raises(ProviderError):
        run(model, customer(), "rename", agent={"max_retries": policy})
    assert len(model.requests) == 1


def test_async_retrying_policy_with_async_agent() -> None:
    """``AsyncPayloadAgent`` accepts an ``AsyncRetrying`` policy."""
    model = ScriptedModel(["a", wire({"updateElements": {"name": "Eve"}})])
    agent = AsyncPayloadAgent(model, max_retries=AsyncRetrying(stop=stop_after_attempt(2)))
    result = asyncio.run(agent.run(customer(), "rename"))
    assert result.attempts == 2


# --- markers -----------------------------------------------------------------------------------


def test_marker_when_data_holds_delete(run: Runner) -> None:
    """Data holding "DELETE" activates "__DELETE__" alone, named in the prompt: "__DELETE__"
    deletes; "DELETE" in updateElements is a stale_marker correction (MERGE.md section 4,
    issue 30) and newElements writes it as data (an HTTP method stays and can be written)."""
    payload = {
        "endpoints": [{"path": "/a", "method": "GET"}, {"path": "/b", "method": "DELETE"}],
        "debug": True,
    }
    habit = wire({"updateElements": {"endpoints": [{"method": "DELETE"}], "debug": "__DELETE__"}})
    reply = wire(
        {
            "newElements": {"endpoints": {"0": {"method": "DELETE"}}},
            "updateElements": {"debug": "__DELETE__"},
        }
    )
    model = ScriptedModel([habit, reply])
    result = run(model, payload, "make /a a DELETE endpoint and drop debug")
    assert result.marker == "__DELETE__"
    assert '"__DELETE__"' in model.requests[0].messages[0].content
    assert "stale_marker" in model.requests[1].messages[-1].content
    assert result.payload == {
        "endpoints": [{"path": "/a", "method": "DELETE"}, {"path": "/b", "method": "DELETE"}]
    }


def test_marker_when_data_holds_both(run: Runner) -> None:
    """Data holding both "DELETE" and "__DELETE__" gets a fresh marker; both strings are
    plain data written with newElements (in updateElements they would be stale_marker)."""
    payload = {"method": "DELETE", "note": "__DELETE__", "x": 1, "y": 2}
    model = ScriptedModel(
        lambda request: wire(
            {
                "newElements": {"x": "DELETE", "y": "__DELETE__"},
                "updateElements": {"method": "DELETE"},
            }
        )
    )
    result = run(model, payload, "odd task")
    assert result.marker.startswith("__DELETE_") and result.marker not in ("__DELETE__",)
    assert result.marker in model.requests[0].messages[0].content
    assert result.payload == {
        "method": "DELETE",
        "note": "__DELETE__",
        "x": "DELETE",
        "y": "__DELETE__",
    }


# --- hooks ------------------------------------------------------------------------------------


def test_hooks_called_with_attempt_and_is_last(run: Runner) -> None:
    """Hooks see the attempt number and whether it is the last: with one retry, attempt 1 is
    not last and attempt 2 is; on_retry reports the problems; on_success gets the result."""
    calls: list[tuple[Any, ...]] = []
    hooks = Hooks(
        on_request=lambda a, req, last: calls.append(("request", a, last, type(req))),
        on_response=lambda a, rep, last: calls.append(("response", a, last, rep.text)),
        on_retry=lambda a, problems, last: calls.append(("retry", a, last, len(problems) > 0)),
        on_success=lambda result: calls.append(("success", result.attempts)),
        on_error=lambda error, attempts: calls.append(("error", attempts)),
    )
    good = wire({"updateElements": {"name": "Eve"}})
    run(
        ScriptedModel(["bad", good]), customer(), "rename", agent={"hooks": hooks, "max_retries": 1}
    )
    assert calls == [
        ("request", 1, False, ModelRequest),
        ("response", 1, False, "bad"),
        ("retry", 1, False, True),
        ("request", 2, True, ModelRequest),
        ("response", 2, True, good),
        ("success", 2),
    ]


def test_hooks_on_failure(run: Runner) -> None:
    """When the last attempt fails, on_retry says is_last and on_error gets the error and the
    number of attempts (keyword hooks work as well as a Hooks object)."""
    calls: list[tuple[Any, ...]] = []
    with pytest.raises(RetriesExhaustedError):
        run(
            ScriptedModel(["bad", "worse"]),
            customer(),
            "rename",
            agent={
                "max_retries": 1,
                "on_retry": lambda a, p, last: calls.append(("retry", a, last)),
                "on_error": lambda e, a: calls.append(("error", type(e), a)),
            },
        )
    assert calls == [("retry", 1, False), ("retry", 2, True), ("error", RetriesExhaustedError, 2)]


def test_async_hooks_may_be_coroutines() -> None:
    """In the async agent a hook may be a coroutine function; it is awaited."""
    seen: list[int] = []

    async def on_request(attempt: int, request: ModelRequest, is_last: bool) -> None:
        await asyncio.sleep(0)
        seen.append(attempt)

    model = ScriptedModel([wire({"updateElements": {"name": "Eve"}})])
    agent = AsyncPayloadAgent(model, on_request=on_request)
    asyncio.run(agent.run(customer(), "rename"))
    assert seen == [1]


# --- guards ------------------------------------------------------------------------------------


def no_name_changes(change: Change) -> list[Finding]:
    if change.path[:1] == ("name",):
        return [Finding("permission_denied", "name is read-only", "conflict")]
    return []


class ReadOnlyName:
    """A permissions object: a guard with a description for the prompt."""

    def __call__(self, change: Change) -> list[Finding]:
        return no_name_changes(change)

    def describe(self) -> str:
        return "You may not change name."


def test_guard_conflict_goes_back_to_the_model(run: Runner) -> None:
    """A guard finding of severity conflict refuses the request; the model is told and its
    next request is applied."""
    model = ScriptedModel(
        [
            wire({"updateElements": {"name": "Eve", "tags": ["gold"]}}),
            wire({"updateElements": {"tags": ["gold"]}}),
        ]
    )
    result = run(model, customer(), "rename and regild", agent={"guards": [no_name_changes]})
    assert "permission_denied" in model.requests[1].messages[3].content
    assert result.payload["name"] == "Ada" and result.payload["tags"][0] == "gold"


def test_permissions_object_described_in_prompt(run: Runner) -> None:
    """A permissions object is used as a guard and its describe() goes into the prompt."""
    # (the second reply says nothing should change: since issue 9 a `[]` that changes nothing
    # would itself be sent back)
    model = ScriptedModel(
        [wire({"updateElements": {"name": "Eve"}}), wire({"reasoning": "The name stays."})]
    )
    result = run(model, customer(), "rename", agent={"permissions": ReadOnlyName()})
    assert "You may not change name." in model.requests[0].messages[0].content
    assert result.payload["name"] == "Ada"


def shrink_confirm(change: Change) -> list[Finding]:
    if change.op == "delete":
        return [Finding("data_loss", "this deletes data", "confirm")]
    return []


def test_confirm_finding_confirmed_by_resending(run: Runner) -> None:
    """A confirm finding shows the model before/after once; the same request sent again is
    confirmed and applied, with the finding in ``confirmed``."""
    request = wire({"removeElements": {"address": "DELETE"}})
    model = ScriptedModel([request, request])
    result = run(model, customer(), "drop the address", agent={"guards": [shrink_confirm]})
    assert "address" not in result.payload
    assert result.attempts == 2
    assert [f.code for f in result.confirmed] == ["data_loss"]
    confirm = model.requests[1].messages[3].content
    assert "same change request again" in confirm and "Paris" in confirm


def test_confirm_finding_withdrawn(run: Runner) -> None:
    """If the model sends another request after the confirmation question, that one is judged
    on its own (here: no deletion, applied without confirmation)."""
    model = ScriptedModel(
        [
            wire({"removeElements": {"address": "DELETE"}}),
            wire({"updateElements": {"address": {"city": "Lyon"}}}),
        ]
    )
    result = run(model, customer(), "fix the address", agent={"guards": [shrink_confirm]})
    assert result.payload["address"]["city"] == "Lyon"
    assert result.confirmed == ()


def test_unconfirmed_change_never_applied(run: Runner) -> None:
    """With no attempt left to confirm, a change needing confirmation is not applied."""
    payload = customer()
    model = ScriptedModel([wire({"removeElements": {"address": "DELETE"}})])
    with pytest.raises(RetriesExhaustedError) as info:
        run(model, payload, "drop", agent={"guards": [shrink_confirm], "max_retries": 0})
    assert [p.kind for p in info.value.problems] == ["guard"]
    assert payload == CUSTOMER


# --- construction and misuse -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"output_mode": "xml"}, "output_mode"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": "3"}, "max_retries"),
        ({"token_budget": 0}, "token_budget"),
        ({"guards": [42]}, "guards"),
    ],
)
def test_bad_options_raise_configuration_error(kwargs: dict[str, Any], needle: str) -> None:
    """Wrong options fail at construction with a ConfigurationError naming the option."""
    with pytest.raises(ConfigurationError, match=needle):
        PayloadAgent(ScriptedModel([]), **kwargs)


def test_client_without_model_name() -> None:
    """An object that is not a Model needs model_name; the error says so."""
    with pytest.raises(ConfigurationError, match="model_name"):
        PayloadAgent(object())


def test_bad_payload_fails_before_any_request(run: Runner) -> None:
    """A payload that is not JSON data is refused before a token is spent."""
    model = ScriptedModel([])
    with pytest.raises(InvalidPayloadError):
        run(model, {"when": {1, 2}}, "anything")
    assert model.requests == []


def test_empty_task_is_a_usage_error(run: Runner) -> None:
    """An empty task is refused before any request."""
    with pytest.raises(UsageError, match="task"):
        run(ScriptedModel([]), customer(), "  ")


def test_tool_mode_sends_schema(run: Runner) -> None:
    """In tool mode the request carries the change request's JSON Schema; the reply (the tool
    arguments) is parsed like text."""
    model = ScriptedModel([wire({"updateElements": {"name": "Eve"}})])
    result = run(model, customer(), "rename", agent={"output_mode": "tool"}, payload_type=Customer)
    request = model.requests[0]
    assert request.output_mode == "tool"
    assert isinstance(request.schema, dict) and "properties" in json.dumps(request.schema)
    assert result.payload["name"] == "Eve"


def test_concurrent_async_runs_are_independent() -> None:
    """Many concurrent runs on one AsyncPayloadAgent each get their own payload back, corrections
    included (each run has its own state and retry controller)."""

    def answer(request: ModelRequest) -> str:
        user = request.messages[1].content
        number = int(user.split("RUN-")[1].split('"')[0])
        if len(request.messages) == 2 and number % 3 == 0:
            return "not json"
        return wire({"updateElements": {"n": number * 2}})

    agent = AsyncPayloadAgent(ScriptedModel(answer))

    async def main() -> list[AgentResult[dict[str, Any]]]:
        return await asyncio.gather(
            *(agent.run({"id": f"RUN-{i}", "n": i}, "double n") for i in range(60))
        )

    results = asyncio.run(main())
    assert [r.payload["n"] for r in results] == [i * 2 for i in range(60)]
    assert [r.attempts for r in results] == [2 if i % 3 == 0 else 1 for i in range(60)]


def test_expected_version_refuses_a_stale_payload_before_any_request() -> None:
    """run(expected_version=...) raises StalePayloadError when the payload is no longer the version
    the caller read, and the model is never asked (no tokens spent on a stale payload)."""
    from agent_payload.errors import StalePayloadError
    from agent_payload.guards import payload_version
    from agent_payload.store import VersionedStore
    from agent_payload.testing import ScriptedModel

    store = VersionedStore({"status": "draft", "n": 1})
    seen, read_version = store.get()
    store.replace({"status": "sent", "n": 1}, expected_version=read_version)  # someone else
    model = ScriptedModel(['{"updateElements":{"n":2}}'])
    agent = PayloadAgent(model)
    with pytest.raises(StalePayloadError):
        agent.run(store.get()[0], "set n to 2", expected_version=read_version)
    assert len(model.requests) == 0
    # the version the caller read still matches its own copy: the run goes ahead
    result = agent.run(seen, "set n to 2", expected_version=payload_version(seen))
    assert result.payload == {"status": "draft", "n": 2}
    with pytest.raises(StalePayloadError):
        store.replace(result.payload, expected_version=read_version)
    assert store.get()[0] == {"status": "sent", "n": 1}


def test_task_naming_the_value_delete_gets_another_marker() -> None:
    """The task asks for the method DELETE on an existing array element: the agent activates
    "__DELETE__", names it in the prompt; the model's plain "DELETE" in updateElements goes
    back (stale_marker, issue 30) and newElements writes it as data."""
    from agent_payload.testing import ScriptedModel

    payload = {"endpoints": [{"path": "/s", "method": "GET"}, {"path": "/s", "method": "POST"}]}
    model = ScriptedModel(
        [
            '{"updateElements":{"endpoints":{"1":{"method":"DELETE"}}}}',
            '{"newElements":{"endpoints":{"1":{"method":"DELETE"}}}}',
        ]
    )
    result = PayloadAgent(model).run(payload, "Change the POST endpoint's method to DELETE")
    assert result.marker == "__DELETE__"
    assert '"__DELETE__"' in model.requests[0].messages[0].content
    assert result.payload["endpoints"][1] == {"path": "/s", "method": "DELETE"}


def test_tool_mode_corrections_ask_for_a_tool_call() -> None:
    """In tool mode the correction repeats the tool reply contract, not the text one (no 'one
    minified JSON object' instructions to a model that must call a tool)."""
    from agent_payload.testing import ScriptedModel

    model = ScriptedModel(['{"updateElement":{"a":2}}', '{"updateElements":{"a":2}}'])
    result = PayloadAgent(model, output_mode="tool").run({"a": 1}, "set a to 2")
    assert result.payload == {"a": 2}
    correction = model.requests[1].messages[-1].content
    assert "calling the tool" in correction
    assert "minified JSON object" not in correction


def test_an_error_ending_a_run_carries_attempts_and_usage() -> None:
    """A refusal (or a provider failure) that ends a run still accounts for the tokens spent:
    the error carries the run's attempts and summed usage."""
    from agent_payload.errors import RefusalError
    from agent_payload.providers.base import ModelReply
    from agent_payload.testing import ScriptedModel
    from agent_payload.usage import Usage

    refusal = ModelReply("I'm sorry, but I can't help with that.", usage=Usage(100, 10, 1))
    model = ScriptedModel([refusal, refusal])
    with pytest.raises(RefusalError) as caught:
        PayloadAgent(model, max_retries=3).run({"a": 1}, "set a to 2")
    assert caught.value.attempts == 2
    assert caught.value.usage == Usage(200, 20, 2)


@pytest.mark.parametrize("as_model", [True, False])
def test_a_misspelt_field_goes_back_to_the_model(as_model: bool) -> None:
    """A change to a key the payload type ignores would be dropped by validation: instead of a
    silent no-op 'success', the model is told the field does not exist and corrects it."""
    from pydantic import BaseModel

    from agent_payload.testing import ScriptedModel

    class Invoice(BaseModel):
        status: str = "draft"

    model = ScriptedModel(
        ['{"updateElements":{"stauts":"issued"}}', '{"updateElements":{"status":"issued"}}']
    )
    agent = PayloadAgent(model)
    if as_model:
        result = agent.run(Invoice(), "issue it")
        assert result.payload == Invoice(status="issued")
    else:
        result = agent.run({"status": "draft"}, "issue it", payload_type=Invoice)
        assert result.payload == {"status": "issued"}
    assert result.attempts == 2
    assert "stauts" in model.requests[1].messages[-1].content


def test_a_payload_that_already_fails_its_type_is_refused_before_any_request() -> None:
    """run(payload, payload_type=M) with a payload that does not fit M is the caller's problem:
    PayloadValidationError at once, no model request, instead of retries blaming the model."""
    from pydantic import BaseModel

    from agent_payload.errors import PayloadValidationError
    from agent_payload.testing import ScriptedModel

    class M(BaseModel):
        a: list[int]

    model = ScriptedModel(["{}"] * 3)
    with pytest.raises(PayloadValidationError, match="before any change"):
        PayloadAgent(model).run({"a": "x"}, "t", payload_type=M)
    assert len(model.requests) == 0


def test_text_that_is_not_unicode_is_refused_before_any_request() -> None:
    """A lone surrogate cannot be sent to a provider: InvalidPayloadError before any request
    (instead of a bare UnicodeEncodeError from inside the SDK)."""
    from agent_payload.errors import InvalidPayloadError
    from agent_payload.testing import ScriptedModel

    model = ScriptedModel(["{}"])
    with pytest.raises(InvalidPayloadError, match="lone surrogate"):
        PayloadAgent(model).run({"s": "\ud800"}, "t")
    assert len(model.requests) == 0


def test_the_result_shares_nothing_with_the_payload_now_that_intake_does_not_copy() -> None:
    """Issue 33: the run reads the caller's payload without copying it at intake; the result
    is still an independent copy (the merge's), and the payload is never modified, even by a
    validator that mutates the result of a refused first attempt."""
    payload = {"items": [{"sku": "A", "qty": 1}], "meta": {"tags": ["x"]}}
    before = copy.deepcopy(payload)
    seen: list[dict[str, Any]] = []

    def mutating_validator(result: Any) -> None:
        seen.append(result)
        result["meta"]["tags"].append("mutated by the validator")
        if len(seen) == 1:
            raise ValueError("try again")

    reply = json.dumps({"updateElements": {"items": [{"qty": 2}]}})
    agent = PayloadAgent(ScriptedModel([reply, reply]), validators=[mutating_validator])
    result = agent.run(payload, "two of A")
    assert payload == before
    assert result.payload["items"][0]["qty"] == 2
    assert result.payload["meta"]["tags"] == ["x", "mutated by the validator"]
    result.payload["items"][0]["sku"] = "changed"
    assert payload == before
